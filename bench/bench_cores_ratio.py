#!/usr/bin/env python3
"""Site size in cores: wireguard-go's throughput at 1 core per site as a share of its
throughput at 2, in the same round (not a timed test, not a physics test).

Each sample is one campaign: wireguard-go (impl go) alone, stream, `cpus_per_site = [1, 2]`,
one round, `--duration` s (1.5) after 0.5 s warm-up; the sample is tput(1) / tput(2). On this
2-core host the campaign's layout is shared (testbed/sitecores.py: both sites on CPU 0 at 1
core, on CPUs 0-1 at 2), so the axis changes capacity only. `--append FILE` adds each sample
to FILE (the format of tests/data/physics: figure, model, samples with value, time, machine,
sitting), then prints the spread of all the file's samples: mean, sd (within and between
sittings, as tests/physics.py computes it), the upper bound a physics test would take (mean +
3.29 sd, never below the largest sample) and how many samples are at or above 1.

It is a bench and not a physics test because that bound is not below 1 on this host (the
recorded spread, tests/data/cores/wireguard_go_1core_vs_2core.json; docs/methodology.md,
"Site size in cores"): a test asserting "1 core below 2" would fail a correct system far more
often than once in 1000 runs.

usage: bench/bench_cores_ratio.py [--samples N] [--duration S] [--append FILE]
       (root, under the live lock; one sample per invocation keeps each hold short)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tunbench import runner, spec

FIGURE = "wireguard_go_1core_vs_2core"
MODEL = "wireguard-go at 2 cores per site in the same round"
Z = 3.29   # tests/physics.py: two-sided normal quantile for a false alarm below 1/1000


def sample(duration: float) -> tuple[float, float, str]:
    """(Mbit/s at 1 core, at 2 cores, layout) of one single-round campaign."""
    exp = spec.build({"experiment": {"repeats": 1, "duration": duration, "warmup": 0.5,
                                     "cpus_per_site": [1, 2]},
                      "tunnel": [{"kind": "wireguard", "impl": "go"}],
                      "workload": [{"name": "stream"}]}, "bench_cores_ratio")
    with tempfile.TemporaryDirectory(prefix="tb-bench-cores-ratio-") as tmp:
        outcome = runner.run_campaign(exp, Path(tmp) / "campaign")
        cases = outcome.store.read_cases()
    if [c["status"] for c in cases] != ["ok", "ok"]:
        raise SystemExit(f"bench_cores_ratio: a case failed: {[c.get('error') for c in cases]}")
    mbps = [float(c["metrics"]["throughput"]["value"]) for c in cases]
    lays = {c["testbed"]["cores"]["layout"] for c in cases}
    return mbps[0], mbps[1], "/".join(sorted(lays))


def spread(groups: list[list[float]]) -> dict[str, float]:
    """mean, sd (pooled within sittings plus the variance of the sittings' means, as
    tests/physics.bound) and the upper bound mean + Z sd, never below the largest value."""
    values = [v for g in groups for v in g]
    mean = statistics.fmean(values)
    dof = len(values) - len(groups)
    var = (sum((v - statistics.fmean(g)) ** 2 for g in groups for v in g) / dof
           if dof > 0 else 0.0)
    means = [statistics.fmean(g) for g in groups]
    if len(means) > 1:
        var += statistics.variance(means)
    sd = math.sqrt(var)
    return {"n": len(values), "mean": mean, "sd": sd, "upper": max(mean + Z * sd, max(values)),
            "min": min(values), "max": max(values),
            "at_or_above_1": sum(v >= 1 for v in values)}


def append(path: Path, value: float, command: str, sitting: str) -> list[list[float]]:
    doc: dict[str, Any] = (json.loads(path.read_text()) if path.exists()
                           else {"figure": FIGURE, "model": MODEL, "samples": []})
    if command not in doc.setdefault("recorded_with", []):
        doc["recorded_with"].append(command)
    doc["samples"].append({"value": value, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "machine": f"{platform.node()} {platform.release()} "
                                      f"{os.cpu_count()} cores",
                           "sitting": sitting})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    groups: dict[str, list[float]] = {}
    for s in doc["samples"]:
        groups.setdefault(str(s.get("sitting", "")), []).append(float(s["value"]))
    return list(groups.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--duration", type=float, default=1.5)
    p.add_argument("--append", type=Path, help="add each sample to this JSON file")
    args = p.parse_args(argv)
    command = "bench/bench_cores_ratio.py " + " ".join(sys.argv[1:] if argv is None else argv)
    sitting = time.strftime("%Y-%m-%dT%H:%M:%S")   # one sitting per invocation
    groups: list[list[float]] = [[]]
    for i in range(args.samples):
        one, two, lay = sample(args.duration)
        ratio = one / two
        print(f"sample {i + 1}/{args.samples}: wireguard-go 1 / 2 cores per site ({lay}): "
              f"{one:.1f} / {two:.1f} Mbit/s, share {ratio:.4f}", flush=True)
        if args.append:
            groups = append(args.append, ratio, command, sitting)
        else:
            groups[0].append(ratio)
    s = spread(groups)
    print(f"{FIGURE}: n={s['n']:.0f}, mean {s['mean']:.4f}, sd {s['sd']:.4f}, range "
          f"{s['min']:.4f}-{s['max']:.4f}, mean + {Z} sd = {s['upper']:.4f}, "
          f"{s['at_or_above_1']:.0f} at or above 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
