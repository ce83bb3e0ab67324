"""loss-search benchmarks, side by side in one sitting (ratios, not timed tests).

1. Generator packets/s vs `iperf3 -u -b 0` between the two namespaces, 64 B and IMIX
   (iperf3 has no IMIX: it sends the IMIX mean size, 340 B), alternating, 2 s each.
2. Trial-seconds MLRsearch vs RFC 2544 bisection to reach the same relative width (0.5%) on the
   same tbf-shaped link (20 Mbit/s, small bucket), 1 s trials.
Run as root: .venv/bin/python bench/bench_loss_search.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "netns"))

from tunbench.testbed import local, names, netlink  # noqa: E402
from tunbench.testbed.ledger import Ledger  # noqa: E402
from tunbench.workloads import loadgen  # noqa: E402
from tunbench.workloads.search import mlr_search, rfc2544_search  # noqa: E402

DST = local.UNDERLAY4[1]


def new_tb(rate: str | None = None):
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    return local.build(rid, ledger, rate=rate), ledger


def iperf3_pps(tb, l3: int) -> float:
    srv = tb.spawn(tb.b, ["iperf3", "-s", "-1", "--forceflush", "-B", DST, "-p", "5401"], "iperf3-s")
    try:
        from tunbench.workloads.base import wait_for_output
        wait_for_output(srv, "Server listening")
        r = tb.a.run(["iperf3", "-c", DST, "-p", "5401", "-u", "-b", "0", "-l", str(l3 - 28),
                      "-t", "2", "-J"], timeout=30)
        end = json.loads(r.stdout)["end"]["sum"]
        return end["packets"] / end["seconds"]
    finally:
        srv.stop()


def bench_pps(rounds: int = 3) -> None:
    tb, ledger = new_tb()
    try:
        for size, l3 in (("64", 64), ("imix", 340)):
            lg, ip = [], []
            for _ in range(rounds):
                t = loadgen.run_trial(tb, DST, loadgen.TrafficSpec(size=size, flows=100,
                                                                   port=5402), 2.0, None)
                lg.append(t.offered_pps)
                ip.append(iperf3_pps(tb, l3))
            a, b = statistics.median(lg), statistics.median(ip)
            print(f"sent pps, size {size}: loadgen {a:,.0f} vs iperf3 -u {b:,.0f} "
                  f"(median of {rounds}) -> ratio {a / b:.2f}x")
    finally:
        ledger.close()


def bench_search_cost() -> None:
    from test_loss_search import tbf_knee_pps, tight_tbf
    tb, ledger = new_tb("20mbit")
    try:
        tight_tbf(tb)
        expected = tbf_knee_pps(361 + 14, 1.0)
        spec = loadgen.TrafficSpec(size="361", flows=100, port=5403)

        def measure(rate: float, dur: float):
            return loadgen.run_trial(tb, DST, spec, dur, rate)

        hi = expected * 1.5
        r = rfc2544_search(measure, hi, threshold=0.0, resolution_pps=expected * 0.005,
                           duration=1.0, min_pps=100)
        m = mlr_search(measure, hi, goals={"ndr": 0.0}, relative_width=0.005, duration=1.0,
                       min_pps=100)["ndr"]
        print(f"search to width 0.5% (NDR, 1 s trials, knee ~{expected:.0f} pps): "
              f"RFC 2544 {r.trial_seconds:g} trial-s ({len(r.trials)} trials) -> "
              f"{r.rate_pps:.0f} pps; MLRsearch {m.trial_seconds:g} trial-s "
              f"({len(m.trials)} trials) -> {m.rate_pps:.0f} pps; "
              f"ratio MLR/RFC {m.trial_seconds / r.trial_seconds:.2f}")
    finally:
        ledger.close()


if __name__ == "__main__":
    bench_pps()
    bench_search_cost()
