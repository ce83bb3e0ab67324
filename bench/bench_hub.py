"""Hub and N spokes: the hub built with N kernel VXLAN devices vs ONE tbtun attach point with N
rules (issue 14). Run as root: python bench/bench_hub.py [--spokes 10 100 [1000]]

Per N, in ONE sitting, the two hub variants alternate round by round (order rotated), each on
a fresh hub-and-spokes testbed (testbed/hub.py; spokes are kernel VXLAN devices either way, so
only the hub differs):
(a) setup time of the hub's tunnel side (N devices + addresses + routes + neighbours in one
    `ip -batch`, vs bpftool load/pin + N rules in one `bpftool batch` + tc attach + 1 route);
(b) kernel memory it added: /proc/meminfo Slab + Percpu + VmallocUsed after - before (the
    whole host's: noisy on a shared host), and tbtun's exact map memory (bytes_memlock);
(c) single TCP stream hub -> spoke 1;
(d) TCP from the hub to all spokes at once (one iperf3 stream per spoke, at most --all-max
    spokes: a 2-core host cannot usefully run 1000 iperf3 pairs): bytes received by all of
    them over the wall time from the first start to the last end.
Ratios are tbtun / kernel, medians over rounds; they print, they do not pass or fail.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tunbench import hubcase
from tunbench.tbtun import hub as tbhub
from tunbench.testbed import hub, local, names
from tunbench.testbed.ledger import Ledger

VARIANTS = ("kernel", "tbtun")


def measure(variant: str, n: int, seconds: float, all_max: int) -> dict[str, float]:
    rid = names.new_run_id()
    out: dict[str, float] = {}
    ledger = Ledger(rid)
    try:
        t0 = time.monotonic()
        h = hub.build(rid, ledger, n)
        out["build_s"] = time.monotonic() - t0
        mem0, t0 = tbhub.kernel_memory_kb(), time.monotonic()
        if variant == "kernel":
            tbhub.kernel_vxlan(h)
        else:
            where = tbhub.tbtun(h)
        out["setup_s"] = time.monotonic() - t0
        out["mem_kb"] = tbhub.kernel_memory_kb() - mem0
        if variant == "tbtun":
            out["maps_kb"] = tbhub.map_memory(where) / 1024
        with tempfile.TemporaryDirectory(prefix="tb-hub-") as tmp:
            # the same measurement as a `tunbench run --testbed hub` case (hubcase.py)
            spokes = [(s, s.inner4) for s in h.spokes]
            out["one_mbps"] = hubcase.stream_to(h, spokes[:1], seconds, Path(tmp))[0]
            out["all_mbps"] = hubcase.stream_to(h, spokes[:all_max], seconds, Path(tmp))[0]
    finally:
        errors = ledger.close()
        local.sweep(rid)
        if errors:
            print(f"teardown errors: {errors}", file=sys.stderr)
    return out


def _ratio(rows: list[dict[str, dict[str, float]]], key: str) -> str:
    rs = [r["tbtun"][key] / r["kernel"][key] for r in rows if r["kernel"].get(key)]
    return (f"median {statistics.median(rs):.3f} (min {min(rs):.3f}, max {max(rs):.3f}, "
            f"n={len(rs)})") if rs else "n/a"


def _median(rows: list[dict[str, dict[str, float]]], v: str, key: str) -> float:
    return statistics.median(r[v][key] for r in rows if key in r[v])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spokes", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--all-max", type=int, default=100,
                    help="at most this many spokes in the all-at-once measurement")
    args = ap.parse_args()
    for n in args.spokes:
        hub.check_spokes(n)
    for n in args.spokes:
        rows: list[dict[str, dict[str, float]]] = []
        for i in range(args.rounds):
            row = {}
            for v in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
                row[v] = m = measure(v, n, args.duration, args.all_max)
                maps = f", maps {m['maps_kb']:.0f} kB" if "maps_kb" in m else ""
                print(f"N={n} round {i + 1} {v:<6} setup {m['setup_s'] * 1000:7.0f} ms, "
                      f"kernel mem {m['mem_kb']:+6.0f} kB{maps}, one spoke "
                      f"{m['one_mbps']:7,.0f} Mbit/s, all {min(n, args.all_max)} spokes "
                      f"{m['all_mbps']:7,.0f} Mbit/s (testbed built in {m['build_s']:.1f} s)",
                      flush=True)
            rows.append(row)
        print(f"N={n} tbtun / kernel VXLAN devices:")
        print(f"  setup time        {_ratio(rows, 'setup_s')}  (kernel "
              f"{_median(rows, 'kernel', 'setup_s') * 1000:.0f} ms, tbtun "
              f"{_median(rows, 'tbtun', 'setup_s') * 1000:.0f} ms)")
        print(f"  kernel memory     {_ratio(rows, 'mem_kb')}  (kernel "
              f"{_median(rows, 'kernel', 'mem_kb'):+.0f} kB, tbtun "
              f"{_median(rows, 'tbtun', 'mem_kb'):+.0f} kB; tbtun maps "
              f"{_median(rows, 'tbtun', 'maps_kb'):.0f} kB)")
        print(f"  one spoke         {_ratio(rows, 'one_mbps')}")
        print(f"  all spokes        {_ratio(rows, 'all_mbps')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
