"""tbtun against native veth and kernel VXLAN (issue 14). Run as root: python bench/bench_tbtun.py

In ONE sitting, alternating round by round so host drift hits all alike, the order rotated
every round (each variant on a fresh testbed, single TCP stream with tunbench's stream
workload):
(a) ebpf-vxlan / native and ebpf-vxlan / kernel vxlan; targets >= 0.97 and >= 1.15;
(b) ebpf-vxlan with 1000 rules / with the default 2 (the peer's IPv4 and IPv6); target >= 0.98;
(c) TCP request/response latency p50 / p99 (sockperf, latency workload): ebpf-vxlan / vxlan;
    target <= 1.0;
(d) setup time of one site pair: ebpf-vxlan (1 and 1000 rules) and kernel vxlan;
(e) decap in native XDP / decap in tc (ebpf-vxlan decap=xdp vs decap=tc), and XDP / native;
(g) native with its route MTU lowered to tbtun's inner MTU (native-inner-mtu): the control that
    splits tbtun's gap to native into what the 50 B header costs any tunnel (a smaller TCP MSS,
    so iperf3's default 128 KiB writes end in smaller skbs) and what the datapath costs:
    ebpf-vxlan / native-inner-mtu is the datapath alone;
(h) native with tbtun's programs attached but not configured (native-tc-hooks: clsact, tb_encap
    on egress and tb_decap on ingress of both underlay ends, every packet passes): what the tc
    hooks and the programs' first checks cost, with no encapsulation;
(i) the floor of any tc tunnel on bpf_skb_adjust_room (adjust-room-floor: bench/floor.bpf.c on
    both underlay ends of native at the inner MTU: wrap every IPv4 packet in 50 B of VXLAN
    headers, no map, no lookup, no counter, and unwrap on ingress): floor / native is the best
    a tc tunnel built like tbtun can reach here, and ebpf-vxlan / floor is what tbtun's own
    work (rules, hash, counters, checks) costs;
(j) ebpf-vxlan attached by tcx (ebpf-vxlan-tcx, attach=tcx, Linux >= 6.6: bpf links, no
    clsact qdisc, no classifier layer) / by clsact + cls_bpf (the default, attach=tc); the
    floor is measured both ways too (adjust-room-floor-tcx);
(f) the programs' own cost, from the kernel's BPF run-time statistics (kernel.bpf_stats_enabled
    on for the bench, restored after): ns per run of the encap program (site a) and the decap
    program (site b) during the stream, with 2 and with 1000 rules. Unlike throughput, this is
    hardly moved by the other users of the host, so it says what 1000 rules cost per packet.
Figures are medians of per-round ratios; they print, they do not pass or fail (the host is
shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tunbench import proc, tunnels
from tunbench.tbtun import loader
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Site, Testbed
from tunbench.testbed.ledger import Ledger
from tunbench.workloads.base import Context
from tunbench.workloads.latency import Latency, LatencyParams
from tunbench.workloads.stream import Stream, StreamParams

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "native": ("native", {}),
    "native-inner-mtu": ("native", {}),
    "native-tc-hooks": ("native", {}),
    "adjust-room-floor": ("native", {}),
    "adjust-room-floor-tcx": ("native", {}),
    "vxlan": ("vxlan", {}),
    "ebpf-vxlan": ("ebpf-vxlan", {}),
    "ebpf-vxlan-tcx": ("ebpf-vxlan", {"attach": "tcx"}),
    "ebpf-vxlan-1000": ("ebpf-vxlan", {"rules": 1000}),
    "ebpf-vxlan-xdp": ("ebpf-vxlan", {"decap": "xdp"}),
}


STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


def prog_stats(run_id: str) -> dict[str, tuple[int, int]]:
    """(run_time_ns, run_cnt) of the pinned encap (site a) and decap (site b) programs."""
    out: dict[str, tuple[int, int]] = {}
    for key, pin in (("encap", "a/tb_encap"), ("decap", "b/tb_decap")):
        path = Path(f"/sys/fs/bpf/tb-{run_id}") / pin
        if path.exists():
            r = proc.run(["bpftool", "-j", "prog", "show", "pinned", str(path)], timeout=10)
            info = json.loads(r.stdout)
            out[key] = (int(info.get("run_time_ns", 0)), int(info.get("run_cnt", 0)))
    return out


FLOOR_SRC = Path(__file__).with_name("floor.bpf.c")


def build_floor() -> Path:
    """bench/floor.bpf.c compiled with the flags of the project's `make bpf` (build/bpf/)."""
    out = Path(__file__).resolve().parent.parent / "build" / "bpf" / "floor.bpf.o"
    if not out.exists() or out.stat().st_mtime < FLOOR_SRC.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        arch = proc.run(["gcc", "-dumpmachine"], timeout=10).stdout.strip()
        proc.run(["clang", "-O2", "-g", "-Wall", "-Werror", "-target", "bpf",
                  f"-I/usr/include/{arch}", "-c", str(FLOOR_SRC), "-o", str(out)], timeout=120)
    return out


