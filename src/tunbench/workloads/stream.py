"""stream: TCP bulk throughput with iperf3 --json, 1 s intervals (the study's throughput series).

The iperf3 server runs inside the receiving site for this measurement only and is stopped by
PID after it. The per-interval series is kept; warm-up intervals (iperf3 -O) are excluded.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .. import interrupts
from ..errors import CommandFailed
from ..remote.sshfail import ConnectionLost
from .base import (
    IPERF3_MAX_LENGTH,
    Context,
    Metric,
    Output,
    Workload,
    WorkloadParams,
    relay_problem,
    wait_for_output,
)

# Native beside the method (docs/methodology.md, "Native beside the method"): pairs of bursts
# of BURST_S seconds, the method's and native's in turn (the order alternating pair by pair),
# measured after the window with the tunnel up. A single stream's rate on a busy host wanders
# over seconds, so bursts seconds apart pair far more tightly than cases a minute apart:
# bench/bench_interleave.py measured the same CI in 0.11-0.37 of the measuring time.
NATIVE_BURSTS = 4
BURST_S = 1.0


@dataclass(frozen=True)
class StreamParams(WorkloadParams):
    streams: int = field(
        default=1,
        metadata={"help": "parallel TCP streams inside one iperf3 process (-P), 1..128"})
    reverse: bool = field(
        default=False,
        metadata={"help": "the server sends instead of the client (iperf3 -R)"})
    length: int = field(
        default=0,
        metadata={"help": "write size in bytes (iperf3 -l); 0 = iperf3's default (128 KiB)"})
    congestion: str = field(
        default="",
        metadata={"help": "TCP congestion control (iperf3 -C); empty = the system default"})
    affinity: str = field(
        default="",
        metadata={"help": "CPU pinning (iperf3 -A): 'N' pins the client, 'N,M' the client to "
                          "CPU N and the server to CPU M; empty = the scheduler decides"})
    bidir: bool = field(
        default=False,
        metadata={"help": "both directions at once, each with `streams` streams (iperf3 "
                          "--bidir); throughput is their sum, each direction kept apart"})
    native_bursts: int = field(
        default=NATIVE_BURSTS,
        metadata={"help": "after the window, this many pairs of 1 s bursts of the method "
                          "and of native over the underlay, in turn, with the tunnel up: "
                          "the case's own share of native, where native beside the kind "
                          "stays native (0..20; 0 = pair with the round's native cases)"})

    def validate(self) -> list[str]:
        problems = []
        if self.affinity and not re.fullmatch(r"\d{1,4}(,\d{1,4})?", self.affinity):
            problems.append(f"affinity {self.affinity!r} is not N or N,M (CPU numbers, "
                            "e.g. 0,1: client on CPU 0, server on CPU 1)")
        if self.reverse and self.bidir:
            problems.append("reverse and bidir exclude each other (iperf3 -R or --bidir)")
        if not 1 <= self.streams <= 128:
            problems.append(f"streams {self.streams} out of range (1..128 per iperf3 process)")
        if not 0 <= self.native_bursts <= 20:
            problems.append(f"native_bursts {self.native_bursts} out of range (0..20 pairs "
                            "of 1 s bursts; 0 = pair with the round's native cases)")
        if not 0 <= self.length <= IPERF3_MAX_LENGTH:
            problems.append(f"length {self.length} out of range (0..{IPERF3_MAX_LENGTH} bytes, "
                            "iperf3's largest write; 0 = its default)")
        return problems


def server_argv(bind: str, port: int, once: bool = True) -> list[str]:
    """iperf3's server bound to `bind`; `once`: it exits after one test (-1)."""
    return ["iperf3", "-s", *(["-1"] if once else []), "--forceflush", "-B", bind,
            "-p", str(port)]


def client_argv(addr: str, port: int, duration: float, warmup: float, p: StreamParams,
                bind: str | None = None) -> list[str]:
    argv = ["iperf3", "-c", addr, "-p", str(port), "-t", f"{duration:g}", "-i", "1",
            "-O", f"{warmup:g}", "-J", "-P", str(p.streams)]
    if bind:
        argv += ["-B", bind]
    if p.reverse:
        argv.append("-R")
    if p.bidir:
        argv.append("--bidir")
    if p.length:
        argv += ["-l", str(p.length)]
    if p.congestion:
        argv += ["-C", p.congestion]
    if p.affinity:
        argv += ["-A", p.affinity]
    return argv


def iperf3_document(text: str) -> dict[str, Any]:
    """iperf3's --json output as a dict, or one line saying why there is none (its own
    "error" field included)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandFailed(f"iperf3 printed no valid JSON ({exc.msg})",
                            "run the same iperf3 command by hand to see why") from None
    if not isinstance(data, dict):
        raise CommandFailed("iperf3 printed JSON that is not an object",
                            "run the same iperf3 command by hand to see why")
    if data.get("error"):
        raise CommandFailed(f"iperf3: {data['error']}")
    return data


def _intervals(data: dict[str, Any], key: str) -> list[tuple[float, float, float]]:
    """(start s, end s, Mbit/s) of one direction's per-interval sums, warm-up excluded."""
    return [(float(iv[key]["start"]), float(iv[key]["end"]), iv[key]["bits_per_second"] / 1e6)
            for iv in data.get("intervals", []) if key in iv and not iv[key].get("omitted")]


