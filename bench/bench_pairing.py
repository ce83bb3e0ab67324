#!/usr/bin/env python3
"""How close in time must native and a method be measured for their ratio to be steady?
Slice-by-slice pairing against pairing far apart (not a timed test).

One testbed per method with the tunnel up and native's path (the underlay) beside it, an
iperf3 server on each. The client alternates short single-stream runs (SLICE seconds, 0.5 s
intervals, the first interval dropped as ramp-up) between native and the tunnel in ABBA order
(N T, T N, N T, ...), so each pair of slices is measured within about 2 x SLICE seconds. Per
method it prints, for each slice's mean and for its best interval:
  - the share of native (geometric mean of tunnel/native over the adjacent pairs);
  - the sd of ln(tunnel/native) for adjacent pairs, and for pairs half the run apart (as a
    round of a many-method campaign pairs a late method with native measured minutes before);
  - native's own coefficient of variation across slices, and the tunnel's.
If the adjacent sd is much below the far one, slow stretches of the host dominate and pairing
closer in time would settle shares sooner; if they are alike, the noise is faster than a
slice and only more measured seconds narrow a share.

usage: bench/bench_pairing.py [--slices N] [--slice S] [--methods vxlan,ebpf-vxlan]
                              [--affinity N,M] [--json FILE]          (root, live lock)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

from tunbench import tunnels
from tunbench.testbed import local
from tunbench.testbed.base import Site

PORT_NATIVE, PORT_TUNNEL = 5301, 5302


def slice_rate(site: Site, addr: str, port: int, seconds: float, affinity: str
               ) -> tuple[float, float]:
    """(mean after the first 0.5 s interval, best 0.5 s interval) of one run, Mbit/s."""
    argv = ["iperf3", "-c", addr, "-p", str(port), "-t", f"{seconds:g}", "-i", "0.5", "-J"]
    if affinity:
        argv += ["-A", affinity]
    r = site.run(argv, timeout=seconds + 30)
    xs = [iv["sum"]["bits_per_second"] / 1e6 for iv in json.loads(r.stdout)["intervals"]]
    return statistics.fmean(xs[1:]), max(xs[1:])


def measure(kind: str, slices: int, seconds: float, affinity: str) -> dict[str, list[float]]:
    """Per slice pair: native's and the tunnel's (mean, best) in Mbit/s, ABBA order."""
    with local.scratch() as tb:
        drv = tunnels.get(kind)
        ep = drv().up(tb, drv.parse_params({}))
        native = tb.b.underlay4
        servers = [tb.spawn(tb.b, ["iperf3", "-s", "-B", addr, "-p", str(port)],
                            f"iperf3-server-{what}")
                   for what, addr, port in (("native", native, PORT_NATIVE),
                                            ("tunnel", ep.b4, PORT_TUNNEL))]
        time.sleep(1.0)   # both listening
        out: dict[str, list[float]] = {"native": [], "tunnel": [], "native_best": [],
                                       "tunnel_best": []}
        try:
            for i in range(slices):
                order = [("native", native, PORT_NATIVE), ("tunnel", ep.b4, PORT_TUNNEL)]
                for what, addr, port in order if i % 2 == 0 else order[::-1]:
                    mean, best = slice_rate(tb.a, addr, port, seconds, affinity)
                    out[what].append(mean)
                    out[f"{what}_best"].append(best)
        finally:
            for s in servers:
                s.stop()
        return out


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs)


def report(kind: str, o: dict[str, list[float]]) -> list[str]:
    lines = []
    for tag, n, t in (("slice mean", o["native"], o["tunnel"]),
                      ("best 0.5 s", o["native_best"], o["tunnel_best"])):
        adjacent = [math.log(b / a) for a, b in zip(n, t, strict=True)]
        lag = len(n) // 2
        far = [math.log(t[(i + lag) % len(n)] / n[i]) for i in range(len(n))]
        lines.append(f"{kind:12s} {tag}: share {100 * math.exp(statistics.fmean(adjacent)):5.1f} %"
                     f"  sd ln(ratio) adjacent {statistics.stdev(adjacent):.3f}, {lag} pairs "
                     f"apart {statistics.stdev(far):.3f} (far/adjacent "
                     f"{statistics.stdev(far) / statistics.stdev(adjacent):.2f})  cv native "
                     f"{cv(n):.3f}, {kind} {cv(t):.3f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slices", type=int, default=30, help="slice pairs per method (30)")
    ap.add_argument("--slice", type=float, default=2.0, help="seconds per slice (2)")
    ap.add_argument("--methods", default="vxlan,ebpf-vxlan")
    ap.add_argument("--affinity", default="", help="iperf3 -A (e.g. 0,1); empty: none")
    ap.add_argument("--json", help="keep every slice's figures here")
    a = ap.parse_args()
    raw: dict[str, Any] = {"slices": a.slices, "slice_s": a.slice, "affinity": a.affinity}
    for kind in a.methods.split(","):
        raw[kind] = measure(kind, a.slices, a.slice, a.affinity)
        print("\n".join(report(kind, raw[kind])), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
