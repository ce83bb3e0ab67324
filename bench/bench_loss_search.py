"""loss-search benchmarks, side by side in one sitting (ratios, not timed tests).

1. Generator packets/s vs `iperf3 -u -b 0` between the two namespaces, 64 B and IMIX
   (iperf3 has no IMIX: it sends the IMIX mean size, 340 B), alternating, 2 s each. The
   generator runs as loss-search runs it (capture receiver behind the tc drop filter, one
   sender thread per CPU) and, for reference, in its socket mode with one thread. Each line
   also gives the loss each tool measured at that rate: a rate is only useful to a search if
   the receiving side keeps up with it.
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

from tunbench.testbed import bpfdrop, local, names, netlink  # noqa: E402
from tunbench.testbed.ledger import Ledger  # noqa: E402
from tunbench.workloads import loadgen  # noqa: E402
from tunbench.workloads.search import mlr_search, rfc2544_search  # noqa: E402

DST = local.UNDERLAY4[1]


def new_tb(rate: str | None = None):
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    return local.build(rid, ledger, rate=rate), ledger


def iperf3_pps(tb, l3: int) -> tuple[float, float]:
    srv = tb.spawn(tb.b, ["iperf3", "-s", "-1", "--forceflush", "-B", DST, "-p", "5401"], "iperf3-s")
    try:
        from tunbench.workloads.base import wait_for_output
        wait_for_output(srv, "Server listening")
        r = tb.a.run(["iperf3", "-c", DST, "-p", "5401", "-u", "-b", "0", "-l", str(l3 - 28),
                      "-t", "2", "-J"], timeout=30)
        end = json.loads(r.stdout)["end"]["sum"]
        return end["packets"] / end["seconds"], end["lost_percent"] / 100
    finally:
        srv.stop()


def bench_pps(rounds: int = 3) -> None:
    tb, ledger = new_tb()
    threads = loadgen.sender_threads()
    try:
        with bpfdrop.dropping(ledger, tb.b.netns, (tb.b.underlay_if,), 5402, 5402):
            for size, l3 in (("64", 64), ("imix", 340)):
                runs: dict[str, list[tuple[float, float]]] = {"cap": [], "sock": [], "ip": []}
                spec = loadgen.TrafficSpec(size=size, flows=100, port=5402)
                sock_spec = loadgen.TrafficSpec(size=size, flows=100, port=5404)
                for _ in range(rounds):
                    t = loadgen.run_trial(tb, DST, spec, 2.0, None, capture=True,
                                          threads=threads)
                    runs["cap"].append((t.offered_pps, t.loss_ratio))
                    t = loadgen.run_trial(tb, DST, sock_spec, 2.0, None)
                    runs["sock"].append((t.offered_pps, t.loss_ratio))
                    runs["ip"].append(iperf3_pps(tb, l3))
                med = {k: (statistics.median(p for p, _ in v), max(x for _, x in v))
                       for k, v in runs.items()}
                (cap, cap_loss), (sock, sock_loss), (ip, ip_loss) = (med["cap"], med["sock"],
                                                                     med["ip"])
                print(f"sent pps, size {size} (median of {rounds}; worst loss): "
                      f"loadgen capture x{threads} threads {cap:,.0f} ({cap_loss:.2%} loss), "
                      f"loadgen socket x1 {sock:,.0f} ({sock_loss:.2%}), "
                      f"iperf3 -u {ip:,.0f} ({ip_loss:.2%}) -> ratio {cap / ip:.2f}x "
                      f"(socket mode {sock / ip:.2f}x)", flush=True)
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
