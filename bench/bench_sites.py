"""Benchmark of a two-host campaign (issue 13). Run as root: python bench/bench_sites.py

The same campaign (native + vxlan, stream, short duration, 1 repeat) on two sshd "hosts"
(tests/remote/sshhosts.py: namespaces each running a real sshd, driven only over SSH through
the agent) and on the local two-namespace testbed, alternated ROUNDS times in the same
sitting. Prints each wall time and the ratio hosts/local: what driving sites over SSH costs
per campaign (connect + agent start once, then one agent round trip per command). Compare
ratios: the machine is shared. `--tunnels vxlan,ebpf-vxlan` measures other kinds (tbtun: its
object copied to each host, bpftool/tc run there through the agent).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "remote"))

from sshhosts import build  # noqa: E402

from tunbench import spec  # noqa: E402
from tunbench.runner import run_campaign  # noqa: E402


def campaign(duration: float, sites: dict[str, str] | None, kinds: list[str]
             ) -> spec.Experiment:
    data = {"experiment": {"duration": duration, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": k} for k in kinds],
            "workload": [{"name": "stream"}]}
    if sites:
        data["sites"] = sites
    return spec.build(data, "bench")


def timed(exp: spec.Experiment, out: Path) -> float:
    t0 = time.monotonic()
    outcome = run_campaign(exp, out)
    wall = time.monotonic() - t0
    bad = outcome.failed
    if bad:
        raise SystemExit(f"cases failed: {bad}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--tunnels", default="native,vxlan", help="kinds, comma-separated")
    args = ap.parse_args()
    kinds = args.tunnels.split(",")
    with tempfile.TemporaryDirectory(prefix="tb-bench-sites-") as tmp:
        hosts = build(Path(tmp) / "h", count=2)
        try:
            remote = campaign(args.duration, {"ssh_config": str(hosts.ssh_config),
                                              "a": "h1", "b": "h2"}, kinds)
            local = campaign(args.duration, None, kinds)
            walls: dict[str, list[float]] = {"hosts": [], "local": []}
            for i in range(args.rounds):
                walls["hosts"].append(timed(remote, Path(tmp) / f"r{i}"))
                walls["local"].append(timed(local, Path(tmp) / f"l{i}"))
        finally:
            errors = hosts.close()
            if errors:
                print("teardown:", errors)
    for name, w in walls.items():
        print(f"{name:<6} {'+'.join(kinds)} stream, {args.duration:g} s, 1 repeat: median "
              f"{statistics.median(w):.1f} s  ({', '.join(f'{x:.1f}' for x in w)})")
    ratio = statistics.median(walls["hosts"]) / statistics.median(walls["local"])
    print(f"hosts / local: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
