"""make test's summary (scripts/test_phases.py) read from the JUnit XML a real pytest run wrote:
every outcome counted once, skip reasons grouped with their counts, failures make it exit 1."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_phases.py"
_spec = importlib.util.spec_from_file_location("test_phases", SCRIPT)
assert _spec and _spec.loader
tp = importlib.util.module_from_spec(_spec)
sys.modules["test_phases"] = tp
_spec.loader.exec_module(tp)

SAMPLE = '''
import pytest

def test_ok(): pass
def test_ok2(): pass
def test_bad(): assert 1 == 2
@pytest.mark.skip(reason="kernel without X")
def test_s1(): pass
@pytest.mark.skip(reason="kernel without X")
def test_s2(): pass
def test_s3(): pytest.skip("needs tool Y")
@pytest.fixture
def broken(): raise RuntimeError("setup broke")
def test_err(broken): pass
'''


def test_summary_of_a_real_pytest_run(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    junit = tmp_path / "r.xml"
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:xdist", f"--rootdir={tmp_path}", "-c", "/dev/null",
                            str(tmp_path), f"--junitxml={junit}"],
                           stdout=subprocess.DEVNULL, cwd=tmp_path)
    assert code == 1
    phase = tp.Phase("x", "sample", [], junit, code=code, seconds=90.0)
    cases = tp.read_junit(phase)
    assert dict(phase.counts) == {"passed": 2, "failed": 1, "errors": 1, "skipped": 3}
    assert dict(phase.skips) == {"kernel without X": 2, "needs tool Y": 1}
    lines = tp.summary([phase])
    assert lines[0] == "sample: 1.5 min, pytest exit 1, 2 passed, 1 failed, 1 errors, 3 skipped"
    assert lines[1] == ("make test: 2 passed, 1 failed, 1 errors, 3 skipped in 1.5 min (wall)")
    # phases of one group run side by side: the group counts with its longest
    side = [tp.Phase("a", "a", [], junit, seconds=60.0, group=1),
            tp.Phase("b", "b", [], junit, seconds=90.0, group=1),
            tp.Phase("c", "c", [], junit, seconds=30.0, group=2)]
    assert tp.elapsed(side) == 120.0
    assert lines[2:] == ["  skipped 2x: kernel without X", "  skipped 1x: needs tool Y",
                         "tests: 2 passed, 2 failed, 3 skipped"]   # errors count as failed
    # with the cases: the time per tier and the slowest tests, slowest first
    timed = tp.summary([phase], cases)[4:-1]
    assert timed[0].startswith("time per tier (sum of its tests' durations): ")
    assert timed[1] == f"the {min(tp.SLOWEST, len(cases))} slowest tests:"
    seconds = [float(line.split()[0]) for line in timed[2:]]
    assert len(seconds) == len(cases) and seconds == sorted(seconds, reverse=True)
    # every test's time kept under build/ with its phase, slowest first, and the JUnit XML
    kept = tp.keep_times([phase], cases, tmp_path / "kept")
    rows = [ln.split("\t") for ln in kept.read_text().splitlines()]
    assert rows[0] == ["seconds", "phase", "outcome", "test"]
    assert sorted(r[3] for r in rows[1:]) == sorted(c.test for c in cases)
    assert {r[1] for r in rows[1:]} == {"x"}
    assert [float(r[0]) for r in rows[1:]] == sorted((float(r[0]) for r in rows[1:]),
                                                     reverse=True)
    assert {(r[3].split("::")[-1], r[2]) for r in rows[1:]} >= {("test_bad", "failed"),
                                                                ("test_s3", "skipped")}
    assert (tmp_path / "kept" / "r.xml").read_bytes() == junit.read_bytes()


def test_a_phase_without_junit_counts_nothing(tmp_path: Path) -> None:
    phase = tp.Phase("x", "broke", [], tmp_path / "absent.xml", code=3)
    tp.read_junit(phase)
    assert sum(phase.counts.values()) == 0


def _collected(phase: str, listing: Path) -> tuple[set[str], int]:
    """`pytest --collect-only` of the whole suite as make test's phase `phase` runs it: the ids
    it keeps, and how many it collected before the phase filter; each collected test's phase
    written to `listing` (the conftest's phase_of). Assertions are not rewritten: nothing runs."""
    env = {k: v for k, v in os.environ.items() if k not in (tp.PHASE_ENV, PHASE_LIST_ENV)}
    env[tp.PHASE_ENV] = phase
    env[PHASE_LIST_ENV] = str(listing)
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                        "no:xdist", "-p", "no:cacheprovider", "--assert=plain", "tests"],
                       cwd=tp.ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # "42/1920 tests collected (1878 deselected) in 4.61s"
    (total,) = [int(ln.split("/")[1].split()[0]) for ln in r.stdout.splitlines()
                if " tests collected (" in ln and "deselected)" in ln]
    return {ln for ln in r.stdout.splitlines() if ln.startswith("tests/") and "::" in ln}, total