def _retransmits(*sums: dict[str, Any]) -> int | None:
    found = [s["retransmits"] for s in sums if s.get("retransmits") is not None]
    return sum(found) if found else None


def parse_iperf3(text: str) -> dict[str, Any]:
    """The figures tunbench keeps from one iperf3 --json client run (pure; tested on captures).

    With --bidir iperf3 reports the client's sending direction (a -> b) in `sum` / `sum_sent`
    / `sum_received` and the server's (b -> a) in the `*_bidir_reverse` twins: the throughput
    and series are both directions summed, each direction kept as well. With -R the client
    is the receiver; `sum_received` is still what arrived. `intervals` is the client's own
    `sum` (with --bidir: a -> b); with --bidir `intervals_a_to_b` / `intervals_b_to_a` hold
    each direction's (start, end, Mbit/s), for an aggregation over several processes."""
    data = iperf3_document(text)
    end = data.get("end") or {}
    test = data.get("start", {}).get("test_start", {})
    bidir = bool(test.get("bidir")) or "sum_received_bidir_reverse" in end
    intervals = _intervals(data, "sum")
    sent, recv = end.get("sum_sent", {}), end.get("sum_received", {})
    cpu = end.get("cpu_utilization_percent", {})
    out: dict[str, Any] = {
        "throughput_mbps": recv.get("bits_per_second", 0.0) / 1e6,
        "sent_mbps": sent.get("bits_per_second", 0.0) / 1e6,
        "bytes_received": recv.get("bytes", 0),
        "retransmits": sent.get("retransmits"),
        "seconds": recv.get("seconds"),
        "series_mbps": [mbps for _, _, mbps in intervals],
        "intervals": intervals,                 # (start s, end s, Mbit/s), warm-up excluded
        "cpu_client_pct": cpu.get("host_total"),
        "cpu_server_pct": cpu.get("remote_total"),
        "streams": test.get("num_streams"),
        "protocol": test.get("protocol"),
        "reverse": bool(test.get("reverse")),
        "bidir": bidir,
        "version": data.get("start", {}).get("version"),
        "mss": data.get("start", {}).get("tcp_mss_default"),
    }
    if bidir:
        back_sent = end.get("sum_sent_bidir_reverse", {})
        back_recv = end.get("sum_received_bidir_reverse", {})
        back = _intervals(data, "sum_bidir_reverse")
        ab, ba = out["throughput_mbps"], back_recv.get("bits_per_second", 0.0) / 1e6
        out.update(
            throughput_mbps=ab + ba, throughput_a_to_b_mbps=ab, throughput_b_to_a_mbps=ba,
            sent_mbps=out["sent_mbps"] + back_sent.get("bits_per_second", 0.0) / 1e6,
            bytes_received=out["bytes_received"] + back_recv.get("bytes", 0),
            bytes_a_to_b=out["bytes_received"], bytes_b_to_a=back_recv.get("bytes", 0),
            retransmits=_retransmits(sent, back_sent),
            series_mbps=[f[2] + r[2] for f, r in zip(intervals, back)],
            series_a_to_b_mbps=[f[2] for f in intervals],
            series_b_to_a_mbps=[r[2] for r in back],
            intervals_a_to_b=intervals, intervals_b_to_a=back)
    return out


def burst_order(pairs: int) -> list[str]:
    """Which side runs each burst: method first in even pairs, native first in odd ones, so
    neither side always follows the other (a drift within a pair cancels over two)."""
    return [s for i in range(pairs)
            for s in (("method", "native") if i % 2 == 0 else ("native", "method"))]


def _burst(ctx: Context, params: StreamParams, target: str, side: str) -> dict[str, Any]:
    """One burst of BURST_S to `target`, parsed; tried a second time after a failure (a
    server that has just served the burst before may still be closing it: iperf3 then says
    it is busy)."""
    for attempt in (1, 2):
        client = ctx.tb.spawn(ctx.client, client_argv(target, ctx.port_base, BURST_S, 0,
                                                      params),
                              f"iperf3-burst-{side}", split_stderr=True)
        try:
            client.wait(timeout=BURST_S + 30)
            return parse_iperf3(client.output())
        except CommandFailed:
            if attempt == 2:
                raise
            time.sleep(0.2)
        finally:
            client.stop()
    raise AssertionError("unreachable")