def attach_floor(tb: Testbed, obj: Path) -> None:
    """floor_encap on egress and floor_decap on ingress of both underlay ends (removed with
    the testbed's namespaces)."""
    for site in tb.sites():
        dev = site.underlay_if
        proc.run(["tc", "qdisc", "add", "dev", dev, "clsact"], netns=site.netns, timeout=10)
        for hook, sec in (("egress", "floor_encap"), ("ingress", "floor_decap")):
            proc.run(["tc", "filter", "add", "dev", dev, hook, "bpf", "da", "obj", str(obj),
                      "sec", "tc", "program", sec], netns=site.netns, timeout=20)


def attach_floor_tcx(tb: Testbed, ledger: Ledger, obj: Path) -> None:
    """The floor's programs loaded and pinned by the tbtun loader (tb-<run>/<site>/) and
    attached by tcx links pinned next to them, as attach=tcx does (removed with the pins)."""
    for site in tb.sites():
        where = loader.load(ledger, tb.run_id, site.name, site, str(obj))
        for hook, prog in (("egress", "floor_encap"), ("ingress", "floor_decap")):
            site.tcx_attach(site.underlay_if, hook, str(where / prog),
                            str(where / f"link_{prog}"))


def tbtun_inner_mtu(site: Site) -> int:
    """The inner MTU ebpf-vxlan gets on this site's underlay (its MTU less tbtun's headers),
    so native-inner-mtu isolates the cost of the smaller MSS."""
    drv = tunnels.get("ebpf-vxlan")
    return drv.tunnel_mtu(drv.parse_params({}), netlink.link_mtu(site.netns, site.underlay_if))


def measure(variant: str, duration: float, latency: bool, stream: StreamParams
            ) -> dict[str, float]:
    kind, raw = VARIANTS[variant]
    drv = tunnels.get(kind)
    rid = names.new_run_id()
    out: dict[str, float] = {}
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger)
        t0 = time.monotonic()
        ep = drv().up(tb, drv.parse_params(raw))
        out["setup_s"] = time.monotonic() - t0
        if variant == "native-tc-hooks":
            for site in (tb.a, tb.b):
                where = loader.load(ledger, rid, site.name, site)
                loader.attach(ledger, site.netns, site.underlay_if, where, "tc", site)
        if variant == "adjust-room-floor":
            attach_floor(tb, build_floor())
        if variant == "adjust-room-floor-tcx":
            attach_floor_tcx(tb, ledger, build_floor())
        if variant in ("native-inner-mtu", "adjust-room-floor", "adjust-room-floor-tcx"):
            proc.run(["ip", "route", "replace", f"{ep.b4}/32", "dev", tb.a.underlay_if,
                      "mtu", str(tbtun_inner_mtu(tb.a))], netns=tb.a.netns, timeout=10)
        ctx = Context(tb, ep, duration=duration, warmup=1)
        before = prog_stats(rid)
        t1 = time.monotonic()
        res = Stream().run(ctx, stream)
        wall = time.monotonic() - t1
        out["mbps"] = float(res.metrics["throughput"].value or 0)
        for key, (ns, cnt) in prog_stats(rid).items():
            ns0, cnt0 = before.get(key, (0, 0))
            if cnt > cnt0:
                out[f"{key}_ns"] = (ns - ns0) / (cnt - cnt0)
                out[f"{key}_core"] = (ns - ns0) / 1e9 / wall   # share of one core
        if latency:
            lat = Latency().run(ctx, LatencyParams(protocol="tcp"))
            out["p50"] = float(lat.metrics["tcp_rtt_p50"].value or 0)
            out["p99"] = float(lat.metrics["tcp_rtt_p99"].value or 0)
    return out


def _ratio(rows: list[dict[str, dict[str, float]]], a: str, b: str, key: str) -> str:
    rs = [r[a][key] / r[b][key] for r in rows
          if key in r.get(a, {}) and r.get(b, {}).get(key)]
    return (f"median {statistics.median(rs):.3f} (min {min(rs):.3f}, max {max(rs):.3f}, "
            f"n={len(rs)})") if rs else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--length", type=int, default=0,
                    help="iperf3 write size in bytes (-l); 0 = iperf3's default, 128 KiB")
    ap.add_argument("--congestion", default="",
                    help="TCP congestion control (iperf3 -C); empty = the host's default")
    ap.add_argument("--affinity", default="",
                    help="iperf3 -A: 'N,M' pins client and server (e.g. 0,0: one CPU does all "
                         "the work, so throughput is the inverse of the CPU cost per byte)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated subset of {','.join(VARIANTS)}")
    args = ap.parse_args()
    old_stats = STATS_SYSCTL.read_text().strip() if STATS_SYSCTL.exists() else None
    if old_stats is not None:
        STATS_SYSCTL.write_text("1")
    try:
        return run(args)
    finally:
        if old_stats is not None:
            STATS_SYSCTL.write_text(old_stats)


