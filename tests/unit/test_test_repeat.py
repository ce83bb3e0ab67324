"""make test-repeat (scripts/test_repeat.py) end to end: the real script runs a real pytest N
times on a throwaway module whose test fails by a fixed rule (in run 2 of 3), and its summary
and result.json are read back. No pytest is mocked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_repeat.py"

FLAKY = '''
import os
import time

import pytest

RUN = int(os.environ["TUNBENCH_REPEAT_RUN"])


def test_flaky():
    assert RUN != 2, f"run {RUN} is the bad one\\nsecond line"


def test_slow():
    time.sleep(0.3)


@pytest.mark.skip(reason="needs a NIC")
def test_nic():
    pass
'''

BROKEN_TEARDOWN = '''
import pytest


@pytest.fixture
def fx():
    yield
    raise RuntimeError("teardown broke")


def test_both(fx):
    assert 1 == 2


def test_fine():
    pass
'''


def repeat(tmp_path: Path, module: str, runs: int) -> tuple[int, str, dict]:
    """The script's exit code, its summary (the lines after its last ===== header) and the
    result.json it names."""
    (tmp_path / "test_mod.py").write_text(module)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["TMPDIR"] = str(tmp_path)   # the runs' directory: under tmp_path
    r = subprocess.run([sys.executable, str(SCRIPT), "-n", str(runs), "--", "-p", "no:xdist",
                        "-p", "no:cacheprovider", str(tmp_path / "test_mod.py")],
                       env=env, capture_output=True, text=True, timeout=300)
    summary = r.stdout.rsplit("===== make test-repeat:", 1)[-1]
    path = re.search(r"^result: (\S+)", summary, re.M)
    assert path, r.stdout[-3000:] + r.stderr[-3000:]
    assert Path(path[1]).parent.parent == tmp_path
    return r.returncode, summary, json.loads(Path(path[1]).read_text())


def section(summary: str, first: str, until: str) -> list[str]:
    lines = summary.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(first))
    end = next(i for i, ln in enumerate(lines) if i > start and ln.startswith(until))
    return lines[start + 1:end]


def test_a_test_failing_in_one_of_three_runs(tmp_path: Path) -> None:
    code, summary, result = repeat(tmp_path, FLAKY, 3)
    print(summary)   # pytest -s shows the sample
    assert code == 1
    assert summary.startswith(" 3 of 3 runs: ")
    # the table: exactly the flaky test, 1 of 3 runs (run 2), its message's first line
    table = section(summary, "tests that failed or errored in at least one of 3 runs:",
                    "1 of 3 tests passed in every run")
    assert table[0].split() == ["failed", "in", "runs", "test", "first", "line", "of", "each",
                                "distinct", "message"]
    assert [row.split(None, 3) for row in table[1:]] == [
        ["1/3", "2", "test_mod.py::test_flaky", "AssertionError: run 2 is the bad one"]]
    assert "no test failed" not in summary
    assert "  skipped, 1 test: needs a NIC" in summary.splitlines()
    slowest = section(summary, "the 3 slowest tests (median over the runs, min, max):",
                      "run 1/3:")
    # the two fast ones take about 0 ms each: their order is the host's, not the summary's
    names = [row.split()[-1] for row in slowest]
    assert names[0] == "test_mod.py::test_slow"
    assert sorted(names[1:]) == ["test_mod.py::test_flaky", "test_mod.py::test_nic"]
    med, lo, hi = map(float, re.findall(r"\d+\.\d+", slowest[0]))
    assert 0.3 <= lo <= med <= hi < 5
    runs = [ln for ln in summary.splitlines() if ln.startswith("run ")]
    assert [re.sub(r": \d+\.\d s,", ":", ln) for ln in runs] == [
        "run 1/3: pytest exit 0, 2 passed, 0 failed, 0 errors, 1 skipped",
        "run 2/3: pytest exit 1, 1 passed, 1 failed, 0 errors, 1 skipped",
        "run 3/3: pytest exit 0, 2 passed, 0 failed, 0 errors, 1 skipped"]
    assert result["failed"] == [{"test": "test_mod.py::test_flaky", "failed_runs": 1, "runs": 3,
                                 "in_runs": [2],
                                 "messages": ["AssertionError: run 2 is the bad one"]}]
    assert result["passed_every_run"] == 1 and result["tests"] == 3
    assert result["skipped"] == [{"reason": "needs a NIC", "tests": 1}]
    assert result["slowest"][0]["test"] == "test_mod.py::test_slow"
    assert [r["failed"] for r in result["per_run"]] == [0, 1, 0]
    assert result["ok"] is False and result["broken_runs"] == [] and result["stopped"] is None
    assert all(Path(r["junit"]).is_file() for r in result["per_run"])


def test_no_failure_in_any_run(tmp_path: Path) -> None:
    code, summary, result = repeat(tmp_path, FLAKY.replace("RUN != 2", "RUN != 7"), 2)
    assert code == 0
    lines = summary.splitlines()
    assert lines[1:4] == ["no test failed in any of 2 runs", "2 of 3 tests passed in every run",
                          "  skipped, 1 test: needs a NIC"]
    assert result["ok"] is True and result["failed"] == []


def test_a_failure_and_a_teardown_error_are_one_row(tmp_path: Path) -> None:
    """pytest writes two <testcase> for a test that failed and then broke in its teardown."""
    code, summary, result = repeat(tmp_path, BROKEN_TEARDOWN, 1)
    assert code == 1
    assert result["failed"] == [{
        "test": "test_mod.py::test_both", "failed_runs": 1, "runs": 1, "in_runs": [1],
        "messages": ["assert 1 == 2", 'failed on teardown with "RuntimeError: teardown broke"']}]
    assert result["passed_every_run"] == 1
    table = section(summary, "tests that failed or errored", "1 of 2 tests passed")
    assert len(table) == 3 and table[2].strip() == result["failed"][0]["messages"][1]
