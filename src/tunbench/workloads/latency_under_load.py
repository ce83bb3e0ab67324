"""latency-under-load: request/response latency while N bulk TCP streams fill the same path,
next to the idle latency measured in the same case (flent's RRUL idea: what a tunnel or a
chain does to interactive traffic once it is busy).

One case, one sockperf server in site b, two windows of ctx.duration each:
1. idle: sockperf ping-pong alone (the same machinery as the latency workload);
2. loaded: iperf3 with `streams` TCP streams from site a to site b (or back with `reverse`)
   runs first for the warm-up (TCP ramps up, queues fill), then the same ping-pong runs while
   the streams go on; iperf3 ends after it. CPU per core is sampled over this window.

Both distributions are recorded as RTT metrics of one base (`tcp_rtt` / `udp_rtt`) whose dim
`streams` says how many bulk streams ran (0 = idle), so the report draws latency against load;
the loaded/idle ratio of the median and the streams' goodput are recorded beside them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import CommandFailed
from . import latency, stream
from .base import Context, Metric, Output, Workload, WorkloadParams, relay_problem, wait_for_output

RAMP_MIN_S = 1.0     # the streams run at least this long before the loaded ping-pong starts


@dataclass(frozen=True)
class LatencyUnderLoadParams(WorkloadParams):
    streams: int = field(
        default=4,
        metadata={"help": "bulk TCP streams (one iperf3 process, -P) during the loaded "
                  "window, 1..128 (several counts: one [[workload]] table each, with a label)"})
    protocol: Literal["tcp", "udp"] = field(
        default="udp",
        metadata={"help": "the request/response traffic: udp or tcp sockperf ping-pong"})
    msg_size: int = field(
        default=64,
        metadata={"help": "bytes per request and per reply (sockperf -m)"})
    reverse: bool = field(
        default=False,
        metadata={"help": "the bulk streams flow from site b to site a (iperf3 -R)"})
    congestion: str = field(
        default="",
        metadata={"help": "TCP congestion control of the bulk streams (iperf3 -C); empty = "
                  "the system default"})

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.streams <= 128:
            problems.append(f"streams {self.streams} out of range (1..128 per iperf3 process)")
        if not 14 <= self.msg_size <= 65000:
            problems.append(f"msg_size {self.msg_size} out of range (14..65000, sockperf's)")
        if self.protocol not in ("tcp", "udp"):
            problems.append(f"protocol {self.protocol!r} must be tcp or udp")
        return problems

    def ping(self) -> latency.LatencyParams:
        return latency.LatencyParams(protocol=self.protocol, msg_size=self.msg_size)

    def bulk(self) -> stream.StreamParams:
        return stream.StreamParams(streams=self.streams, reverse=self.reverse,
                                   congestion=self.congestion)


def ramp_seconds(warmup: float) -> float:
    return max(RAMP_MIN_S, warmup)


def bulk_seconds(duration: float, warmup: float) -> int:
    """iperf3's -t: the ramp, then the whole ping-pong (sockperf's start-up and its own
    warm-up included) and a second of margin, so the streams never stop before the latency
    window closes (checked after each run: `_loaded`)."""
    return math.ceil(ramp_seconds(warmup) + latency.SOCKPERF_STARTUP + duration + warmup
                     + 0.1) + 1


def latency_ratio(loaded: float | None, idle: float | None) -> float | None:
    """How many times the idle median the loaded median is (pure)."""
    if loaded is None or not idle:
        return None
    return loaded / idle


class LatencyUnderLoad(Workload[LatencyUnderLoadParams]):
    name = "latency-under-load"
    summary = ("request/response RTT (sockperf) idle and while N bulk TCP streams (iperf3) "
               "run through the same path, RRUL-like")
    Params = LatencyUnderLoadParams
    tools = ("sockperf", "iperf3")
    headline = ("loaded_rtt_p50", "idle_rtt_p50", "loaded_rtt_p99", "idle_rtt_p99",
                "loaded_rtt_mean", "loaded_rtt_std", "rtt_p50_ratio", "load_throughput")

    @classmethod
    def expected_seconds(cls, params: LatencyUnderLoadParams, duration: float,
                         warmup: float) -> float:
        return math.ceil(duration + warmup) + 2.0 + bulk_seconds(duration, warmup) + 2.0

    def unsupported(self, ctx: Context, params: LatencyUnderLoadParams) -> str | None:
        if params.protocol == "udp":
            return relay_problem(ctx, not_tcp="UDP (sockperf)")
        return relay_problem(ctx, tcp_ports=[ctx.port_base, ctx.port_base
                                             + latency.PORT_OFFSET])

    def run(self, ctx: Context, params: LatencyUnderLoadParams) -> Output:
        addr = ctx.server_addr()
        proto = params.protocol
        logdir = latency.private_logdir(ctx)
        out = Output()
        ctx.phase("server start", f"sockperf {proto}", site=ctx.server)
        pong = ctx.tb.spawn(ctx.server, latency.server_argv(proto, addr,
                                                            ctx.port_base + latency.PORT_OFFSET),
                            f"sockperf-server-{proto}")
        try:
            latency.wait_bound(ctx, pong, proto, ctx.port_base + latency.PORT_OFFSET)
            ctx.phase("measuring", f"sockperf {proto} ping-pong, idle",
                      expected_s=ctx.duration + ctx.warmup, warmup_s=ctx.warmup)
            idle, idle_printed = latency.ping_pong(ctx, proto, params.ping(), logdir,
                                                   label="-idle")
            loaded, loaded_printed, bulk = self._loaded(ctx, params, logdir, pong.pid)
        finally:
            pong.stop()
        n = params.streams
        out.metrics.update(latency.rtt_metrics("idle_rtt", f"{proto}_rtt", idle, {"streams": 0}))
        out.metrics.update(latency.rtt_metrics("loaded_rtt", f"{proto}_rtt", loaded,
                                               {"streams": n}))
        out.metrics["rtt_p50_ratio"] = Metric(latency_ratio(loaded["p50"], idle["p50"]), "×",
                                              False, dims={"streams": n})
        out.metrics["load_throughput"] = Metric(bulk["throughput_mbps"], "Mbit/s",
                                                dims={"streams": n})
        out.metrics["load_retransmits"] = Metric(bulk["retransmits"], "segments", False,
                                                 dims={"streams": n})
        out.series["idle_rtt_p50"] = idle.pop("series_p50")
        out.series["loaded_rtt_p50"] = loaded.pop("series_p50")
        out.series["load_throughput"] = bulk["series_mbps"]
        out.raw = {"protocol": proto, "streams": n, "reverse": params.reverse,
                   "idle": {"stats": {k: v for k, v in idle.items() if k != "cdf"},
                            "cdf": idle["cdf"], "sockperf_summary": idle_printed},
                   "loaded": {"stats": {k: v for k, v in loaded.items() if k != "cdf"},
                              "cdf": loaded["cdf"], "sockperf_summary": loaded_printed},
                   "iperf3": bulk, "ramp_s": ramp_seconds(ctx.warmup),
                   "cpu_window": "loaded (bulk streams and ping-pong together)"}
        return out

    def _loaded(self, ctx: Context, params: LatencyUnderLoadParams, logdir: Any,
                pong_pid: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The bulk streams, ramped up, then the ping-pong while they run; CPU sampled over
        the whole window."""
        addr = ctx.server_addr()
        ramp = ramp_seconds(ctx.warmup)
        secs = bulk_seconds(ctx.duration, ctx.warmup)
        ctx.phase("server start", "iperf3", site=ctx.server)
        sink = ctx.tb.spawn(ctx.server, stream.server_argv(addr, ctx.port_base), "iperf3-server")
        try:
            wait_for_output(sink, "Server listening")
            ctx.phase("measuring", f"sockperf {params.protocol} ping-pong under "
                      f"{params.streams} TCP stream{'s' if params.streams != 1 else ''}",
                      expected_s=secs, warmup_s=ramp)
            with ctx.measuring() as cpu:
                cpu.track(sink.pid, "iperf3-server")
                cpu.track(pong_pid, f"sockperf-server-{params.protocol}")
                bulk = ctx.tb.spawn(ctx.client, stream.client_argv(
                    addr, ctx.port_base, secs, ramp, params.bulk()), "iperf3-client",
                    split_stderr=True)
                cpu.track(bulk.pid, "iperf3-client")
                # not a readiness wait: TCP's ramp-up, so the ping-pong meets full queues
                time.sleep(ramp)
                if bulk.poll() is not None:
                    raise CommandFailed(f"iperf3 ended before the loaded window: "
                                        f"{bulk.log_tail(2)}", argv=bulk.argv)
                loaded, printed = latency.ping_pong(ctx, params.protocol, params.ping(),
                                                    logdir, cpu, label="-loaded")
                if bulk.poll() is not None:   # the window's tail would have been idle
                    raise CommandFailed(
                        f"the bulk streams (iperf3 -t {secs}) ended before the loaded "
                        "ping-pong did (sockperf started late on a busy host), so part of its "
                        "window may have run without load: not recorded", argv=bulk.argv)
                bulk.wait(timeout=secs + 30)
            parsed = stream.parse_iperf3(bulk.output())
        finally:
            sink.stop()
        return loaded, printed, parsed


WORKLOAD = LatencyUnderLoad
