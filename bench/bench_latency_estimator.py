#!/usr/bin/env python3
"""Which value should a latency case pair by? Offline, over a recorded campaign's case files.

For every pair of methods measured in the same rounds, the per-round log difference
ln(A_r / B_r) of their TCP round-trip p50 (what a ranking decides on, docs/methodology.md
"Deciding between two methods"), taken by each candidate estimator of a case:

  window  the p50 over the whole window (what tunbench pairs by)
  lowest  the lowest of the case's per-second p50s (a delay's "best second")
  median  the median of the per-second p50s
  mean    the mean of the per-second p50s

and prints, per estimator, the median and mean sd of those differences over all pairs (less
is better: fewer rounds decide a pair), and each method's own sd of its log figure across
rounds. Figures of 2026-11-28 are in docs/methodology.md, "What a round pairs".

usage: bench/bench_latency_estimator.py RESULTS_DIR [RESULTS_DIR ...] [--metric tcp_rtt_p50]
Record a campaign for it with, e.g.:
  tunbench run --tunnels native,vxlan,ebpf-vxlan,srv6,ssh-tun,ssh-forward,ovs-gre,agg,wireguard \\
      --workloads latency --duration 5 --repeats 8 --out DIR --no-report
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

Estimator = Callable[[float, list[float]], float]
ESTIMATORS: dict[str, Estimator] = {
    "window": lambda value, seconds: value,
    "lowest": lambda value, seconds: min(seconds),
    "median": lambda value, seconds: statistics.median(seconds),
    "mean": lambda value, seconds: statistics.fmean(seconds),
}
MIN_SECONDS = 4   # as results/model.BEST_OF_SECONDS


def load(root: Path, metric: str) -> dict[str, dict[int, tuple[float, list[float]]]]:
    """label -> round -> (the case's value, its per-second series), ok cases with a series of
    at least MIN_SECONDS seconds."""
    out: dict[str, dict[int, tuple[float, list[float]]]] = {}
    for p in sorted((root / "cases").glob("*.json")):
        d = json.loads(p.read_text())
        m = (d.get("metrics") or {}).get(metric) or {}
        series = [float(x) for x in (d.get("series") or {}).get(metric) or ()]
        if d.get("status") != "ok" or m.get("value") is None or len(series) < MIN_SECONDS:
            continue
        out.setdefault(d["case"]["tunnel"]["label"], {})[int(d["case"]["repeat"])] = (
            float(m["value"]), series)
    return out


def pair_sds(data: dict[str, dict[int, tuple[float, list[float]]]], est: Estimator
             ) -> list[float]:
    sds = []
    for a, b in itertools.combinations(sorted(data), 2):
        diffs = [math.log(est(*data[a][r]) / est(*data[b][r])) for r in data[a] if r in data[b]]
        if len(diffs) > 2:
            sds.append(statistics.stdev(diffs))
    return sds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--metric", default="tcp_rtt_p50")
    args = ap.parse_args()
    if not args.runs:   # bench/run_all.py runs every bench bare: say what it needs
        print("bench_latency_estimator: give a recorded campaign's folder (see --help)")
    for root in args.runs:
        data = load(root, args.metric)
        if len(data) < 2:
            print(f"{root}: fewer than two methods with a per-second {args.metric}")
            continue
        rounds = max(len(v) for v in data.values())
        print(f"{root}: {len(data)} methods, up to {rounds} rounds, {args.metric}")
        print(f"  {'estimator':10s} {'pairs':>5s} {'median sd':>10s} {'mean sd':>8s}"
              "  (sd of the per-round log difference between two methods)")
        for name, est in ESTIMATORS.items():
            sds = pair_sds(data, est)
            if sds:
                print(f"  {name:10s} {len(sds):5d} {statistics.median(sds):10.4f} "
                      f"{statistics.fmean(sds):8.4f}")
        print("  each method's own sd of its log figure across rounds (window / lowest):")
        for label, by_round in sorted(data.items()):
            if len(by_round) > 2:
                own = [statistics.stdev([math.log(est(*v)) for v in by_round.values()])
                       for est in (ESTIMATORS["window"], ESTIMATORS["lowest"])]
                print(f"    {label:14s} {own[0]:.3f} / {own[1]:.3f}")


if __name__ == "__main__":
    main()
