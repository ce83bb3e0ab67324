"""udp-rate: UDP throughput at a target rate with iperf3 -u (seed 004 measured TCP and UDP).

TCP backs off; UDP at a fixed offered rate shows what a tunnel *delivers* of what is offered:
the received goodput, the loss and the jitter, with CPU sampled alongside. iperf3's -b is per
stream, so the target rate is split evenly over `streams`. The datagram size defaults to the
largest that fits the tunnel's inner MTU unfragmented (MTU - IP header - 8 B UDP header), so the
tunnel's own fragmentation never enters the figure; a larger `length` is refused for the case.

Where the figures come from (iperf3 3.12, checked against captures in tests/data/iperf3): the
receiver's report is the truth. Forward, that is the server's report, fetched into the client's
JSON with --get-server-output (the server runs with -J for it); its per-second intervals are the
received series, its end sum gives lost/total datagrams and jitter. The client's own
`sum_received.lost_packets` over-counts (it disagrees with the bytes received), so it is not
used. The server's end sum reports 0 bytes, so the received bytes and goodput come from the
client's `sum_received`, which is right. With `reverse` the client is the receiver and its
own intervals and sums are used.

`rate` may be a list in an experiment: one case per rate (labelled udp-rate-500m, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommandFailed
from ..proc import wait_ready
from .base import Context, Metric, Output, Workload, WorkloadParams, relay_problem
from .stream import iperf3_document
from .traffic import IP_UDP_HEADERS

MAX_DATAGRAM = 65507
MIN_INTERVAL_S = 0.25                    # shorter receiver intervals are end stragglers                     # largest UDP payload over IPv4
MIN_RATE_BPS, MAX_RATE_BPS = 1_000, 400_000_000_000
_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(?:bit)?$")


def target_bps(rate: str) -> int:
    """'1g' / '500M' / '250mbit' / '2.5g' / '100000' (bit/s) -> bits per second (pure).

    Decimal units like iperf3's -b and tc's 'mbit'. 'mbps' is refused: tc reads it as bytes,
    iperf3 not at all. The rate also names the case (udp-rate-500m), so no '/' or spaces.
    Raises ValueError naming the accepted forms.
    """
    m = _RATE_RE.match(str(rate).strip().lower())
    if not m:
        raise ValueError(f"rate {rate!r} is not a rate: write a number of bit/s with an "
                         "optional k/m/g/t suffix, e.g. \"500m\", \"1g\", \"2.5gbit\"")
    return round(float(m.group(1)) * _SUFFIX[m.group(2)])


@dataclass(frozen=True)
class UdpRateParams(WorkloadParams):
    rate: str = field(
        default="1g",
        metadata={"help": "offered rate in bit/s with k/m/g/t suffix (\"500m\", \"1g\"); a list "
                  "in an experiment = one case per rate; split evenly over the streams"})
    streams: int = field(
        default=1,
        metadata={"help": "parallel UDP streams in one iperf3 process (-P), 1..128"})
    length: int = field(
        default=0,
        metadata={"help": "datagram payload in bytes (iperf3 -l); 0 = the largest that fits "
                  "the tunnel's inner MTU unfragmented (MTU - IP - UDP header)"})
    reverse: bool = field(
        default=False,
        metadata={"help": "the server sends instead of the client (iperf3 -R)"})

    def validate(self) -> list[str]:
        problems = []
        try:
            bps = target_bps(self.rate)
            if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS:
                problems.append(f"rate {self.rate!r} out of range (1k..400g bit/s)")
        except ValueError as exc:
            problems.append(str(exc))
        if not 1 <= self.streams <= 128:
            problems.append(f"streams {self.streams} out of range (1..128 per iperf3 process)")
        if not 0 <= self.length <= MAX_DATAGRAM:
            problems.append(f"length {self.length} out of range (0..{MAX_DATAGRAM} bytes; "
                            "0 = fit the tunnel's MTU)")
        return problems


def datagram_size(params: UdpRateParams, mtu: int, family: int) -> int:
    """The payload per datagram: `length`, else the largest that the inner MTU carries whole."""
    return params.length or min(mtu - IP_UDP_HEADERS[family], MAX_DATAGRAM)


def server_argv(bind: str, port: int) -> list[str]:
    """-J so that the client's --get-server-output carries the server's report as JSON."""
    return ["iperf3", "-s", "-1", "-J", "-B", bind, "-p", str(port)]


def client_argv(addr: str, port: int, duration: float, warmup: float, p: UdpRateParams,
                length: int) -> list[str]:
    per_stream = max(1, target_bps(p.rate) // p.streams)
    argv = ["iperf3", "-c", addr, "-p", str(port), "-u", "-b", str(per_stream),
            "-l", str(length), "-t", f"{duration:g}", "-i", "1", "-O", f"{warmup:g}",
            "-P", str(p.streams), "-J", "--get-server-output"]
    if p.reverse:
        argv.append("-R")
    return argv


def parse_udp(text: str, reverse: bool = False) -> dict[str, Any]:
    """The figures kept from one iperf3 -u -J --get-server-output client run (pure; tested on
    captures). See the module doc for which side each figure is taken from."""
    data = iperf3_document(text)
    receiver = data if reverse else data.get("server_output_json")
    if not isinstance(receiver, dict):
        raise CommandFailed("iperf3 returned no receiver report (server_output_json)",
                            "the server must run with -J and the client with "
                            "--get-server-output")
    end = data.get("end") or {}
    sent, recv = end.get("sum_sent") or {}, end.get("sum_received") or {}
    rsum = (receiver.get("end") or {}).get("sum") or {}
    if not sent or not recv or "packets" not in rsum:
        raise CommandFailed("iperf3's UDP report has no end sums", "raise the duration")
    measured = [(float(iv["sum"]["start"]), float(iv["sum"]["end"]),
                 iv["sum"]["bits_per_second"] / 1e6)
                for iv in receiver.get("intervals", []) if not iv["sum"].get("omitted")]
    # the receiver may close with a straggler of a few ms (datagrams still queued when the
    # sender stopped) whose rate is meaningless (seen: 4 ms at 2x the target): not a second
    intervals = [iv for iv in measured if iv[1] - iv[0] >= MIN_INTERVAL_S]
    packets, lost = int(rsum["packets"]), int(rsum.get("lost_packets", 0))
    test = data.get("start", {}).get("test_start", {})
    cpu = end.get("cpu_utilization_percent", {})
    return {
        "goodput_mbps": recv.get("bits_per_second", 0.0) / 1e6,
        "sent_mbps": sent.get("bits_per_second", 0.0) / 1e6,
        "bytes_received": int(recv.get("bytes", 0)),
        "bytes_sent": int(sent.get("bytes", 0)),
        "datagrams_sent": packets,
        "datagrams_lost": lost,
        "loss_pct": 100.0 * lost / packets if packets else None,
        "jitter_ms": rsum.get("jitter_ms"),
        "out_of_order": sum(int((s.get("udp") or {}).get("out_of_order", 0))
                            for s in (receiver.get("end") or {}).get("streams", [])),
        "seconds": recv.get("seconds"),
        "series_mbps": [mbps for _, _, mbps in intervals],
        "intervals": intervals,                # receiver's (start s, end s, Mbit/s), warm-up out
        "short_intervals_dropped": len(measured) - len(intervals),
        "length": test.get("blksize"),
        "streams": test.get("num_streams"),
        "target_bps_per_stream": test.get("target_bitrate"),
        "cpu_client_pct": cpu.get("host_total"),
        "cpu_server_pct": cpu.get("remote_total"),
        "version": data.get("start", {}).get("version"),
    }


def listening_check(ctx: Context, port: int) -> bool:
    """The JSON server prints nothing until it ends: ready once its TCP control port listens."""
    r = ctx.server.run(["ss", "-ltnH", "sport", "=", f":{port}"], check=False, timeout=10)
    return bool(r.stdout.strip())


class UdpRate(Workload[UdpRateParams]):
    name = "udp-rate"
    summary = ("UDP at a target rate (iperf3 -u): received goodput, loss %, jitter and CPU; "
               "datagrams sized to the tunnel's MTU")
    Params = UdpRateParams
    tools = ("iperf3", "ss")
    headline = ("throughput", "loss")
    sweep = "rate"

    def unsupported(self, ctx: Context, params: UdpRateParams) -> str | None:
        relay = relay_problem(ctx, not_tcp="UDP")
        if relay:
            return relay
        size = datagram_size(params, ctx.ep.mtu, ctx.family)
        fits = ctx.ep.mtu - IP_UDP_HEADERS[ctx.family]
        if size > fits:
            return (f"length {size} B does not fit the tunnel's inner MTU {ctx.ep.mtu} unfragmented "
                    f"(at most {fits} B); leave length at 0 to fit it")
        if size < 16:
            return f"the tunnel's inner MTU {ctx.ep.mtu} leaves no room for a datagram"
        return None

    def run(self, ctx: Context, params: UdpRateParams) -> Output:
        addr = ctx.server_addr()
        port = ctx.port_base
        length = datagram_size(params, ctx.ep.mtu, ctx.family)
        target = target_bps(params.rate) / 1e6
        ctx.phase("server start", "iperf3", site=ctx.server)
        server = ctx.tb.spawn(ctx.server, server_argv(addr, port), "iperf3-server")
        try:
            wait_ready(server, ready=lambda: listening_check(ctx, port), timeout=10)
            ctx.phase("measuring", f"iperf3 -u at {target:g} Mbit/s, {length} B datagrams"
                      f"{', reverse' if params.reverse else ''}",
                      expected_s=ctx.duration + ctx.warmup, warmup_s=ctx.warmup)
            with ctx.measuring() as cpu:
                cpu.track(server.pid, "iperf3-server")
                client = ctx.tb.spawn(ctx.client, client_argv(addr, port, ctx.duration,
                                                              ctx.warmup, params, length),
                                      "iperf3-client", split_stderr=True)
                cpu.track(client.pid, "iperf3-client")
                client.wait(timeout=ctx.duration + ctx.warmup + 30)
            parsed = parse_udp(client.output(), params.reverse)
        finally:
            server.stop()
        return Output(
            metrics={
                "throughput": Metric(parsed["goodput_mbps"], "Mbit/s"),
                "loss": Metric(parsed["loss_pct"], "%", higher_is_better=False),
                "jitter": Metric(parsed["jitter_ms"], "ms", higher_is_better=False),
                "sent_rate": Metric(parsed["sent_mbps"], "Mbit/s"),
            },
            series={"throughput": parsed["series_mbps"]},
            raw={"iperf3": parsed, "datagram_bytes": length, "inner_mtu": ctx.ep.mtu,
                 "target_mbps": target},
        )


WORKLOAD = UdpRate
