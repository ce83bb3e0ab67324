"""Several iperf3 client/server pairs at once, each on its own port, and their sum.

iperf3 (3.12 here) is single-threaded and takes at most 128 streams per process, so the study
ran several processes side by side past that (and 4 single-stream processes for line rate).
The aggregate is the sum over the *common* measured interval: every process's non-omitted
per-second intervals are placed on one time axis (each process shifted by when it was
started), the window that all of them cover is cut into ~1 s bins, each process's rate in a bin
is the time-weighted mean of its intervals there, and the bins are summed across processes.
The aggregate throughput is the mean of those summed bins. With iperf3 --bidir every process
measures both directions; each direction is summed apart over one window (the one every process
measured in both directions, cut into the same bins), and the aggregate is their sum bin by
bin, so it equals a -> b plus b -> a. Pure parts are tested on captures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import CommandFailed
from ..proc import Process
from .base import Context, wait_for_output
from .stream import StreamParams, client_argv, parse_iperf3, server_argv

MAX_PER_PROCESS = 128


def split_streams(total: int, per_process: int = MAX_PER_PROCESS) -> list[int]:
    """Streams per process: as few processes as allowed, streams spread evenly (512 -> 4x128)."""
    if total < 1 or per_process < 1:
        raise ValueError("stream counts must be >= 1")
    n = -(-total // per_process)
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def parse_intervals(text: str) -> dict[str, Any]:
    """One iperf3 -J client run -> its non-omitted intervals (start, end, Mbit/s) and totals."""
    return parse_iperf3(text)


def _rate_in(ivs: list[tuple[float, float, float]], lo: float, hi: float) -> float:
    """Time-weighted mean rate of intervals over [lo, hi]."""
    acc = 0.0
    for s, e, v in ivs:
        overlap = min(e, hi) - max(s, lo)
        if overlap > 0:
            acc += v * overlap
    return acc / (hi - lo)


def common_sum(procs: list[list[tuple[float, float, float]]], offsets: list[float],
               step: float = 1.0) -> dict[str, Any]:
    """Sum of several processes' rates over the window all of them measured (see module doc).

    Returns the window, the bins, each process's per-bin rate and the per-bin sum.
    """
    if not procs or any(not p for p in procs):
        raise CommandFailed("an iperf3 process reported no measured interval",
                            "raise the duration")
    spans = [[(off + s, off + e, v) for s, e, v in p] for p, off in zip(procs, offsets)]
    lo = max(sp[0][0] for sp in spans)
    hi = min(sp[-1][1] for sp in spans)
    if hi - lo < 0.2 * step:
        raise CommandFailed(f"the iperf3 processes measured no common interval "
                            f"(window {hi - lo:.2f}s)", "raise the duration")
    k = max(1, round((hi - lo) / step))
    width = (hi - lo) / k
    bins = [(lo + j * width, lo + (j + 1) * width) for j in range(k)]
    per = [[_rate_in(sp, b0, b1) for b0, b1 in bins] for sp in spans]
    total = [sum(col) for col in zip(*per)]
    return {"window": (lo, hi), "bins": bins, "per_process": per, "sum": total,
            "mean": sum(total) / len(total)}


WAYS = ("a_to_b", "b_to_a")   # iperf3 --bidir: the clients' (site a's) direction, the servers'


def aggregate(parsed: list[dict[str, Any]], offsets: list[float],
              step: float = 1.0) -> dict[str, Any]:
    """The common-interval sum of several processes' parsed runs (parse_iperf3), each shifted
    by its start offset. With --bidir also `directions`: per direction its per-process
    series, per-bin sum and mean over the same window and bins; `sum`, `mean` and
    `per_process` are then both directions together."""
    if not all(p.get("bidir") for p in parsed):
        return common_sum([p["intervals"] for p in parsed], offsets, step)
    n = len(parsed)
    both = common_sum([p[f"intervals_{w}"] for w in WAYS for p in parsed], offsets * 2, step)
    per = both["per_process"]
    ways = {}
    for k, way in enumerate(WAYS):
        mine = per[k * n:(k + 1) * n]
        total = [sum(col) for col in zip(*mine)]
        ways[way] = {"per_process": mine, "sum": total, "mean": sum(total) / len(total)}
    return {**both, "per_process": [[x + y for x, y in zip(per[i], per[n + i])]
                                     for i in range(n)], "directions": ways}


@dataclass
class PairsResult:
    layout: list[int]
    processes: list[dict[str, Any]]
    aggregate: dict[str, Any]
    start_offsets: list[float]

    @property
    def throughput(self) -> float:
        return float(self.aggregate["mean"])

    @property
    def directions(self) -> dict[str, dict[str, Any]]:
        """With --bidir: 'a_to_b' / 'b_to_a' -> that direction's common-interval figures."""
        return dict(self.aggregate.get("directions") or {})

    def retransmits(self) -> int | None:
        vals = [p["retransmits"] for p in self.processes]
        return None if any(v is None for v in vals) else int(sum(vals))

    def raw(self) -> dict[str, Any]:
        agg = self.aggregate
        ways = self.directions
        out: dict[str, Any] = {
            "layout": self.layout, "start_offsets_s": [round(o, 4) for o in self.start_offsets],
            "aggregate": {"mbps": agg["mean"], "series_mbps": agg["sum"],
                          "window_s": [round(x, 4) for x in agg["window"]],
                          "bins": len(agg["bins"]),
                          **{f"{w}_mbps": d["mean"] for w, d in ways.items()},
                          **{f"series_{w}_mbps": d["sum"] for w, d in ways.items()}},
            "sum_of_process_throughputs_mbps": sum(p["throughput_mbps"]
                                                   for p in self.processes),
            "processes": [{**{k: [list(iv) for iv in v] if k.startswith("intervals") else v
                              for k, v in p.items()},
                           "common_series_mbps": agg["per_process"][i],
                           **{f"common_series_{w}_mbps": d["per_process"][i]
                              for w, d in ways.items()}}
                          for i, p in enumerate(self.processes)],
        }
        return out


