#!/usr/bin/env python3
"""Site size in cores: how far 1 core per site bounds each method against 2 (not a timed test).

Runs one campaign on the cpus_per_site axis (testbed/sitecores.py): every method at each core
count in the same round, single-stream iperf3, `--rounds` rounds. Prints, per method, the
mean throughput and CPU per Gbit/s at each count, and its figure at the fewest cores as a
share of its figure at the most, paired per round (geometric mean, each round's ratio, the sd
of the log ratio), and the campaign's layout (sitecores.layout: on 2 CPUs the axis 1, 2 is
"shared", both sites on the same CPUs at each count). wireguard-go's 1-core share is the
physics test test_one_core_per_site_bounds_wireguard_go (its spread: scripts/record_physics.py);
this bench gives every method's. `--json FILE` keeps them.

usage: bench/bench_cores.py [--rounds N] [--duration S] [--cores 1,2]
                            [--methods native,wireguard:go,vxlan] [--json FILE] [--out DIR]
       (root, under the live lock)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tunbench import runner, spec
from tunbench.report import data, sitesize


def _tunnel(text: str) -> dict[str, Any]:
    kind, _, impl = text.partition(":")
    return {"kind": kind, **({"impl": impl} if impl else {})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--cores", default="1,2")
    p.add_argument("--methods", default="native,wireguard:go,vxlan")
    p.add_argument("--json", type=Path)
    p.add_argument("--out", type=Path, help="keep the campaign here (default: a temp dir)")
    args = p.parse_args(argv)
    cores = [int(k) for k in args.cores.split(",")]
    exp = spec.build({"experiment": {"repeats": args.rounds, "duration": args.duration,
                                     "warmup": 0.5, "cpus_per_site": cores},
                      "tunnel": [_tunnel(m) for m in args.methods.split(",")],
                      "workload": [{"name": "stream"}]}, "bench_cores")
    with tempfile.TemporaryDirectory(prefix="tb-bench-cores-") as tmp:
        out = args.out or Path(tmp) / "campaign"
        outcome = runner.run_campaign(exp, out)
        failed = outcome.failed
        camp = data.load(out)
        result: dict[str, Any] = {"rounds": args.rounds, "duration": args.duration,
                                  "cores": cores, "failed": failed, "methods": {}}
        for s in sitesize.scalings(camp):
            low, high = s.cores[0], s.cores[-1]
            result["layout"] = s.layout     # one per campaign (sitecores.layout)
            print(s.layout_text())
            for m in s.methods:
                per_round = [r[low] / r[high] for r in m.by_round.values()
                             if low in r and high in r and r[high] > 0]
                logs = [math.log(x) for x in per_round if x > 0]
                sh = m.share(low, high)
                result["methods"][m.tunnel] = {
                    "throughput": {k: statistics.fmean(v) for k, v in m.head.items()},
                    "throughput_cv": {k: (statistics.stdev(v) / statistics.fmean(v)
                                          if len(v) > 1 else None) for k, v in m.head.items()},
                    "cpu_per_gbit": {k: statistics.fmean(v) for k, v in m.cpu.items()},
                    "share_low_of_high": sh[0] if sh else None,
                    "per_round": per_round,
                    "sd_log": statistics.stdev(logs) if len(logs) > 1 else None}
    for name, f in result["methods"].items():
        tp = ", ".join(f"{k} core(s) {v:,.0f}" for k, v in f["throughput"].items())
        cpu = ", ".join(f"{k}: {v:.1f}" for k, v in f["cpu_per_gbit"].items())
        rounds = " ".join(f"{100 * x:.1f}" for x in f["per_round"])
        share = f["share_low_of_high"]
        print(f"{name}: Mbit/s {tp}; CPU/Gbit {cpu}; at {cores[0]} as % of at {cores[-1]}: "
              f"{100 * share:.1f}% (rounds {rounds}; sd of log "
              f"{f['sd_log'] if f['sd_log'] is None else round(f['sd_log'], 3)})"
              if share else f"{name}: no pair of rounds")
    if failed:
        print(f"failed cases: {', '.join(failed)}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
