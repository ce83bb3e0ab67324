"""Every command and sub-command renders its --help (a stray '%' in a help text breaks argparse
only when that help is printed), and each lists the exit codes."""

from __future__ import annotations

import argparse

from tunbench import cli


def _parsers(p: argparse.ArgumentParser, path: str = "tunbench"):
    yield path, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_help_renders() -> None:
    seen = []
    for path, p in _parsers(cli.build_parser()):
        text = p.format_help()
        assert text.startswith("usage:"), path
        seen.append(path)
    assert {"tunbench run", "tunbench db import", "tunbench schedule add",
            "tunbench trend", "tunbench advise"} <= set(seen)


def test_advise_options_on_report_too() -> None:
    """`tunbench report` takes the constraints of `tunbench advise`, with the same help."""
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    opts = {name: {o: a.help for a in p._actions for o in a.option_strings}
            for name, p in sub.choices.items() if name in ("advise", "report")}
    for flag in ("--need", "--min-mtu", "--max-cpu-per-gbit", "--streams", "--prefer"):
        assert opts["advise"][flag] == opts["report"][flag], flag


def test_top_level_commands_list_exit_codes() -> None:
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert "exit codes:" in p.format_help(), name