def run_pairs(ctx: Context, layout: list[int], base: StreamParams) -> PairsResult:
    """Start one iperf3 server per process in site b, then all clients at once in site a."""
    addr = ctx.server_addr()
    servers: list[Process] = []
    clients: list[Process] = []
    try:
        ctx.phase("server start", f"{len(layout)} iperf3 server{'s' if len(layout) > 1 else ''}",
                  site=ctx.server)
        for i in range(len(layout)):
            servers.append(ctx.tb.spawn(ctx.server, server_argv(addr, ctx.port_base + i),
                                        f"iperf3-server-{i}"))
        for s in servers:
            wait_for_output(s, "Server listening")
        way = ", reverse" if base.reverse else ", both directions" if base.bidir else ""
        ctx.phase("measuring", f"{sum(layout)} TCP stream{'s' if sum(layout) > 1 else ''} in "
                  f"{len(layout)} iperf3 process{'es' if len(layout) > 1 else ''}{way}",
                  expected_s=ctx.duration + ctx.warmup, warmup_s=ctx.warmup)
        with ctx.measuring() as cpu:
            for i, s in enumerate(servers):
                cpu.track(s.pid, f"iperf3-server-{i}")
            starts = []
            for i, n in enumerate(layout):
                p = StreamParams(streams=n, reverse=base.reverse, length=base.length,
                                 congestion=base.congestion, bidir=base.bidir)
                starts.append(time.monotonic())
                c = ctx.tb.spawn(ctx.client, client_argv(addr, ctx.port_base + i, ctx.duration,
                                                         ctx.warmup, p),
                                 f"iperf3-client-{i}", split_stderr=True)
                clients.append(c)
                cpu.track(c.pid, f"iperf3-client-{i}")
            for c in clients:
                c.wait(timeout=ctx.duration + ctx.warmup + 60)
        parsed = [parse_intervals(c.output()) for c in clients]
    finally:
        for s in servers:
            s.stop()
    offsets = [t - starts[0] for t in starts]
    agg = aggregate(parsed, offsets)
    for i, res in enumerate(parsed):
        res["port"] = ctx.port_base + i
    return PairsResult(layout, parsed, agg, offsets)
