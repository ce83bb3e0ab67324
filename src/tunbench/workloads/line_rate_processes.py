"""line-rate-processes: K independent single-stream iperf3 pairs at once (the study used 4).

The study ran 4 iperf3 processes without -P to reach line rate and plotted throughput as a
percentage of line rate (Fig. 15/24). The aggregate is the sum over the common measured
interval (see _multi_iperf). Line rate is the shaped underlay rate when the campaign is shaped
(--rate); otherwise the native throughput of the same workload in the same campaign: the
summary (report/stats.py) computes it and names its source.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rates import rate_mbps
from ._multi_iperf import run_pairs
from .base import (
    IPERF3_MAX_LENGTH,
    Context,
    Metric,
    Output,
    Workload,
    WorkloadParams,
    relay_problem,
)
from .stream import StreamParams


@dataclass(frozen=True)
class LineRateParams(WorkloadParams):
    processes: int = field(
        default=4,
        metadata={"help": "independent iperf3 client/server pairs, one stream each by default"})
    streams: int = field(
        default=1,
        metadata={"help": "streams per process (iperf3 -P); the study used 1"})
    reverse: bool = field(
        default=False,
        metadata={"help": "the servers send instead of the clients (iperf3 -R)"})
    length: int = field(
        default=0,
        metadata={"help": "write size in bytes (iperf3 -l); 0 = iperf3's default"})
    congestion: str = field(
        default="",
        metadata={"help": "TCP congestion control (iperf3 -C); empty = the system default"})

    def validate(self) -> list[str]:
        problems = []
        if not 1 <= self.processes <= 64:
            problems.append(f"processes {self.processes} out of range (1..64)")
        if not 1 <= self.streams <= 128:
            problems.append(f"streams {self.streams} out of range (1..128 per iperf3 process)")
        if not 0 <= self.length <= IPERF3_MAX_LENGTH:
            problems.append(f"length {self.length} out of range (0..{IPERF3_MAX_LENGTH} bytes, "
                            "iperf3's largest write; 0 = its default)")
        return problems


class LineRateProcesses(Workload[LineRateParams]):
    name = "line-rate-processes"
    summary = ("K independent single-stream iperf3 pairs at once; throughput as % of line rate "
               "(shaped --rate, else native)")
    Params = LineRateParams
    tools = ("iperf3",)
    headline = ("throughput", "line_rate_pct")

    @classmethod
    def expected_seconds(cls, params: LineRateParams, duration: float, warmup: float) -> float:
        return duration + warmup + 1.0 + 0.3 * params.processes

    def unsupported(self, ctx: Context, params: LineRateParams) -> str | None:
        return relay_problem(ctx, tcp_ports=range(ctx.port_base, ctx.port_base + params.processes))

    def run(self, ctx: Context, params: LineRateParams) -> Output:
        layout = [params.streams] * params.processes
        res = run_pairs(ctx, layout, StreamParams(1, params.reverse, params.length,
                                                  params.congestion))
        metrics = {"throughput": Metric(res.throughput, "Mbit/s"),
                   "retransmits": Metric(res.retransmits(), "segments", False)}
        raw = {"iperf3": res.raw()}
        per = [sum(s) / len(s) for s in res.aggregate["per_process"]]
        metrics["process_min"] = Metric(min(per), "Mbit/s")
        metrics["process_max"] = Metric(max(per), "Mbit/s")
        if ctx.tb.rate:
            line = rate_mbps(ctx.tb.rate)
            metrics["line_rate_pct"] = Metric(100.0 * res.throughput / line, "% of line rate")
            raw["line_rate"] = {"mbps": line, "source": f"shaped underlay rate {ctx.tb.rate}"}
        else:
            raw["line_rate"] = {"mbps": None, "source": "native throughput measured in the "
                                "same campaign (see the summary's pct_of_line_rate)"}
        return Output(metrics=metrics, series={"throughput": res.aggregate["sum"]}, raw=raw)


WORKLOAD = LineRateProcesses
