#!/usr/bin/env python3
"""`make test`: the whole suite in two phases, then one summary of both.

1. The pure tiers (tests/unit, tests/report: no root, no traffic, CPU-bound) on every core with
   pytest-xdist. One pytest process uses one core; these tiers are ~9 min of CPU here.
2. Everything else (tests/netns, tests/remote, the VM lab tiers, and the pure-tier tests
   marked `serial`) in one process, one test at a time: their figures are ratios measured on
   the host's cores, which a parallel test would skew.

Each phase prints pytest's own summary (-ra: every skip with its reason). The last lines add
both phases up: passed, failed, errors, skipped, each skip reason with its count, and the wall
time of each phase. The exit code is non-zero when either phase failed.

`make test TEST_ARGS="..."` bypasses the phases: one pytest with those arguments.

SIGTERM or SIGHUP (a CI timeout, a closed terminal) is passed on to the running pytest, which
tears its fixtures down (tests/sigterm_teardown.py) before this script stops; the next phase
does not start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PURE = ["tests/unit", "tests/report"]
# pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else broke the run
OK_CODES = (0, 5)
PHASE_ENV = "TUNBENCH_TEST_PHASE"


@dataclass
class Phase:
    key: str     # TUNBENCH_TEST_PHASE for tests/conftest.py
    name: str
    argv: list[str]
    junit: Path
    code: int = 0
    seconds: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    skips: Counter[str] = field(default_factory=Counter)


def phases(python: str, tmp: Path) -> list[Phase]:
    """tests/conftest.py keeps each phase's tests by TUNBENCH_TEST_PHASE: the pure tiers
    without their `serial` tests, then everything else."""
    workers = str(max(1, min(os.cpu_count() or 1, 8)))
    return [Phase("pure", "pure tiers (unit, report) on " + workers + " workers",
                  [python, "-m", "pytest", "-n", workers, *PURE], tmp / "pure.xml"),
            Phase("live", "netns, remote, VM lab tiers and serial tests, one at a time",
                  [python, "-m", "pytest", "tests"], tmp / "live.xml")]


def read_junit(phase: Phase) -> None:
    """Counts and skip reasons of one phase from its JUnit XML (absent: the run broke)."""
    try:
        root = ET.parse(phase.junit).getroot()
    except (OSError, ET.ParseError):
        return
    for case in root.iter("testcase"):
        outcome = "passed"
        for tag, name in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            el = case.find(tag)
            if el is not None:
                outcome = name
                if tag == "skipped":
                    phase.skips[(el.get("message") or "no reason given").strip()] += 1
                break
        phase.counts[outcome] += 1


def summary(done: list[Phase]) -> list[str]:
    total: Counter[str] = Counter()
    skips: Counter[str] = Counter()
    for p in done:
        total.update(p.counts)
        skips.update(p.skips)
    lines = [f"{p.name}: {p.seconds / 60:.1f} min, pytest exit {p.code}, "
             + ", ".join(f"{p.counts[k]} {k}" for k in ("passed", "failed", "errors", "skipped"))
             for p in done]
    wall = sum(p.seconds for p in done)
    lines.append(f"make test: {total['passed']} passed, {total['failed']} failed, "
                 f"{total['errors']} errors, {total['skipped']} skipped in {wall / 60:.1f} min")
    for reason, n in sorted(skips.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  skipped {n}x: {reason}")
    return lines


STOPPED: list[int] = []   # the signal that stopped the run, once one came


def call(argv: list[str], **kw: object) -> int:
    """subprocess.call, passing SIGTERM and SIGHUP on to the child and waiting for it: the
    child's teardown, not this script's death, ends the run."""
    child = subprocess.Popen(argv, **kw)  # type: ignore[call-overload]

    def forward(signum: int, frame: object) -> None:
        STOPPED.append(signum)
        child.send_signal(signum)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return int(child.wait())
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv: list[str]) -> int:
    python = sys.executable
    extra = argv[1:]
    if extra:   # TEST_ARGS given: the developer's own selection, one pytest
        return call([python, "-m", "pytest", *extra], cwd=ROOT)
    with tempfile.TemporaryDirectory(prefix="tb-tests-") as tmp:
        done = []
        for phase in phases(python, Path(tmp)):
            print(f"\n===== make test: {phase.name} =====", flush=True)
            t0 = time.monotonic()
            phase.code = call([*phase.argv, f"--junitxml={phase.junit}"], cwd=ROOT,
                              env={**os.environ, PHASE_ENV: phase.key})
            phase.seconds = time.monotonic() - t0
            read_junit(phase)
            done.append(phase)
            if STOPPED:
                print(f"\nmake test: stopped by {signal.Signals(STOPPED[0]).name} "
                      f"during {phase.name}; its fixtures were torn down", flush=True)
                return 128 + STOPPED[0]
        print("\n===== make test: both phases =====")
        print("\n".join(summary(done)), flush=True)
    broken = [p for p in done if p.code not in OK_CODES or p.counts["failed"]
              or p.counts["errors"]]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
