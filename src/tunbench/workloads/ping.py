"""ping: ICMP echo RTT (min/avg/max/mdev) and the hop count seen from the far end's TTL.

`ping -c N -i 0.2` from site a to site b's inner address. The echo reply leaves site b with
its initial TTL (64 on Linux) and every router on the way back decrements it, so
hops = initial TTL - received TTL (the SRv6 study reports hop counts this way: a tunnel that
hides the underlay's routers shows fewer hops). The first replies within the warm-up are
left out of the figures, which are recomputed from the per-reply lines (mdev as ping does);
ping's own summary is kept in raw.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommandFailed
from .base import Context, Metric, Output, Workload, WorkloadParams, relay_problem

MAX_COUNT = 1_000_000   # echo requests per case


@dataclass(frozen=True)
class PingParams(WorkloadParams):
    count: int = field(
        default=0,
        metadata={"help": "echo requests; 0 = as many as fit the duration"})
    interval: float = field(default=0.2, metadata={"help": "seconds between requests (ping -i)"})
    size: int = field(default=56, metadata={"help": "payload bytes (ping -s)"})
    initial_ttl: int = field(
        default=64,
        metadata={"help": "TTL the far end sends replies with (to count hops)"})

    def validate(self) -> list[str]:
        problems = []
        if not 0 <= self.count <= MAX_COUNT:
            problems.append(f"count {self.count} out of range (0..{MAX_COUNT}; 0 = duration / "
                            "interval)")
        if not 0.002 <= self.interval <= 60:
            problems.append(f"interval {self.interval} out of range (0.002..60 s)")
        if not 0 <= self.size <= 65507:
            problems.append(f"size {self.size} out of range (0..65507)")
        if not 1 <= self.initial_ttl <= 255:
            problems.append(f"initial_ttl {self.initial_ttl} out of range (1..255)")
        return problems


_REPLY = re.compile(r"icmp_seq=(\d+) ttl=(\d+) time=([\d.]+) ms")
_SUMMARY = re.compile(r"(\d+) packets transmitted, (\d+) received.*?([\d.]+)% packet loss")
_RTT = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")


def parse_ping(text: str) -> dict[str, Any]:
    """iputils ping output -> replies (seq, ttl, ms) and its summary; pure, tested on captures."""
    replies = [(int(m.group(1)), int(m.group(2)), float(m.group(3)))
               for m in _REPLY.finditer(text)]
    out: dict[str, Any] = {"replies": replies}
    m = _SUMMARY.search(text)
    if m:
        out["transmitted"], out["received"] = int(m.group(1)), int(m.group(2))
        out["loss_pct"] = float(m.group(3))
    m = _RTT.search(text)
    if m:
        out["min"], out["avg"], out["max"], out["mdev"] = map(float, m.groups())
    return out


def figures(replies: list[tuple[int, int, float]], skip: int, initial_ttl: int) -> dict[str, Any]:
    """RTT min/avg/max/mdev (ms) over replies with seq > skip; TTL and hop count."""
    kept = [r for r in replies if r[0] > skip] or replies
    if not kept:
        raise CommandFailed("no echo reply came back", "the far end is unreachable")
    times = [t for _, _, t in kept]
    n = len(times)
    avg = sum(times) / n
    mdev = math.sqrt(max(sum(t * t for t in times) / n - avg * avg, 0.0))
    counts = Counter(ttl for _, ttl, _ in kept)
    ttls = sorted(counts)
    ttl = counts.most_common(1)[0][0]
    return {"min": min(times), "avg": avg, "max": max(times), "mdev": mdev, "n": n,
            "ttl": ttl, "ttls_seen": ttls, "hops": initial_ttl - ttl}


class Ping(Workload[PingParams]):
    name = "ping"
    summary = "ICMP echo RTT min/avg/max/mdev and hop count from the reply TTL (ping -i 0.2)"
    Params = PingParams
    tools = ("ping",)
    headline = ("rtt_avg", "hops")

    @classmethod
    def expected_seconds(cls, params: PingParams, duration: float, warmup: float) -> float:
        n = params.count or math.ceil((duration + warmup) / params.interval)
        return n * params.interval + 1.0

    def unsupported(self, ctx: Context, params: PingParams) -> str | None:
        return relay_problem(ctx, not_tcp="ICMP (ping)")

    def run(self, ctx: Context, params: PingParams) -> Output:
        skip = math.ceil(ctx.warmup / params.interval) if ctx.warmup else 0
        count = params.count + skip if params.count else \
            math.ceil(ctx.duration / params.interval) + skip
        addr = ctx.server_addr()
        argv = ["ping", "-n", "-c", str(count), "-i", f"{params.interval:g}", "-s",
                str(params.size), "-W", "2", *(["-6"] if ctx.family == 6 else []), addr]
        ctx.phase("measuring", f"{count} pings every {params.interval:g} s",
                  expected_s=count * params.interval, warmup_s=skip * params.interval)
        with ctx.measuring():
            r = ctx.client.run(argv, check=False, timeout=count * params.interval + 30)
        parsed = parse_ping(r.stdout)
        if not parsed["replies"]:
            raise CommandFailed(f"ping {addr}: no reply ({(r.stdout + r.stderr).strip()[-200:]})",
                                "the far end is unreachable through this tunnel")
        f = figures(parsed["replies"], skip, params.initial_ttl)
        sent = parsed.get("transmitted", count)
        got = parsed.get("received", len(parsed["replies"]))
        return Output(
            metrics={"rtt_min": Metric(f["min"] * 1000, "µs", False),
                     "rtt_avg": Metric(f["avg"] * 1000, "µs", False),
                     "rtt_max": Metric(f["max"] * 1000, "µs", False),
                     "rtt_mdev": Metric(f["mdev"] * 1000, "µs", False),
                     "loss": Metric(100.0 * (sent - got) / sent if sent else None, "%", False),
                     "ttl": Metric(f["ttl"], "TTL"),
                     "hops": Metric(f["hops"], "hops", False)},
            series={"rtt": [t * 1000 for s, _, t in parsed["replies"] if s > skip]},
            raw={"ping": {k: v for k, v in parsed.items() if k != "replies"},
                 "figures": f, "warmup_replies_skipped": skip, "initial_ttl": params.initial_ttl},
        )


WORKLOAD = Ping
