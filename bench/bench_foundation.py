"""Benchmarks of tunbench itself (issue: foundation). Run as root: python bench/bench_foundation.py

(a) throughput measured by tunbench's stream workload vs a hand-run iperf3 over the same
    testbed, alternated A B A B ... so host drift hits both alike; target: ratio within ±3 %
    (median of the pairwise ratios).
(b) tunbench's own CPU during a measurement (the orchestrating process, sampler thread
    included) as % of one core; target <= 0.5 %.
(c) setup + teardown time of a vxlan tunnel on an existing testbed; target <= 0.5 s.
These print figures; they are not pass/fail tests (timings here are noisy).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

from tunbench import proc, tunnels
from tunbench.report.decide import share
from tunbench.results.model import paired_value
from tunbench.testbed import local, names, netlink
from tunbench.testbed.ledger import Ledger
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams, server_argv


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _verdict(lo: float, hi: float, band: tuple[float, float] = (0.97, 1.03)) -> str:
    """The ±3 % target read on the paired CI: met inside the band, missed outside it, else
    undecided at this many pairs."""
    if band[0] <= lo and hi <= band[1]:
        return "target met (the CI lies inside 0.97..1.03)"
    if hi < band[0] or lo > band[1]:
        return "target missed (the CI lies outside 0.97..1.03)"
    return "undecided: the CI is wider than the band, more --pairs narrow it"


def hand_iperf3(tb, addr: str, duration: float, port: int = 5301) -> tuple[float, float]:
    """iperf3 run by hand: server in b, client in a, nothing of tunbench in between. Its
    mean and its best 1 s interval, in Mbit/s."""
    server = proc.spawn(server_argv(addr, port), netns=tb.b.netns, label="hand-server",
                        log_path=tb.workdir / "hand-server.log")
    tb.ledger.process(server)
    try:
        for _ in range(500):
            if "Server listening" in server.output():
                break
            time.sleep(0.01)
        r = proc.run(["iperf3", "-c", addr, "-p", str(port), "-t", f"{duration:g}", "-O", "1",
                      "-J"], netns=tb.a.netns, timeout=duration + 30)
        doc = json.loads(r.stdout)
        best = max(i["sum"]["bits_per_second"] for i in doc["intervals"]
                   if not i["sum"].get("omitted"))
        return doc["end"]["sum_received"]["bits_per_second"] / 1e6, best / 1e6
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--setups", type=int, default=10)
    args = ap.parse_args()
    rid = names.new_run_id()
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger)
        drv = tunnels.get("vxlan")
        ep = drv().up(tb, drv.parse_params({}))
        ratios, best_ratios, cpu_pcts = [], [], []
        mean_pairs, best_pairs = [], []
        for i in range(args.pairs):
            # A B, then B A: whichever of the two runs first in a pair, half the pairs each,
            # so an order effect (a warmer host for the second run) cancels in the median
            hand_first = i % 2 == 1
            if hand_first:
                b, b_best = hand_iperf3(tb, ep.b4, args.duration)
            ctx = Context(tb, ep, duration=args.duration, warmup=1)
            c0, t0 = _self_cpu(), time.monotonic()
            out = Stream().run(ctx, StreamParams())
            c1, t1 = _self_cpu(), time.monotonic()
            a = float(out.metrics["throughput"].value or 0)
            a_best = float(paired_value(a, True, out.series.get("throughput")) or a)
            if not hand_first:
                b, b_best = hand_iperf3(tb, ep.b4, args.duration)
            mean_pairs.append((a, b))
            best_pairs.append((a_best, b_best))
            ratios.append(a / b)
            best_ratios.append(a_best / b_best)
            cpu_pcts.append(100.0 * (c1 - c0) / (t1 - t0))
            order = "hand first" if hand_first else "tunbench first"
            print(f"pair {i + 1} ({order}): tunbench {a:,.0f} Mbit/s (best second {a_best:,.0f}), "
                  f"hand iperf3 {b:,.0f} (best second {b_best:,.0f}), ratio of means {a / b:.3f}, "
                  f"of best seconds {a_best / b_best:.3f}, tunbench CPU {cpu_pcts[-1]:.2f}% "
                  "of one core", flush=True)
    print(f"(a) throughput tunbench/hand: median ratio of the means "
          f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"of the best seconds (what a round pairs) {statistics.median(best_ratios):.3f} "
          f"(min {min(best_ratios):.3f}, max {max(best_ratios):.3f}); target 0.97..1.03")
    for what, pairs in (("means", mean_pairs), ("best seconds", best_pairs)):
        est = share(pairs, scale=1.0)   # the paired log-scale estimate a report uses
        if est is not None and est.ci_low is not None and est.ci_high is not None:
            print(f"    paired geometric mean of the ratios of {what}: {est.mean:.3f} "
                  f"(95% CI {est.ci_low:.3f}-{est.ci_high:.3f}, n={est.n}): "
                  + _verdict(est.ci_low, est.ci_high))
    print(f"(b) tunbench's own CPU during a measurement: median "
          f"{statistics.median(cpu_pcts):.2f}% of one core (max {max(cpu_pcts):.2f}%); "
          "target <= 0.5%")

    # (c) vxlan setup + teardown on a standing testbed
    rid = names.new_run_id()
    times = []
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger)
        drv = tunnels.get("vxlan")
        for _ in range(args.setups):
            t0 = time.monotonic()
            tl = Ledger(rid + "t", journal=False)
            tb.ledger = tl
            ep = drv().up(tb, drv.parse_params({}))
            tl.close()
            times.append(time.monotonic() - t0)
        tb.ledger = ledger
        assert str(ep.a_ifname) not in netlink.link_names(tb.a.netns)
    print(f"(c) vxlan setup + teardown: median {statistics.median(times) * 1000:.0f} ms "
          f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}); target <= 500 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
