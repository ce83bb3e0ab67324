#!/usr/bin/env python3
"""Which figure of a stream case should a round pair by? Offline, over recorded campaigns.

For every method, the per-round log share ln(M_r / N_r) against its round's native (the
geometric mean of the round's native runs, results/model.round_reference), with each case's
figure taken from its 1-s throughput series by each candidate:

  mean           the mean of the seconds (the case's own mean, near the tables' Mbit/s)
  median         the median second
  top-half mean  the mean of the faster half of the seconds
  best           the best second (what tunbench pairs a rate by, results/model.paired_value)

Per campaign it prints the rms over methods of the per-round sd of that log share (less is
better: fewer rounds decide a pair). With two campaigns of the same methods (`--sittings`), it
also prints how far each method's share moved between them, per candidate. Slowed cases are
not left out here (the report does that for the best second). Figures of 2026-12-07 are in
docs/methodology.md, "Which figure of a case pairs, on this host".

usage: bench/bench_rate_estimator.py RESULTS_DIR [RESULTS_DIR ...] [--sittings]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from tunbench.results.model import round_reference

Estimator = Callable[[list[float]], float]
ESTIMATORS: dict[str, Estimator] = {
    "mean": statistics.fmean,
    "median": statistics.median,
    "top-half mean": lambda s: statistics.fmean(sorted(s)[len(s) // 2:]),
    "best": max,
}

Figures = dict[str, float]                       # estimator -> the case's figure
Rounds = dict[str, dict[int, list[Figures]]]      # method -> round -> its cases' figures


def load(root: Path) -> tuple[dict[int, list[Figures]], Rounds]:
    """Native's runs by round, and each method's case by round, of a campaign's stream cases
    with at least two positive seconds."""
    native: dict[int, list[Figures]] = defaultdict(list)
    methods: Rounds = defaultdict(lambda: defaultdict(list))
    for path in sorted((root / "cases").glob("*.json")):
        doc = json.loads(path.read_text())
        case = doc["case"]
        if doc.get("status") != "ok" or case["workload"]["name"] != "stream":
            continue
        seconds = [float(x) for x in (doc.get("series") or {}).get("throughput") or []
                   if isinstance(x, (int, float)) and x > 0]
        if len(seconds) < 2:
            continue
        figs = {name: est(seconds) for name, est in ESTIMATORS.items()}
        rep = int(case.get("repeat") or 0)
        if case["tunnel"]["kind"] == "native":
            native[rep].append(figs)
        else:
            methods[case["tunnel"]["label"]][rep].append(figs)
    return native, methods


def log_shares(native: dict[int, list[Figures]], methods: Rounds, name: str
               ) -> dict[str, list[float]]:
    """Per method, ln(share) per round against the geometric mean of the round's natives."""
    out: dict[str, list[float]] = {}
    for label, by_round in methods.items():
        xs = [math.log(f[name] / round_reference([n[name] for n in native[r]]))
              for r, cases in by_round.items() if native.get(r) for f in cases]
        if xs:
            out[label] = xs
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--sittings", action="store_true",
                    help="also print how far each share moved between the first two campaigns")
    args = ap.parse_args()
    loaded = [(d, *load(d)) for d in args.dirs]
    pooled: dict[str, list[float]] = defaultdict(list)
    for d, native, methods in loaded:
        cells = []
        for name in ESTIMATORS:
            var = [statistics.variance(xs) for xs in log_shares(native, methods, name).values()
                   if len(xs) > 2]
            pooled[name] += var
            cells.append(f"{name} {math.sqrt(statistics.fmean(var)):.3f}" if var else f"{name} -")
        print(f"{d.name}: rms per-round sd of ln(share): " + "; ".join(cells))
    print("all: " + "; ".join(f"{k} {math.sqrt(statistics.fmean(v)):.3f}"
                              for k, v in pooled.items() if v))
    if args.sittings and len(loaded) >= 2:
        (da, na, ma), (db, nb, mb) = loaded[0], loaded[1]
        for name in ESTIMATORS:
            sa, sb = log_shares(na, ma, name), log_shares(nb, mb, name)
            moved = {m: 100 * abs(math.exp(statistics.fmean(sa[m]))
                                  - math.exp(statistics.fmean(sb[m]))) for m in sa if m in sb}
            if moved:
                print(f"{da.name} vs {db.name}, {name}: shares moved at most "
                      f"{max(moved.values()):.1f} points, {statistics.fmean(moved.values()):.1f} "
                      "on average")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
