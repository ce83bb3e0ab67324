"""iperf3's flags on `tunbench run` typed as iperf3 users type them (-t 2 -P 4 -R, -t2, -P
1,4,16, --bidir), parsed into the experiment without a TOML file; the help grouped by task;
the exit-code table once at the top, each command listing only the codes it can return.
Pure: the parser, the experiment it builds and the iperf3 argv, no testbed."""

from __future__ import annotations

import argparse
import re

import pytest

import cli_inproc
from tunbench import cli, cli_help, spec
from tunbench.workloads.parallel_streams import ParallelStreamsParams
from tunbench.workloads.stream import StreamParams, client_argv


def _exp(*argv: str) -> spec.Experiment:
    args = cli.build_parser().parse_args(["run", "--tunnels", "native", *argv])
    return cli.spec_from_args(args)


def _refused(*argv: str) -> str:
    """`tunbench run --dry-run ARGV`: one line on stderr, exit 2; the line."""
    r = cli_inproc.tunbench("run", "--dry-run", "--tunnels", "native", *argv)
    assert r.returncode == 2, (argv, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunbench: ") and r.stdout == ""
    return lines[0]


@pytest.mark.parametrize("argv", [["-t", "2", "-P", "4", "-R"], ["-t2", "-P4", "-R"],
                                  ["--duration=2", "--streams=4", "--reverse"],
                                  ["-R", "-P", "4", "-t", "2"]])
def test_iperf3_short_and_long_forms(argv: list[str]) -> None:
    exp = _exp(*argv)
    assert exp.duration == 2.0
    (wl,) = exp.workloads
    assert (wl.name, wl.label) == ("stream", "stream")
    assert isinstance(wl.params, StreamParams)
    assert wl.params.streams == 4 and wl.params.reverse and not wl.params.bidir
    assert wl.to_dict()["params"]["reverse"] is True   # what the case records


def test_stream_counts_list_runs_one_case_each() -> None:
    exp = _exp("-P", "1,4,16")
    assert [(w.label, w.params.streams) for w in exp.workloads] == [
        ("stream-1", 1), ("stream-4", 4), ("stream-16", 16)]
    assert all(not w.params.reverse for w in exp.workloads)


def test_stream_counts_on_a_sweeping_workload_are_its_sweep() -> None:
    exp = _exp("--workloads", "parallel-streams", "-P", "1,4", "-R")
    assert [(w.label, w.params.streams, w.params.reverse) for w in exp.workloads] == [
        ("parallel-streams-1", 1, True), ("parallel-streams-4", 4, True)]


def test_bidir_reaches_iperf3_as_its_own_flag() -> None:
    exp = _exp("--bidir", "-P", "2")
    (wl,) = exp.workloads
    assert wl.params.bidir and not wl.params.reverse and wl.params.streams == 2
    argv = client_argv("10.0.0.2", 5201, 2, 0, wl.params)
    assert "--bidir" in argv and "-R" not in argv and argv[argv.index("-P") + 1] == "2"
    rev = client_argv("10.0.0.2", 5201, 2, 0, _exp("-R").workloads[0].params)
    assert "-R" in rev and "--bidir" not in rev


def test_bidir_and_reverse_reach_parallel_streams_and_every_iperf3_process() -> None:
    exp = _exp("--workloads", "stream,parallel-streams", "--bidir", "-P", "1,4")
    by = {w.label: w.params for w in exp.workloads}
    assert sorted(by) == ["parallel-streams-1", "parallel-streams-4", "stream-1", "stream-4"]
    assert all(p.bidir and not p.reverse for p in by.values())
    ps = by["parallel-streams-4"]
    assert isinstance(ps, ParallelStreamsParams) and ps.streams == 4
    base = StreamParams(1, ps.reverse, ps.length, ps.congestion, bidir=ps.bidir)
    assert "--bidir" in client_argv("10.0.0.2", 5201, 2, 0, base)
    (rev,) = _exp("--workloads", "parallel-streams", "-R", "-P", "4").workloads
    assert rev.params.reverse and not rev.params.bidir
    assert rev.to_dict()["params"]["reverse"] is True      # the case records the direction


@pytest.mark.parametrize("flag, key", [("-R", "reverse"), ("--bidir", "bidir")])
def test_direction_on_a_preset_sweep_sets_every_point(flag: str, key: str) -> None:
    """The parallel-streams preset gives streams = [1, ..., 512]: -R / --bidir apply to each
    point (they were refused as "streams must be int" before)."""
    exp = _exp("--preset", "parallel-streams", flag)
    pts = [w.params for w in exp.workloads if w.name == "parallel-streams"]
    assert sorted(p.streams for p in pts) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert all(getattr(p, key) for p in pts)


def test_flags_set_every_workload_that_takes_them_and_only_those() -> None:
    exp = _exp("--workloads", "stream,latency", "-R")
    by = {w.name: w.params for w in exp.workloads}
    assert by["stream"].reverse
    assert not hasattr(by["latency"], "reverse")


@pytest.mark.parametrize("argv, needle", [
    (["-R", "--bidir"], "--bidir: not allowed with argument -R/--reverse"),
    (["-P", "0"], "-P/--streams '0': '0' is not a stream count"),
    (["-P", "1,,4"], "--streams '1,,4' has an empty element"),
    (["-P", "4,4"], "--streams '4,4' names 4 twice"),
    (["-P", "200"], "-P/--streams: streams 200 out of range (1..128"),
    (["--bidir", "--workloads", "latency"], "--bidir applies to none of the workloads chosen"),
    (["--bidir", "--workloads", "parallel-streams,udp-rate"],
     "--bidir: udp-rate cannot send both ways at once"),
    (["--bidir", "--workloads", "stream,line-rate-processes,latency"],
     "--bidir: line-rate-processes cannot send both ways at once"),
    (["-t", "nan"], "--duration must be a number"),
])
def test_bad_values_one_line_exit_2(argv: list[str], needle: str) -> None:
    assert needle in _refused(*argv)


# -- help ------------------------------------------------------------------------------------

def _commands() -> dict[str, argparse.ArgumentParser]:
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_run_help_groups_flags_by_task() -> None:
    text = _commands()["run"].format_help()
    heads = ["what to measure:", "how long and how often:", "where (testbed", "output:"]
    at = [text.index(h) for h in heads]
    assert at == sorted(at)
    what, when = text[at[0]:at[1]], text[at[1]:at[2]]
    assert "-P N[,N...], --streams" in what and "-R, --reverse" in what and "--bidir" in what
    assert "-t SECONDS, --duration" in when and "--repeats" in when
    assert "--out DIR" in text[at[3]:]


def test_top_level_help_lists_commands_by_task_advise_near_the_top() -> None:
    text = cli.build_parser().format_help()
    tasks = [t for t, _ in cli_help.TASKS]
    at = [text.index(f"\n{t}:\n") for t in tasks]
    assert at == sorted(at) and "\nother:\n" not in text
    listed = [ln.split()[0] for ln in text[at[0]:].splitlines()
              if ln.startswith("  ") and not ln.startswith("   ") and ln.split()
              and ln.split()[0] in _commands()]
    assert sorted(listed) == sorted(_commands()) and len(listed) == len(set(listed))
    assert listed.index("advise") <= 3


def test_exit_table_once_each_command_its_own_codes() -> None:
    top = cli.build_parser().format_help()
    assert top.count("exit codes:") == 1 and cli.EXIT_CODES in top
    table = {int(ln.split()[0]) for ln in cli.EXIT_CODES.splitlines()[1:]}
    for name, p in _commands().items():
        text = p.format_help()
        assert text.count("exit codes:") == 1 and cli.EXIT_CODES not in text, name
        section = text.split("exit codes:", 1)[1]
        codes = {int(m[1]) for m in re.finditer(r"(?m)^  (\d+) {2,}\S", section)}
        assert codes == {0, *cli_help.COMMAND_EXITS[name]}, name
        assert codes <= table
    assert "regression" not in _commands()["list"].format_help()
    assert "regression" in _commands()["compare"].format_help()