PHASE_LIST_ENV = "TUNBENCH_TEST_PHASE_LIST"   # tests/conftest.py's


def test_the_phases_split_the_suite_exactly(tmp_path: Path) -> None:
    """Every test runs in exactly one phase (pure, vm, remote, beside, live); serial pure-tier
    tests go to the live phase, the VM lab tiers to the vm phase, netns tests marked `beside`
    (none of them physics) to the beside phase. One collection of the whole suite as
    make test's vm phase runs it: every collected test is listed with its phase (the
    conftest's phase_of), and the tests the vm phase keeps are exactly those given that phase
    (the filter make test uses)."""
    listing = tmp_path / "phases.tsv"
    vm_run, collected = _collected("vm", listing)
    rows = [ln.split("\t") for ln in listing.read_text().splitlines()]
    phase = dict(rows)
    assert len(rows) == len(phase) == collected               # every test has one phase
    keys = ("pure", "vm", "remote", "beside", "live")
    got = {k: {n for n, p in phase.items() if p == k} for k in keys}
    assert set(phase.values()) == set(got)                # and no other
    pure, vm, remote, beside, live = (got[k] for k in keys)
    assert pure and vm and remote and beside and live
    assert all(n.startswith("tests/netns/") for n in beside)
    assert vm_run == vm
    assert all(n.startswith("tests/remote/") for n in remote)
    assert all(n.startswith(("tests/unit/", "tests/report/")) for n in pure)
    assert all(n.startswith(("tests/vmlab_bridge/", "tests/vmlab_sites/")) for n in vm)
    assert not any(n.startswith(("tests/vmlab_bridge/", "tests/vmlab_sites/")) for n in live)
    assert any(n.startswith("tests/unit/test_input_fuzz.py") for n in live)
    assert not any(n.startswith("tests/unit/test_input_fuzz.py") for n in pure)
    # the phases make test runs: pure and vm side by side, then live
    with tempfile.TemporaryDirectory() as tmp:
        groups = [(p.key, p.group, p.log is not None) for p in tp.phases("python3", Path(tmp))]
    assert groups == [("pure", 1, False), ("vm", 1, True), ("vm", 1, True), ("remote", 1, True),
                      ("beside", 1, True), ("live", 2, False)]


def test_src_is_byte_compiled_before_the_phases(tmp_path: Path) -> None:
    """compile_src writes each module's current .pyc (which a Python run without writing
    bytecode then reads instead of compiling) and says so in one line."""
    mod = tmp_path / "src" / "tbpkg" / "mod.py"
    mod.parent.mkdir(parents=True)
    (mod.parent / "__init__.py").write_text("")
    mod.write_text("VALUE = 42\n")
    line = tp.compile_src(tmp_path)
    assert line.startswith("make test: src/ byte-compiled in ") and line.endswith(" s"), line
    r = subprocess.run([sys.executable, "-B", "-c", "import tbpkg.mod as m; print(m.VALUE)"],
                       capture_output=True, text=True, check=True, timeout=60,
                       env={"PYTHONPATH": str(tmp_path / "src"), "PYTHONVERBOSE": "1"})
    assert r.stdout.split() == ["42"]
    assert f"matches {mod}" in r.stderr, r.stderr[-2000:]   # read from the .pyc