def native_beside(ctx: Context, params: StreamParams, addr: str) -> dict[str, Any]:
    """Native's bursts beside the method's (BURST_S each, burst_order), the tunnel up: what
    the case file keeps under `paired_native.throughput` (results/model.own_share reads it).
    Two servers on the receiving site, one on the tunnel's inner address and one on the
    underlay address (Context.native_beside), each serving every burst of its side."""
    under = str(ctx.native_beside)
    order = burst_order(params.native_bursts)
    ctx.phase("native beside", f"{params.native_bursts} pairs of {BURST_S:g} s bursts, the "
              "method's and native's in turn", expected_s=len(order) * (BURST_S + 0.3))
    servers = []
    try:
        for side, bind in (("method", addr), ("native", under)):
            servers.append(ctx.tb.spawn(ctx.server, server_argv(bind, ctx.port_base,
                                                                  once=False),
                                        f"iperf3-server-{side}"))
        for server in servers:
            wait_for_output(server, "Server listening")
        got: dict[str, list[float]] = {"method": [], "native": []}
        nbytes: dict[str, list[int]] = {"method": [], "native": []}
        for side in order:
            parsed = _burst(ctx, params, addr if side == "method" else under, side)
            got[side].append(parsed["throughput_mbps"])
            nbytes[side].append(int(parsed["bytes_received"]))
    finally:
        for server in servers:
            server.stop()
    return {"pairs": params.native_bursts, "burst_s": BURST_S, "order": order,
            "method": got["method"], "native": got["native"], "bytes": nbytes,
            "native_addr": under}


class Stream(Workload[StreamParams]):
    name = "stream"
    summary = "single-stream TCP throughput series (iperf3, 1 s intervals)"
    Params = StreamParams
    tools = ("iperf3",)
    headline = ("throughput", "retransmits")

    @classmethod
    def expected_seconds(cls, params: StreamParams, duration: float, warmup: float) -> float:
        """The window, and native beside it where the kind allows (counted always: the ETA
        errs long for the kinds that pair by round)."""
        beside = 2 * params.native_bursts * (BURST_S + 0.3)
        return super().expected_seconds(params, duration, warmup) + beside

    def unsupported(self, ctx: Context, params: StreamParams) -> str | None:
        if params.affinity and ctx.tb.placement:
            return (f"affinity {params.affinity} and per-site placement both choose iperf3's "
                    "CPUs: use one (placement = \"off\", or no affinity)")
        if params.affinity and ctx.tb.a.host is None and ctx.tb.b.host is None:
            cpus = os.cpu_count() or 1
            if any(int(c) >= cpus for c in params.affinity.split(",")):
                return (f"affinity {params.affinity} names a CPU this host does not have "
                        f"(CPUs 0..{cpus - 1})")
        return relay_problem(ctx, tcp_ports=[ctx.port_base])

    def run(self, ctx: Context, params: StreamParams) -> Output:
        addr = ctx.server_addr()
        ctx.phase("server start", "iperf3", site=ctx.server)
        server = ctx.tb.spawn(ctx.server, server_argv(addr, ctx.port_base), "iperf3-server")
        try:
            wait_for_output(server, "Server listening")
            way = ", reverse" if params.reverse else ", both directions" if params.bidir else ""
            ctx.phase("measuring", f"iperf3, {params.streams} TCP stream"
                      f"{'s' if params.streams != 1 else ''}{way}",
                      expected_s=ctx.duration + ctx.warmup, warmup_s=ctx.warmup)
            with ctx.measuring() as cpu:
                cpu.track(server.pid, "iperf3-server")
                client = ctx.tb.spawn(ctx.client, client_argv(addr, ctx.port_base, ctx.duration,
                                      ctx.warmup, params), "iperf3-client",
                                      split_stderr=True)
                cpu.track(client.pid, "iperf3-client")
                client.wait(timeout=ctx.duration + ctx.warmup + 30)
            parsed = parse_iperf3(client.output())
        finally:
            server.stop()
        metrics = {
            "throughput": Metric(parsed["throughput_mbps"], "Mbit/s"),
            "retransmits": Metric(parsed["retransmits"], "segments", higher_is_better=False),
            "iperf3_cpu_client": Metric(parsed["cpu_client_pct"], "%", False),
            "iperf3_cpu_server": Metric(parsed["cpu_server_pct"], "%", False),
        }
        series = {"throughput": parsed["series_mbps"]}
        if parsed["bidir"]:   # both directions at once: each kept beside their sum
            for way in ("a_to_b", "b_to_a"):
                metrics[f"throughput_{way}"] = Metric(parsed[f"throughput_{way}_mbps"],
                                                      "Mbit/s")
                series[f"throughput_{way}"] = parsed[f"series_{way}_mbps"]
        return Output(metrics=metrics, series=series, raw={"iperf3": parsed})

    def after_window(self, ctx: Context, params: StreamParams, out: Output) -> None:
        if not (ctx.native_beside and params.native_bursts):
            return
        try:
            out.paired_native["throughput"] = native_beside(ctx, params, ctx.server_addr())
        except ConnectionLost:   # the host is gone: the case fails, as any remote call would
            raise
        except CommandFailed as exc:   # the window's figures stand; it pairs by round
            interrupts.check()   # a signal's exception turned into another: the run ends
            out.notes.append(f"native beside the method not measured ({exc.one_line()}): "
                             "this case pairs with its round's native cases")


WORKLOAD = Stream
