"""`tunbench ARGS` run in the test's own process: the entry function `python -m tunbench`
runs (cli.main: parsing, the command, every error turned into one line and its exit code),
with stdout and stderr captured, as a subprocess.CompletedProcess.

For tests that check what a command prints and returns, not the process around it: a
`python -m tunbench` child spends ~0.5-1 CPU s importing before it starts (scipy, matplotlib,
pyroute2), which the test process has already paid. Tests of what only a real process shows
(a closed pipe's SIGPIPE, what a shell sees, `--debug` tracebacks at exit) keep the real CLI.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tunbench import cli


@contextlib.contextmanager
def _env(extra: dict[str, str | None] | None) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in extra or {}}
    for k, v in (extra or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def tunbench(*args: str | Path, env: dict[str, str | None] | None = None,
             check: bool = False) -> subprocess.CompletedProcess[str]:
    """cli.main(args) with its output captured; `env`: variables set (None: unset) while it
    runs; `check`: fail the test unless it exits 0 (subprocess.run's check=True)."""
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with _env(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:   # argparse's usage errors (2), --help (0): as the process
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
    done = subprocess.CompletedProcess(["tunbench", *argv], code, out.getvalue(),
                                       err.getvalue())
    assert not check or code == 0, (argv, code, done.stderr)
    return done
