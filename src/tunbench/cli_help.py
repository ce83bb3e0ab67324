"""What `tunbench --help` and each command's help say beyond their flags: the commands by
task, the exit-code table (once, at the top level), and per command only the codes it can
return. Pure text over the parser; cli.build_parser uses it."""

from __future__ import annotations

import argparse

# every code tunbench ends with, once (tunbench --help); README "Exit codes" says the same
EXIT_TABLE = """\
exit codes:
  0    ok
  1    a negative result: every case failed (run), a significant regression (compare), ...
  2    invalid input (flag, experiment file, parameter, result folder); nothing was changed
  3    not possible on this host (kernel feature, tool, privilege); nothing was changed
  4    a command failed
  70   internal error (a bug in tunbench; rerun with --debug for the traceback)
  130  interrupted (SIGINT/SIGTERM); everything created was removed
  141  stdout closed early (| head, a pager quit): ended quietly, as by SIGPIPE
"""

# what each command can end with besides the codes every command can (70, 130, 141)
_INPUT = "invalid input; nothing was changed"
_HOST = "not possible on this host (tool, kernel, privilege); nothing was changed"
COMMAND_EXITS: dict[str, dict[int, str]] = {
    "run": {1: "every case failed", 2: _INPUT, 3: _HOST,
            4: "a command failed (e.g. a remote site)"},
    "advise": {2: "invalid input or result folder"},
    "report": {2: "invalid input or result folder"},
    "export": {2: "invalid input, result folder or output path"},
    "compare": {1: "a significant regression beyond --threshold",
                2: "nothing comparable (settings differ, nothing in common, untested "
                   "entries) or invalid input"},
    "trend": {2: "invalid input, store or output path"},
    "db": {1: "the Pushgateway refused or could not be reached (db export)",
           2: "invalid input, store or output path"},
    "schedule": {1: "the scheduled run failed (schedule run)", 2: _INPUT, 3: _HOST},
    "list": {2: "unknown kind or workload"},
    "doctor": {1: "doctor --probe could not tear down its testbed", 2: _INPUT,
               3: "the remote host cannot be reached or checked",
               4: "a command failed"},
    "prepare": {1: "an install failed on a host", 2: _INPUT,
                3: "a host cannot be reached", 4: "a command failed"},
    "cleanup": {1: "not root, or the run is still running", 2: _INPUT,
                3: "the remote host cannot be reached", 4: "a command failed"},
    "tunnel-rules": {1: "no such running site or rule table", 2: _INPUT, 3: _HOST,
                     4: "a command failed"},
}

# `tunbench --help` lists the commands by what they are for; a command missing here is
# listed under "other" (test_cli_flags checks there is none)
TASKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("measure", ("run", "doctor", "list")),
    ("decide", ("advise", "report", "export")),
    ("compare over time", ("compare", "trend", "db", "schedule")),
    ("manage", ("prepare", "cleanup", "tunnel-rules")),
)


def command_epilog(name: str) -> str:
    """The exit codes one command can return; the full table is in `tunbench --help`."""
    codes = {0: "ok", **COMMAND_EXITS.get(name, {2: _INPUT})}
    lines = [f"  {code:<4} {text}" for code, text in sorted(codes.items())]
    return ("exit codes:\n" + "\n".join(lines) + "\n  and as every command: 70 internal "
            "error, 130 interrupted,\n  141 stdout closed early (the table: tunbench --help)\n")


def commands_by_task(sub: argparse._SubParsersAction) -> str:   # type: ignore[type-arg]
    """The COMMAND list of `tunbench --help`, grouped by task, each with its one-line help."""
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    width = max(len(n) for n in helps) + 2
    placed: set[str] = set()
    out = []
    groups = [*TASKS, ("other", tuple(n for n in helps
                                      if all(n not in names for _, names in TASKS)))]
    for task, names in groups:
        names = tuple(n for n in names if n in helps)
        if not names:
            continue
        out.append(f"{task}:")
        for n in names:
            placed.add(n)
            out.append(_wrap(f"  {n:<{width}}", helps[n]))
    return "\n".join(out)


def _wrap(head: str, text: str, width: int = 92) -> str:
    """`head` then `text` wrapped under itself (argparse's own width is not used here)."""
    import textwrap
    lines = textwrap.wrap(text, width - len(head), break_on_hyphens=False) or [""]
    pad = " " * len(head)
    return "\n".join([head + lines[0], *(pad + line for line in lines[1:])])
