"""Would interleaving methods second by second decide faster than a round of cases? (issue 28)
Run as root: python bench/bench_interleave.py [--blocks N] [--burst S] [--kinds native,vxlan]

On this host a method's single-stream throughput wanders over seconds (native over one 20 s
connection: 8-17 Gbit/s, in slow swings), so a case of 5 s lands on one point of the swing
and two cases measured 7 s apart do not share it: the per-round sd of ln(vxlan / native) is
0.15-0.30, and a pair 10-15 points apart needs more rounds than 20 minutes hold
(docs/methodology.md, "What limits the rounds on this host").

This bench brings two methods up at once on one testbed (native is the underlay itself; the
other method's inner addresses beside it) and measures their ratio two ways, taking turns
in one sitting so both see the same host:

- cases: the design of a round today, one case of each method (D s, the first second
  omitted, best 1-s interval, as a round pairs it), order alternated pair by pair;
- interleaved: K bursts of B s of each method in turn (A B A B ..., the order alternated block
  by block), the block's ratio the ratio of the bursts' mean rates;
- split: the same K bursts of each method, but all of one method's in a row, then the other's
  (a case made of K short connections instead of one long one): what the short connections
  alone give, without pairing within seconds.

For each design it prints the geometric mean of the ratio, the sd of its log per unit, the
wall seconds one unit took, and sd² × seconds: the measuring time a CI of a given width
costs is proportional to it. Their quotient is how much sooner interleaving would decide
the same pair (below 1: sooner). The cases design here skips the tunnel setup a real case
pays, so the quotient is conservative. Prints figures; asserts nothing.

`--survey KIND,...` asks the question a case interleaving native would depend on: does
native's path stay native while each kind is up beside it? For each kind it brings the
tunnel up on the standing testbed, runs native bursts to the underlay addresses and reads the
kind's own counters (`TunnelDriver.counters`, the ones that prove it carried a case) before
and after: the largest counter growth as a share of the bytes native sent (about 0: native
went beside the tunnel; about 100 % or more: the tunnel carried it), and native's rate beside
the tunnel against native's with nothing up, in the same sitting.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tunbench import proc, tunnels  # noqa: E402
from tunbench.testbed import local, names, placement  # noqa: E402
from tunbench.testbed.ledger import Ledger  # noqa: E402
from tunbench.workloads.base import wait_for_output  # noqa: E402
from tunbench.workloads.stream import parse_iperf3  # noqa: E402

PORT = 5331


def burst(tb, addr: str, port: int, seconds: float, omit: float) -> tuple[float, float]:
    """One iperf3 connection from a to b (on site a's CPUs under placement, as a case's
    client): its mean received rate and its best 1-s interval (Mbit/s)."""
    argv = ["iperf3", "-c", addr, "-p", str(port), "-t", f"{seconds:g}", "-J"]
    if omit:
        argv += ["-O", f"{omit:g}"]
    if "a" in tb.placement:
        argv = placement.confine(argv, tb.placement["a"])
    r = proc.run(argv, netns=tb.a.netns, timeout=seconds + omit + 30)
    got = parse_iperf3(r.stdout)
    return got["throughput_mbps"], max(mbps for _, _, mbps in got["intervals"])


def survey(tb, kinds: list[str], bursts: int, seconds: float) -> None:
    """Native beside each kind: its bytes on the kind's counters, its rate against native
    alone (bursts before and after, alternated with the kind's)."""
    addr, port = tb.b.underlay4, PORT
    main_ledger = tb.ledger
    srv = tb.spawn(tb.b, ["iperf3", "-s", "--forceflush", "-B", addr, "-p", str(port)],
                   "server-native")
    wait_for_output(srv, "Server listening")

    def native() -> float:
        return statistics.fmean(burst(tb, addr, port, seconds, 0)[0] for _ in range(bursts))

    for kind in kinds:
        alone = native()
        tl = Ledger(names.new_run_id(), journal=False)
        tb.ledger = tl
        try:
            drv = tunnels.get(kind)
            inst = drv()
            ep = inst.up(tb, drv.parse_params({}))
            before = inst.counters(tb, ep)
            rate = native()
            after = inst.counters(tb, ep)
        except Exception as e:   # a kind this host cannot bring up: say so, go on
            print(f"{kind}: not brought up here ({str(e).splitlines()[0][:160]})", flush=True)
            continue
        finally:
            tl.close()
            tb.ledger = main_ledger
        sent = rate * 1e6 / 8 * seconds * bursts
        grew = max((after[s][k] - before.get(s, {}).get(k, 0) for s in after
                    for k in after[s] if "bytes" in k), default=0)
        alone = (alone + native()) / 2
        print(f"{kind}: native beside it {rate:,.0f} Mbit/s = {rate / alone:.2f} of native "
              f"alone; the kind's largest byte counter grew by {100 * grew / sent:.1f} % of "
              "what native sent", flush=True)


def spread(name: str, logs: list[float], secs: list[float]) -> float:
    sd = statistics.stdev(logs)
    unit = statistics.fmean(secs)
    print(f"{name}: {math.exp(statistics.fmean(logs)):.3f} of native (geometric mean, "
          f"n={len(logs)}), sd of ln {sd:.3f} per unit, {unit:.1f} s per unit, "
          f"sd² × s = {sd * sd * unit:.3f}", flush=True)
    return sd * sd * unit


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=10, help="units of each design")
    ap.add_argument("--duration", type=float, default=5, help="D: seconds of a case")
    ap.add_argument("--burst", type=float, default=1, help="B: seconds of a burst")
    ap.add_argument("--bursts", type=int, default=5, help="K: bursts of each method a block")
    ap.add_argument("--kind", default="vxlan", help="the method beside native")
    ap.add_argument("--placement", default=placement.DEFAULT_MODE, choices=placement.MODES,
                    help="per-site CPU placement, as a campaign's (default: its default)")
    ap.add_argument("--survey", default="", metavar="KIND,...",
                    help="instead: native's path beside each of these kinds")
    args = ap.parse_args()
    rid = names.new_run_id()
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger)
        placed = placement.place(tb, args.placement)
        print(f"placement {args.placement}: " + (", ".join(
            f"site {k} on CPUs {v}" for k, v in placed["cpus"].items()) if placed["on"]
            else placed.get("why", "off")), flush=True)
        if args.survey:
            survey(tb, args.survey.split(","), args.bursts, args.burst)
            return 0
        drv = tunnels.get(args.kind)
        ep = drv().up(tb, drv.parse_params({}))
        addrs = {"native": tb.b.underlay4, args.kind: ep.b4}
        ports = {"native": PORT, args.kind: PORT + 1}
        for m, addr in addrs.items():   # one standing server per method, in site b
            srv = tb.spawn(tb.b, ["iperf3", "-s", "--forceflush", "-B", addr, "-p", str(ports[m])],
                           f"server-{m}")
            wait_for_output(srv, "Server listening")
        case_logs, case_s, inter_logs, inter_s, split_logs, split_s = [], [], [], [], [], []
        for i in range(args.blocks):
            order = ["native", args.kind] if i % 2 == 0 else [args.kind, "native"]
            t0 = time.monotonic()
            best = {m: burst(tb, addrs[m], ports[m], args.duration, 1)[1] for m in order}
            case_s.append(time.monotonic() - t0)
            case_logs.append(math.log(best[args.kind] / best["native"]))
            t0 = time.monotonic()
            rates: dict[str, list[float]] = {m: [] for m in order}
            for k in range(args.bursts):
                for m in (order if k % 2 == 0 else order[::-1]):
                    rates[m].append(burst(tb, addrs[m], ports[m], args.burst, 0)[0])
            inter_s.append(time.monotonic() - t0)
            inter_logs.append(math.log(statistics.fmean(rates[args.kind])
                                       / statistics.fmean(rates["native"])))
            t0 = time.monotonic()
            rates = {m: [burst(tb, addrs[m], ports[m], args.burst, 0)[0]
                         for _ in range(args.bursts)] for m in order}
            split_s.append(time.monotonic() - t0)
            split_logs.append(math.log(statistics.fmean(rates[args.kind])
                                       / statistics.fmean(rates["native"])))
            print(f"unit {i + 1}: cases {math.exp(case_logs[-1]):.3f} ({case_s[-1]:.1f} s), "
                  f"interleaved {math.exp(inter_logs[-1]):.3f} ({inter_s[-1]:.1f} s), "
                  f"split {math.exp(split_logs[-1]):.3f} ({split_s[-1]:.1f} s)", flush=True)
    a = spread(f"cases ({args.duration:g} s each, best second)", case_logs, case_s)
    b = spread(f"interleaved ({args.bursts} x {args.burst:g} s bursts each)", inter_logs,
               inter_s)
    c = spread(f"split ({args.bursts} x {args.burst:g} s bursts of one, then of the other)",
               split_logs, split_s)
    print(f"measuring time to the same CI, interleaved / cases: {b / a:.2f}; "
          f"split / cases: {c / a:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
