"""The TCP ports the workloads' servers listen on in site b, in one table.

A stream relay (ssh-forward) carries only the TCP ports it forwards, so it must know them;
the workloads take theirs from here too, so the two cannot drift apart. Everything is
relative to the case's port base (workloads/base.Context.port_base, PORT_BASE by default).
"""

from __future__ import annotations

PORT_BASE = 5201        # iperf3's own default: stream, parallel-streams and line-rate-processes
                        # (+1 per process), rpc (one server at the base)
SOCKPERF_OFFSET = 6000  # latency and latency-under-load: sockperf's server at base + this


def sockperf_port(base: int = PORT_BASE) -> int:
    return base + SOCKPERF_OFFSET
