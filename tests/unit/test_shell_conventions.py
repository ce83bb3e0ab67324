"""Shell conventions (issue 30) through the real CLI on the recorded campaigns: a stdout closed
early ends quietly with 141 (what a shell shows for a SIGPIPE'd tool), output paths are
checked before any work (one line, exit 2, nothing half-written or created elsewhere),
`db import FILE` names what the file is, `--debug` works after every command and action."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import cli_inproc
from tunbench import cli, shell

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"
IDLE, KINDS = CAMPAIGNS / "idle", CAMPAIGNS / "kinds"
TB = [sys.executable, "-m", "tunbench"]


def _into_head(argv: list[str]) -> tuple[int, str, bytes]:
    """`tunbench ARGV | head -1` with the real head: (tunbench's status, its stderr, what
    head printed)."""
    tb = subprocess.Popen([*TB, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.Popen(["head", "-1"], stdin=tb.stdout, stdout=subprocess.PIPE)
    assert tb.stdout is not None and tb.stderr is not None
    tb.stdout.close()          # only head holds the read end now
    shown, _ = head.communicate(timeout=120)
    err = tb.stderr.read().decode()
    return tb.wait(timeout=120), err, shown


def _closed_before(argv: list[str]) -> tuple[int, str]:
    """The same with a pipe whose reader is gone before the command writes (a pager quit at
    once): any output, however short, meets the closed end."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([*TB, *argv], stdout=w, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(w)
    return p.returncode, p.stderr.decode()


def _quiet(code: int, err: str) -> None:
    # neither 1 (compare's "regression") nor 70 (internal error): the status of a tool ended
    # by SIGPIPE, and no message
    assert code == shell.EXIT_PIPE == 141, err
    assert "internal error" not in err and "Traceback" not in err and "Broken" not in err


@pytest.mark.parametrize("argv", [
    ["compare", str(IDLE), str(IDLE)],
    ["export", *map(str, sorted(CAMPAIGNS.iterdir())), "--format", "jsonl"],
])
def test_piped_into_head_never_reads_as_a_regression_or_a_bug(argv: list[str]) -> None:
    """The issue's `compare A A | head` (and a 700 KB export): head's line shown, and
    tunbench ends quietly: 141 where its write met the closed pipe (0 where the kernel took
    all it wrote before head left), never 1 ("regression") or 70 (internal error)."""
    code, err, shown = _into_head(argv)
    assert shown.count(b"\n") == 1
    assert code in (0, shell.EXIT_PIPE), (code, err)
    assert "internal error" not in err and "Traceback" not in err and "Broken" not in err


@pytest.mark.parametrize("argv", [
    ["compare", str(IDLE), str(IDLE)],
    ["trend", str(CAMPAIGNS)],
    ["export", str(IDLE)],
    ["list"],
])
def test_a_pipe_closed_early_ends_quietly(argv: list[str]) -> None:
    _quiet(*_closed_before(argv))


def test_compare_read_to_its_end_exits_0() -> None:
    r = subprocess.run([*TB, "compare", str(IDLE), str(IDLE)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def _one_line(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and "internal error" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def _tb(*argv: str) -> subprocess.CompletedProcess[str]:
    """`tunbench ARGV` in this process (cli_inproc): its one-line refusals and exit codes
    are cli.main's; the pipe tests above and the --debug traceback below run the real CLI."""
    return cli_inproc.tunbench(*argv)


def test_output_paths_are_checked_before_any_work(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep")
    missing = tmp_path / "no" / "such"
    # trend --out: a folder is needed
    _one_line(_tb("trend", str(IDLE), "--out", str(afile)), "is a file, not a folder")
    _one_line(_tb("trend", str(IDLE), "--out", str(missing)), "does not exist", "mkdir -p")
    # export --out and db query -o: a file is needed
    _one_line(_tb("export", str(IDLE), "--out", str(tmp_path)), "is a folder, not a file")
    _one_line(_tb("export", str(IDLE), "--out", str(missing)), "does not exist")
    _one_line(_tb("export", str(IDLE), "--out", str(afile / "x.csv")), "is a file")
    store = tmp_path / "r.db"
    assert _tb("db", "import", "--db", str(store), str(IDLE)).returncode == 0
    _one_line(_tb("db", "query", "--db", str(store), "-o", str(tmp_path)), "is a folder")
    _one_line(_tb("db", "query", "--db", str(store), "-o", str(missing)), "does not exist")
    _one_line(_tb("db", "import", "--db", str(missing), str(IDLE)), "--db", "does not exist")
    # report DIR where DIR/report is a file
    camp = tmp_path / "camp"
    shutil.copytree(IDLE, camp, ignore=shutil.ignore_patterns("report"))
    (camp / "report").write_text("not a folder")
    _one_line(_tb("report", str(camp)), "is a file, not a folder")
    assert afile.read_text() == "keep" and (camp / "report").read_text() == "not a folder"
    assert not (tmp_path / "no").exists() and not list(tmp_path.glob("*.csv"))


def test_trend_never_creates_a_folder_at_the_root(tmp_path: Path) -> None:
    at_root = Path("/") / f"tunbench-test-{uuid.uuid4().hex[:8]}"
    _one_line(_tb("trend", str(IDLE), "--out", str(at_root)), "filesystem root")
    assert not at_root.exists()
    out = tmp_path / "trend"          # a new folder in an existing one is fine
    r = _tb("trend", str(IDLE), str(KINDS), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "trend.json").is_file() and (out / "index.html").is_file()


def test_db_import_of_a_file_names_what_it_is(tmp_path: Path) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    r = _tb("db", "import", "--db", str(tmp_path / "r.db"), str(afile))
    _one_line(r, "is a file, not a result folder")
    assert "does not exist" not in r.stderr
    # the campaign's index.json named directly imports its folder
    r = _tb("db", "import", "--db", str(tmp_path / "r.db"), str(IDLE / "index.json"))
    assert r.returncode == 0 and "1 added" in r.stdout, r.stderr
    _one_line(_tb("db", "import", "--db", str(tmp_path / "r.db"),
                  str(tmp_path / "absent")), "does not exist")


def test_readers_never_write_a_store_into_an_empty_file(tmp_path: Path) -> None:
    """An empty file opens as a new SQLite database: db query and trend named one would
    have written the schema into it."""
    empty = tmp_path / "empty"
    empty.touch()
    _one_line(_tb("db", "query", "--db", str(empty)), "no results store", "empty file")
    _one_line(_tb("trend", str(empty)), "no results store")
    assert empty.stat().st_size == 0


def _leaves(p: argparse.ArgumentParser, path: tuple[str, ...] = ()
            ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = [(path, p)]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                out += _leaves(child, (*path, name))
    return out


def test_debug_is_accepted_after_every_command_and_action() -> None:
    parser = cli.build_parser()
    leaves = [path for path, p in _leaves(parser) if path]
    assert ("db", "import") in leaves and ("schedule", "list") in leaves
    for path, p in _leaves(parser):
        if path:
            assert "--debug" in p._option_string_actions, path
    # parsed at the end of an action's arguments, and the one before the command kept
    ns = parser.parse_args(["db", "import", "somedir", "--debug"])
    assert ns.debug is True and ns.dirs == ["somedir"]
    ns = parser.parse_args(["--debug", "schedule", "list"])
    assert ns.debug is True
    ns = parser.parse_args(["schedule", "list"])
    assert ns.debug is False


def test_debug_after_an_action_shows_the_traceback(tmp_path: Path) -> None:
    r = subprocess.run([*TB, "db", "query", "--db", str(tmp_path / "none.db"), "--debug"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("tunbench: no results store")