def run(args: argparse.Namespace) -> int:
    rows: list[dict[str, dict[str, float]]] = []
    names_ = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(names_) - set(VARIANTS))
    if unknown:
        print(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}",
              file=sys.stderr)
        return 2
    stream = StreamParams(length=args.length, congestion=args.congestion,
                          affinity=args.affinity)
    cc = args.congestion or Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    print(f"single TCP stream, {args.duration:g} s, writes of "
          f"{args.length or 131072} B, congestion control {cc}, CPUs "
          f"{args.affinity or 'not pinned'}, {args.rounds} rounds", flush=True)
    for i in range(args.rounds):
        row = {}
        for v in names_[i % len(names_):] + names_[:i % len(names_)]:   # rotate: no position bias
            row[v] = measure(v, args.duration, latency=v in ("vxlan", "ebpf-vxlan"),
                             stream=stream)
            extra = (f", p50 {row[v]['p50']:.1f} µs, p99 {row[v]['p99']:.1f} µs"
                     if "p50" in row[v] else "")
            print(f"round {i + 1} {v:<16} {row[v]['mbps']:>8,.0f} Mbit/s, setup "
                  f"{row[v]['setup_s'] * 1000:.0f} ms{extra}", flush=True)
        rows.append(row)
    print(f"(a) ebpf-vxlan / native:       {_ratio(rows, 'ebpf-vxlan', 'native', 'mbps')}; "
          "target >= 0.97")
    print(f"    ebpf-vxlan / kernel vxlan: {_ratio(rows, 'ebpf-vxlan', 'vxlan', 'mbps')}; "
          "target >= 1.15")
    print(f"    kernel vxlan / native:     {_ratio(rows, 'vxlan', 'native', 'mbps')}")
    print(f"(i) adjust-room floor / native: "
          f"{_ratio(rows, 'adjust-room-floor', 'native', 'mbps')}")
    print(f"    ebpf-vxlan / adjust-room floor: "
          f"{_ratio(rows, 'ebpf-vxlan', 'adjust-room-floor', 'mbps')}")
    print(f"(j) ebpf-vxlan attach=tcx / attach=tc: "
          f"{_ratio(rows, 'ebpf-vxlan-tcx', 'ebpf-vxlan', 'mbps')}")
    print(f"    ebpf-vxlan attach=tcx / native: "
          f"{_ratio(rows, 'ebpf-vxlan-tcx', 'native', 'mbps')}")
    print(f"    ebpf-vxlan attach=tcx / kernel vxlan: "
          f"{_ratio(rows, 'ebpf-vxlan-tcx', 'vxlan', 'mbps')}")
    print(f"    adjust-room floor, tcx / tc: "
          f"{_ratio(rows, 'adjust-room-floor-tcx', 'adjust-room-floor', 'mbps')}")
    print(f"    adjust-room floor, tcx / native: "
          f"{_ratio(rows, 'adjust-room-floor-tcx', 'native', 'mbps')}")
    print(f"(g) native at inner MTU / native: "
          f"{_ratio(rows, 'native-inner-mtu', 'native', 'mbps')}")
    print(f"    ebpf-vxlan / native at inner MTU: "
          f"{_ratio(rows, 'ebpf-vxlan', 'native-inner-mtu', 'mbps')}")
    print(f"(h) native with idle tbtun hooks / native: "
          f"{_ratio(rows, 'native-tc-hooks', 'native', 'mbps')}")
    print(f"(b) 1000 rules / 2 rules:      "
          f"{_ratio(rows, 'ebpf-vxlan-1000', 'ebpf-vxlan', 'mbps')}; target >= 0.98")
    print(f"(c) TCP RTT p50 ebpf/vxlan:    {_ratio(rows, 'ebpf-vxlan', 'vxlan', 'p50')}; "
          "target <= 1.0")
    print(f"    TCP RTT p99 ebpf/vxlan:    {_ratio(rows, 'ebpf-vxlan', 'vxlan', 'p99')}")
    print(f"(e) decap xdp / decap tc:      "
          f"{_ratio(rows, 'ebpf-vxlan-xdp', 'ebpf-vxlan', 'mbps')}")
    print(f"    decap xdp / native:        {_ratio(rows, 'ebpf-vxlan-xdp', 'native', 'mbps')}")
    for v in ("ebpf-vxlan", "ebpf-vxlan-1000", "ebpf-vxlan-xdp", "native-tc-hooks"):
        for key in ("encap", "decap"):
            got = [r[v][f"{key}_ns"] for r in rows if f"{key}_ns" in r.get(v, {})]
            if got:
                core = statistics.median(r[v][f"{key}_core"] for r in rows
                                         if f"{key}_core" in r.get(v, {}))
                print(f"(f) {key} program, {v:<16} median {statistics.median(got):.0f} ns "
                      f"per run, {100 * core:.2f} % of one core during the stream "
                      f"(n={len(got)})")
    print(f"    1000 rules / 2 rules, encap ns per run: "
          f"{_ratio(rows, 'ebpf-vxlan-1000', 'ebpf-vxlan', 'encap_ns')}")
    for v in names_:
        setups = [r[v]["setup_s"] * 1000 for r in rows]
        print(f"(d) setup {v:<16} median {statistics.median(setups):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
