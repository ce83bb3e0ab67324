#!/usr/bin/env python3
"""`make test-repeat N=3 TESTS=...`: a flake finder (issue 27). Runs the live tier (make test's
second phase: TUNBENCH_TEST_PHASE=live, `pytest tests`) or the given pytest selection N times
in a row, one pytest after the other, each writing JUnit XML, then prints

1. every test that failed or errored in at least one run: in how many of the N runs (and
   which), and the first line of each distinct failure message;
2. how many tests passed in every run ("no test failed in any of N runs" when none failed)
   and the skip reasons, each counted once per test;
3. the 10 slowest tests: the median of their durations over the runs, with min and max;
4. each run's wall time and counts.

The same aggregate goes to result.json beside the runs' JUnit XML in a new temporary
directory, whose path is printed. The exit code is non-zero when a test failed or errored in
any run or a pytest run broke (exit neither 0, 1 nor 5). Each pytest sees its run number, 1..N, in
TUNBENCH_REPEAT_RUN.

A selection (`test_repeat.py -n N -- ARGS...`) is one plain pytest with those arguments and
without the phase filter: the tests named are the tests run, inside tests/ or not.

SIGTERM, SIGHUP and Ctrl-C are passed on to the running pytest (test_phases.call), which tears
its fixtures down; then this script prints the summary of the runs finished before it and
stops: no further run starts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import test_phases as tp
from test_phases import Phase

PHYSICS_LOG = "TUNBENCH_PHYSICS_LOG"   # each run's physics figures (tests/physics.py)
RUN_ENV = "TUNBENCH_REPEAT_RUN"
BAD = ("failed", "errors")
SLOWEST = 10
MESSAGE_WIDTH = 160   # the table's cut; result.json keeps the whole first line


@dataclass
class Result:
    """One test in one run. pytest writes two <testcase> for a test that failed and then broke
    in its teardown: they are merged here."""
    outcome: str
    messages: list[str] = field(default_factory=list)
    seconds: float = 0.0


def first_line(message: str) -> str:
    return next((ln.strip() for ln in message.splitlines() if ln.strip()), "(no message)")


def results(phase: Phase) -> dict[str, Result]:
    """The run's tests by node id (read_junit also fills the phase's counts)."""
    out: dict[str, Result] = {}
    for case in tp.read_junit(phase):
        r = out.setdefault(case.test, Result(case.outcome))
        r.seconds += case.seconds
        if case.outcome in BAD:
            r.messages.append(first_line(case.message))
            if r.outcome not in BAD:
                r.outcome = case.outcome
        elif case.outcome == "skipped":
            r.messages.append(case.message or "no reason given")
            if r.outcome == "passed":
                r.outcome = "skipped"
    return out


def aggregate(runs: list[Phase], per_run: list[dict[str, Result]]) -> dict[str, Any]:
    """What result.json holds: the four parts of the summary, as data."""
    n = len(runs)
    by_test: dict[str, dict[int, Result]] = defaultdict(dict)
    for i, tests in enumerate(per_run, 1):
        for test, r in tests.items():
            by_test[test][i] = r
    failed: list[dict[str, Any]] = []
    slow: list[dict[str, Any]] = []
    skips: dict[str, set[str]] = defaultdict(set)
    for test, seen in by_test.items():
        bad = [i for i, r in seen.items() if r.outcome in BAD]
        if bad:
            msgs = [m for i in bad for m in seen[i].messages]
            failed.append({"test": test, "failed_runs": len(bad), "runs": n, "in_runs": bad,
                           "messages": list(dict.fromkeys(msgs))})
        for r in seen.values():
            if r.outcome == "skipped":
                for reason in r.messages:
                    skips[reason].add(test)
        times = [r.seconds for r in seen.values()]
        slow.append({"test": test, "median": statistics.median(times), "min": min(times),
                     "max": max(times), "runs": len(times)})
    failed.sort(key=lambda f: (-f["failed_runs"], f["test"]))
    slow.sort(key=lambda s: (-s["median"], s["test"]))
    passed = [t for t, seen in by_test.items()
              if len(seen) == n and all(r.outcome == "passed" for r in seen.values())]
    broken = [i for i, p in enumerate(runs, 1) if p.code not in (*tp.OK_CODES, 1)]
    return {
        "runs": n,
        "failed": failed,
        "passed_every_run": len(passed),
        "tests": len(by_test),
        "skipped": [{"reason": reason, "tests": len(tests)} for reason, tests in
                    sorted(skips.items(), key=lambda kv: (-len(kv[1]), kv[0]))],
        "slowest": slow[:SLOWEST],
        "per_run": [{"run": i, "seconds": round(p.seconds, 3), "exit": p.code,
                     **{k: p.counts[k] for k in ("passed", "failed", "errors", "skipped")},
                     "junit": str(p.junit)} for i, p in enumerate(runs, 1)],
        "broken_runs": broken,
        "ok": not failed and not broken,
    }


def render(agg: dict[str, Any], runs: list[Phase]) -> list[str]:
    n = agg["runs"]
    lines = []
    if agg["failed"]:
        width = max(len(f["test"]) for f in agg["failed"])
        lines += [f"tests that failed or errored in at least one of {n} runs:",
                  f"  {'failed':<7} {'in runs':<9} {'test':<{width}}  first line of each "
                  "distinct message"]
        for f in agg["failed"]:
            frac, which = f"{f['failed_runs']}/{n}", ",".join(map(str, f["in_runs"]))
            head = f"  {frac:<7} {which:<9} {f['test']:<{width}}  "
            for j, msg in enumerate(f["messages"]):
                cut = msg if len(msg) <= MESSAGE_WIDTH else msg[:MESSAGE_WIDTH - 3] + "..."
                lines.append((head if j == 0 else " " * len(head)) + cut)
    else:
        lines.append(f"no test failed in any of {n} runs")
    lines.append(f"{agg['passed_every_run']} of {agg['tests']} tests passed in every run")
    for s in agg["skipped"]:
        lines.append(f"  skipped, {s['tests']} test{'s' * (s['tests'] != 1)}: {s['reason']}")
    if agg["slowest"]:
        lines.append(f"the {len(agg['slowest'])} slowest tests (median over the runs, min, max):")
        lines += [f"  {s['median']:8.2f} s  (min {s['min']:.2f}, max {s['max']:.2f})  {s['test']}"
                  for s in agg["slowest"]]
    lines += [tp.phase_line(p) for p in runs]
    if agg["broken_runs"]:
        lines.append("pytest broke (exit neither 0, 1 nor 5; see its output above) in run(s) "
                     + ", ".join(map(str, agg["broken_runs"])))
    return lines


def main(argv: list[str]) -> int:
    args, selection = argv[1:], []
    if "--" in args:
        args, selection = args[:args.index("--")], args[args.index("--") + 1:]
    ap = argparse.ArgumentParser(
        usage="%(prog)s [-n N] [-- PYTEST_ARGS...]",
        description="The live tier (or PYTEST_ARGS: one pytest with them) N times in a row, "
                    "then which tests failed in which runs, the skips, the slowest tests and "
                    "each run's counts; result.json beside the runs' JUnit XML.")
    ap.add_argument("-n", "--runs", type=int, default=3, help="how many runs (default 3)")
    opts = ap.parse_args(args)
    if opts.runs < 1:
        ap.error("-n must be at least 1")
    n, python = opts.runs, sys.executable
    out = Path(tempfile.mkdtemp(prefix="tb-repeat-"))
    live = next(p for p in tp.phases(python, out) if p.key == "live")
    env = {k: v for k, v in os.environ.items() if k != tp.PHASE_ENV}
    if selection:
        argv_, what = [python, "-m", "pytest", *selection], " ".join(selection)
    else:
        argv_, what = live.argv, "the live tiers (netns, remote, VM lab)"
        env[tp.PHASE_ENV] = f"{live.key},beside,remote,vm"
    runs: list[Phase] = []
    per_run: list[dict[str, Result]] = []
    for i in range(1, n + 1):
        run = Phase(env.get(tp.PHASE_ENV, ""), f"run {i}/{n}", argv_, out / f"run-{i}.xml")
        print(f"\n===== make test-repeat: run {i}/{n}: {what} =====", flush=True)
        t0 = time.monotonic()
        run.code = tp.call([*argv_, "-o", "junit_family=xunit1", f"--junitxml={run.junit}"],
                           cwd=tp.ROOT, env={**env, RUN_ENV: str(i),
                                             PHYSICS_LOG: str(out / f"physics-{i}.jsonl")})
        run.seconds = time.monotonic() - t0
        if tp.STOPPED:
            print(f"\nmake test-repeat: stopped by {signal.Signals(tp.STOPPED[0]).name} during "
                  f"run {i}/{n}; its fixtures were torn down", flush=True)
            break
        per_run.append(results(run))
        runs.append(run)
    if not runs:   # stopped during the first run
        return 128 + tp.STOPPED[0]
    agg = aggregate(runs, per_run)
    agg.update(selection=selection or None, planned_runs=n,
               stopped=signal.Signals(tp.STOPPED[0]).name if tp.STOPPED else None)
    result = out / "result.json"
    result.write_text(json.dumps(agg, indent=1) + "\n")
    print(f"\n===== make test-repeat: {len(runs)} of {n} runs: {what} =====")
    print("\n".join(render(agg, runs)))
    print(f"result: {result} (with each run's JUnit XML)", flush=True)
    if tp.STOPPED:
        return 128 + tp.STOPPED[0]
    return 0 if agg["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
