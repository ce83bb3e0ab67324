#!/usr/bin/env python3
"""tunbench's own cost while it measures, printed as ratios (not a timed test).

1. CPU of the tunbench (python) process itself during the measurement window of a 512-stream
   parallel-streams case (4 iperf3 pairs): process CPU time (all its threads, not its
   children) over the window length. Target: <= 0.5 % of one core.
2. Wall-clock overhead of a campaign beyond the sum of its measurement durations (duration +
   warm-up of every case), with where the rest goes (testbed, tunnel, checks, teardown).
   Target: <= 10 %.

usage: bench/bench_methodology.py [--duration S] [--repeats N]   (root; ~2-3 min)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunbench import runner, spec
from tunbench.workloads import base as wbase

PHASES: dict[str, list[float]] = defaultdict(list)
WINDOWS: list[tuple[float, float]] = []   # (window seconds, tunbench CPU seconds in it)


def _timed(name: str, fn: Any) -> Any:
    def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*a, **kw)
        finally:
            PHASES[name].append(time.monotonic() - t0)
    return wrapper


def instrument() -> None:
    orig_measuring = wbase.Context.measuring

    @contextlib.contextmanager
    def measuring(self: wbase.Context) -> Iterator[Any]:
        with orig_measuring(self) as sampler:
            t0, c0 = time.monotonic(), time.process_time()
            try:
                yield sampler
            finally:
                WINDOWS.append((time.monotonic() - t0, time.process_time() - c0))

    wbase.Context.measuring = measuring  # type: ignore[method-assign]
    runner.local.build = _timed("testbed build", runner.local.build)
    runner.wait_reachable = _timed("reachability check", runner.wait_reachable)
    runner.record_offloads = _timed("offload records", runner.record_offloads)
    runner.Ledger.close = _timed("teardown", runner.Ledger.close)
    runner.local.sweep = _timed("leftover sweep", runner.local.sweep)
    runner.netlink.list_netns = _timed("run id (list netns)", runner.netlink.list_netns)
    runner.CampaignStore.write_case = _timed("write case", runner.CampaignStore.write_case)
    runner.CampaignStore.write_index = _timed("write index", runner.CampaignStore.write_index)
    from tunbench.tunnels.vxlan import Vxlan
    Vxlan.up = _timed("vxlan up", Vxlan.up)  # type: ignore[method-assign]


def campaign(data: dict[str, Any]) -> tuple[float, int, spec.Experiment]:
    exp = spec.build(data, "bench")
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        out = runner.run_campaign(exp, Path(d) / "c")
        wall = time.monotonic() - t0
        bad = [c["error"] for c in out.store.read_cases() if c["status"] != "ok"]
        if bad:
            sys.exit(f"bench: a case failed: {bad}")
        return wall, len(out.statuses), exp


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    instrument()

    print("== 1. tunbench CPU while 512 streams run (4 iperf3 pairs x 128)")
    campaign({"experiment": {"repeats": 1, "duration": args.duration, "warmup": 1},
              "tunnel": [{"kind": "native"}],
              "workload": [{"name": "parallel-streams", "streams": [512]}]})
    window, cpu = WINDOWS[-1]
    print(f"  window {window:.2f} s, tunbench process CPU {cpu * 1000:.1f} ms "
          f"-> {100 * cpu / window:.3f} % of one core (target <= 0.5 %)")

    print(f"== 2. campaign wall clock vs measurement time ({args.repeats} repeats x native, "
          f"vxlan x stream, {args.duration:g} s + 1 s warm-up)")
    PHASES.clear()
    WINDOWS.clear()
    wall, n, exp = campaign({"experiment": {"repeats": args.repeats, "duration": args.duration,
                                            "warmup": 1},
                             "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                             "workload": [{"name": "stream"}]})
    measured = n * (exp.duration + exp.warmup)
    over = wall - measured
    print(f"  {n} cases, wall {wall:.1f} s, measurement {measured:.1f} s, overhead "
          f"{over:.1f} s = {100 * over / measured:.1f} % (target <= 10 %)")
    print(f"  fixed cost per case {over / n:.2f} s; at the study's 100 s per case that is "
          f"{100 * over / n / 101:.1f} %")
    for name, vals in PHASES.items():
        print(f"    {name:20s} {sum(vals) / n:6.3f} s per case")
    win = sum(w for w, _ in WINDOWS) / n
    print(f"    {'measuring window':20s} {win:6.3f} s per case (iperf3 start/stop and JSON "
          f"included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
