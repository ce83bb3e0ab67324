"""agg (tbagg) against kernel VXLAN and native, in ONE sitting (issue 16). Run as root:
python bench/bench_agg.py [--rate 200mbit] [--flush 0 50 200] [--stream | --stream-only]

Per variant (native, vxlan, agg at each flush timeout), each on a fresh testbed whose underlay
is tbf-shaped to --rate ("none": unshaped), with 100 B inner UDP packets from the load
generator:
(a) inner packets/s at the 0.1 % loss threshold (RFC 2544 bisection, 1 s trials), beside the
    header model (what the shaped link allows if only header bytes mattered);
(b) at 80 % of the variant's own threshold (--probe-fraction): packets and bytes on the underlay per
    inner packet and inner byte (site a's underlay device counters; for agg, tbagg's own
    datagram counters plus Ethernet/IP/UDP headers: with offload it sends runs of datagrams
    as one UDP GSO send, which the veth counts as one packet of one header, where a NIC would
    put each datagram on the wire whole), CPU per Mpps (host-wide
    /proc/stat busy time, other users of the host included), one-way latency p50/p99;
(c) with --stream: one large-packet TCP stream on an unshaped underlay through vxlan, agg
    without offload and agg with offload (TUN TSO, UDP GSO/GRO, coalescing), alternated over
    --rounds rounds; each round's agg / vxlan ratios and their medians. --stream-only: just (c).
Figures print as ratios to vxlan; they do not pass or fail (the host is shared and noisy).
The same sweep as a figure in tunbench's own report: `tunbench run --preset agg-tradeoff`
(docs/agg.md, "The trade-off as a figure in the report").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tunbench import tunnels
from tunbench.testbed import local, names
from tunbench.testbed.ledger import Ledger
from tunbench.tunnels import agg
from tunbench.workloads import loadgen
from tunbench.workloads.base import Context
from tunbench.workloads.search import rfc2544_search
from tunbench.workloads.stream import Stream, StreamParams

SIZE = 100
ETH = 14


def variants(flushes: list[int]) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {"native": ("native", {}), "vxlan": ("vxlan", {})}
    for f in flushes:
        out[f"agg-{f}us"] = ("agg", {"flush_us": f})
    return out


def model_wire_per_packet(kind: str, flush: int | None, mtu: int = 1500) -> float:
    """Bytes on an Ethernet wire per 100 B inner packet when only headers matter."""
    if kind == "native":
        return SIZE + ETH
    if kind == "vxlan":
        return SIZE + ETH + 20 + 8 + 8 + ETH
    if not flush:
        return SIZE + 2 + ETH + 20 + 8 + 8
    n = (mtu - 20 - 8 - 8) // (SIZE + 2)
    return SIZE + 2 + (ETH + 20 + 8 + 8) / n


def busy_jiffies() -> int:
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals) - vals[3] - vals[4]   # all but idle and iowait


def measure(kind: str, raw: dict[str, Any], rate: str | None, probe_fraction: float,
            max_pps: float, resolution: float) -> dict[str, float]:
    drv = tunnels.get(kind)
    rid = names.new_run_id()
    out: dict[str, float] = {}
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger, rate=rate)
        ep = drv().up(tb, drv.parse_params(raw))
        spec = loadgen.TrafficSpec(size=str(SIZE), flows=8, port=5301)

        def trial(pps: float, dur: float) -> loadgen.TrialResult:
            return loadgen.run_trial(tb, ep.b4, spec, dur, pps)

        r = rfc2544_search(trial, max_pps, threshold=0.001, resolution_pps=resolution,
                           duration=1.0, min_pps=1000)
        out["ndr_pps"] = float(r.rate_pps or 0)

        def wire() -> tuple[int, int]:
            """(packets, bytes) site a puts on its underlay wire."""
            if kind != "agg":
                st = tb.a.links.stats(tb.a.underlay_if)
                return st["tx_packets"], st["tx_bytes"]
            c = agg.Agg.dump(ep, tb.a).counters
            return c["tx_datagrams"], c["tx_wire_bytes"] + c["tx_datagrams"] * (ETH + 20 + 8)

        out.update(probe(trial, max(1000.0, probe_fraction * out["ndr_pps"]), wire))
    return out


def probe(trial: Any, pps: float, wire: Callable[[], tuple[int, int]]) -> dict[str, float]:
    pkts0, bytes0 = wire()
    cpu0 = busy_jiffies()
    t = trial(pps, 2.0)
    cpu1 = busy_jiffies()
    pkts1, bytes1 = wire()
    inner = max(1, t.offered)
    return {"probe_pps": pps, "wire_pkts_per_inner": (pkts1 - pkts0) / inner,
            "wire_bytes_per_inner_byte": (bytes1 - bytes0) / (inner * SIZE),
            "cpu_core_s_per_mpkt": (cpu1 - cpu0) / 100 / (inner / 1e6),
            "lat_p50_us": float(t.latency_us.get("p50") or 0),
            "lat_p99_us": float(t.latency_us.get("p99") or 0),
            "probe_loss": t.loss_ratio}


STREAM_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "vxlan": ("vxlan", {}), "agg-nooffload": ("agg", {"offload": False}),
    "agg-offload": ("agg", {"offload": True})}


def stream_once(kind: str, raw: dict[str, Any], duration: float) -> float:
    drv = tunnels.get(kind)
    rid = names.new_run_id()
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger)
        ep = drv().up(tb, drv.parse_params(raw))
        res = Stream().run(Context(tb, ep, duration=duration, warmup=1), StreamParams())
        return float(res.metrics["throughput"].value or 0)


def stream_rounds(duration: float, rounds: int) -> None:
    """vxlan, agg without and with offload, alternated: each round's ratios side by side."""
    per: dict[str, list[float]] = {k: [] for k in STREAM_VARIANTS}
    print(f"\nlarge-packet TCP stream, unshaped, {duration:g} s per variant, Mbit/s "
          f"(ratios to vxlan of the same round)")
    print(f"{'round':>5} {'vxlan':>8} {'agg off':>8} {'x vxlan':>8} {'agg on':>8} {'x vxlan':>8} "
          f"{'on/off':>7}")
    for i in range(rounds):
        got = {name: stream_once(kind, raw, duration) for name, (kind, raw) in STREAM_VARIANTS.items()}
        vx = max(1.0, got["vxlan"])
        for name, v in got.items():
            per[name].append(v / vx)
        print(f"{i + 1:5} {got['vxlan']:8.0f} {got['agg-nooffload']:8.0f} "
              f"{got['agg-nooffload'] / vx:8.3f} {got['agg-offload']:8.0f} "
              f"{got['agg-offload'] / vx:8.3f} "
              f"{got['agg-offload'] / max(1.0, got['agg-nooffload']):7.1f}", flush=True)
    off, on = statistics.median(per["agg-nooffload"]), statistics.median(per["agg-offload"])
    print(f"median agg / vxlan: without offload {off:.3f}, with offload {on:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="200mbit", help="tbf rate of the underlay, or none")
    ap.add_argument("--flush", type=int, nargs="+", default=[0, 50, 200])
    ap.add_argument("--probe-fraction", type=float, default=0.8)
    ap.add_argument("--resolution", type=float, default=1000, help="search width, packets/s")
    ap.add_argument("--max-pps", type=float, default=320000)
    ap.add_argument("--stream", action="store_true", help="also the large-packet TCP stream")
    ap.add_argument("--stream-only", action="store_true", help="only the large-packet TCP stream")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of the stream")
    ap.add_argument("--stream-seconds", type=float, default=5.0)
    args = ap.parse_args()
    if args.rounds < 1 or args.stream_seconds <= 0:
        print("--rounds must be >= 1 and --stream-seconds > 0", file=sys.stderr)
        return 2
    if args.stream_only:
        stream_rounds(args.stream_seconds, args.rounds)
        return 0
    if loadgen.find_binary() is None:
        print(f"tunbench-loadgen is not built: {loadgen.BUILD_FIX}", file=sys.stderr)
        return 2
    rate = None if args.rate == "none" else args.rate
    rows: dict[str, dict[str, float]] = {}
    t0 = time.monotonic()
    for name, (kind, raw) in variants(args.flush).items():
        rows[name] = measure(kind, raw, rate, args.probe_fraction, args.max_pps,
                             args.resolution)
        print(f"  {name}: {rows[name]}", flush=True)
    link_bps = None
    if rate:
        digits = rate.lower().removesuffix("bit")
        mult = {"k": 1e3, "m": 1e6, "g": 1e9}.get(digits[-1], 1)
        link_bps = float(digits.rstrip("kmg")) * mult
    print(f"\n100 B inner UDP, underlay {args.rate}, one sitting ({time.monotonic() - t0:.0f} s); "
          f"wire, CPU and latency at {args.probe_fraction:.0%} of each variant's threshold")
    print(f"{'variant':12} {'pps@0.1%':>10} {'x vxlan':>8} {'model pps':>10} {'x vxlan':>8} "
          f"{'wire pkt/inner':>14} {'wire B/inner B':>14} {'x vxlan':>8} {'core-s/Mpkt':>11} "
          f"{'p50 us':>7} {'p99 us':>7}")
    vx = rows["vxlan"]
    vx_model = model_wire_per_packet("vxlan", None)
    for name, r in rows.items():
        kind, raw = variants(args.flush)[name]
        per = model_wire_per_packet(kind, raw.get("flush_us"))
        model = f"{link_bps / 8 / per:10.0f}" if link_bps else f"{'-':>10}"
        print(f"{name:12} {r['ndr_pps']:10.0f} {r['ndr_pps'] / max(1, vx['ndr_pps']):8.2f} "
              f"{model} {vx_model / per:8.2f} {r['wire_pkts_per_inner']:14.3f} "
              f"{r['wire_bytes_per_inner_byte']:14.3f} "
              f"{r['wire_bytes_per_inner_byte'] / vx['wire_bytes_per_inner_byte']:8.2f} "
              f"{r['cpu_core_s_per_mpkt']:11.2f} {r['lat_p50_us']:7.0f} {r['lat_p99_us']:7.0f}")
    if args.stream:
        stream_rounds(args.stream_seconds, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
