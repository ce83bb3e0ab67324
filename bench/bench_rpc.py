"""rpc generator benchmark, side by side in one sitting (ratios, not timed tests).

tunbench-rpc at one connection and fixed 64 B messages against sockperf TCP ping-pong with
64 B messages (the latency workload's tool), alternating, between the two namespaces over the
veth underlay: transactions/s and median round trip of each, and their ratios. The generator
must not be the slower of the two where both do the same thing (one outstanding request);
then, for scale, tunbench-rpc at 64 connections with the micro mix.
Run as root: .venv/bin/python bench/bench_rpc.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "netns"))

from tunbench import proc  # noqa: E402
from tunbench.testbed import local, names, netlink  # noqa: E402
from tunbench.testbed.ledger import Ledger  # noqa: E402
from tunbench.workloads import latency, rpc  # noqa: E402

DST = local.UNDERLAY4[1]
SECONDS = 2


def rpc_run(tb, connections: int, mix: str) -> tuple[float, float]:
    binary = rpc.find_binary()
    assert binary, "tunbench-rpc is not built (make loadgen)"
    p = rpc.RpcParams(connections=connections, mix=mix, response_mix=mix)
    srv = tb.spawn(tb.b, rpc.server_argv(binary, DST, 7301, p), "rpc-s", split_stderr=True)
    try:
        proc.wait_ready(srv, ready=lambda: "ready" in srv.errors().split(), timeout=10)
        r = tb.a.run(rpc.client_argv(binary, DST, 7301, p, SECONDS, 0.5), timeout=60)
        c = rpc.parse_client(r.stdout)
        return c["tx_per_s"], c["latency_us"]["p50"]
    finally:
        srv.stop()


def wait_listening(tb, srv, port: int, timeout: float = 5.0) -> None:
    """Ready when site b has a TCP socket listening on the port (ss), as the workload checks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = tb.b.run(["ss", "-Hlnt", "sport", "=", f":{port}"], check=False, timeout=5)
        if r.ok and r.stdout.strip():
            return
        if srv.poll() is not None:
            break
        time.sleep(0.02)
    raise RuntimeError(f"sockperf server did not listen on {port}: {srv.log_tail(3)}")


def sockperf_run(tb) -> tuple[float, float]:
    srv = tb.spawn(tb.b, latency.server_argv("tcp", DST, 7302), "sockperf-s")
    try:
        wait_listening(tb, srv, 7302)
        r = tb.a.run(["sockperf", "pp", "--tcp", "-i", DST, "-p", "7302", "-t", str(SECONDS),
                      "-m", "64", "--full-rtt"], timeout=60)
        s = latency.parse_sockperf(r.stdout)
        return s["received"] / s["seconds"], s["p50.000"]
    finally:
        srv.stop()


def main(rounds: int = 3) -> None:
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    tb = local.build(rid, ledger)
    try:
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(rpc_run(tb, 1, "64"))
            theirs.append(sockperf_run(tb))
        o_tx = statistics.median(x for x, _ in ours)
        t_tx = statistics.median(x for x, _ in theirs)
        o_p50 = statistics.median(y for _, y in ours)
        t_p50 = statistics.median(y for _, y in theirs)
        print(f"1 connection, 64 B: tunbench-rpc {o_tx:,.0f} tx/s p50 {o_p50:.1f} µs; "
              f"sockperf {t_tx:,.0f} tx/s p50 {t_p50:.1f} µs; "
              f"ratio tx/s {o_tx / t_tx:.2f}x, p50 {o_p50 / t_p50:.2f}x (median of {rounds})")
        many = [rpc_run(tb, 64, "micro") for _ in range(rounds)]
        print(f"64 connections, micro mix: tunbench-rpc "
              f"{statistics.median(x for x, _ in many):,.0f} tx/s, p50 "
              f"{statistics.median(y for _, y in many):.0f} µs "
              f"({statistics.median(x for x, _ in many) / o_tx:.1f}x one connection)")
    finally:
        ledger.close()
        local.sweep(rid)


if __name__ == "__main__":
    main()
