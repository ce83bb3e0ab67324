"""Benchmark of the remote transport (issue 13). Run as root: python bench/bench_remote.py

Per-command latency to a site reached over SSH (a namespace running a real sshd, the test
hosts of tests/remote/sshhosts.py, over a veth + bridge: loopback-like), side by side:
  ssh      `true` as a mux client over the site's ControlMaster connection (transport.run)
  agent    `true` run by the agent (one JSON request/reply on the open SSH channel + fork)
  agent-rt a request that runs nothing (`hello`): the protocol round trip alone
  netns    `ip netns exec NS true` on this host: what the local testbed pays per command
Target: ssh median <= 20 ms. Also: time to connect and to start the agent. Alternated
round-robin so host drift hits all alike; compare ratios, the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "remote"))

from sshhosts import build  # noqa: E402

from tunbench import proc  # noqa: E402
from tunbench.remote.agent.client import Agent  # noqa: E402
from tunbench.remote.transport import Connection  # noqa: E402


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tb-bench-remote-") as tmp:
        hosts = build(Path(tmp) / "h", count=1)
        try:
            h1 = hosts.hosts["h1"]
            t0 = time.perf_counter()
            conn = Connection.open("h1", options=hosts.options(), name="a")
            t_open = time.perf_counter() - t0
            t0 = time.perf_counter()
            agent = Agent.start(conn, netlink=False)
            t_agent = time.perf_counter() - t0
            cases: dict[str, Callable[[], object]] = {
                "netns": lambda: proc.run(["true"], netns=h1.netns),
                "ssh": lambda: conn.run(["true"]),
                "agent": lambda: agent.run(["true"]),
                "agent-rt": lambda: agent.call("hello"),
            }
            times: dict[str, list[float]] = {k: [] for k in cases}
            for _ in range(args.count):
                for name, fn in cases.items():
                    t0 = time.perf_counter()
                    fn()
                    times[name].append((time.perf_counter() - t0) * 1000)
            agent.close()
            conn.close()
        finally:
            hosts.close()
    base = statistics.median(times["netns"])
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"connect (ControlMaster, auth, host key): {t_open * 1000:.0f} ms; "
          f"agent start (ship ~10 KB zipapp, python3 start): {t_agent * 1000:.0f} ms")
    print(f"{'per command':<10} {'median ms':>10} {'p90 ms':>8} {'x netns':>8}   "
          f"({args.count} each, alternated)")
    for name, vals in times.items():
        med = statistics.median(vals)
        print(f"{name:<10} {med:>10.2f} {pct(vals, 0.9):>8.2f} {med / base:>8.2f}")
    ssh = statistics.median(times["ssh"])
    print(f"ssh median {ssh:.1f} ms: target <= 20 ms {'met' if ssh <= 20 else 'NOT met'}; "
          f"agent is {ssh / statistics.median(times['agent']):.1f}x faster than ssh per command")
    return 0


if __name__ == "__main__":
    sys.exit(main())
