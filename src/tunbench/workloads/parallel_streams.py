"""parallel-streams: aggregate TCP throughput of N parallel streams (the study's Fig. 6/14/23).

One case per stream count: an experiment gives `streams` as a list (default 1, 2, 4, ... 512)
and each value becomes its own case, labelled parallel-streams-N. Past 128 streams (iperf3's
limit per process) several iperf3 client/server pairs run together on separate ports, streams
spread evenly (256 = 2 x 128, 512 = 4 x 128). The aggregate is the sum over the common
measured interval (see _multi_iperf); each process's own result is kept in raw.processes.
`reverse` (iperf3 -R, `run -R`): the servers in site b send to site a. `bidir` (iperf3
--bidir, `run --bidir`): every process carries its streams both ways at once (`streams` each
way, as iperf3 -P with --bidir); throughput is the sum of both directions, each summed apart
over the common interval and kept as throughput_a_to_b / throughput_b_to_a (as stream does).
CPU (min/avg/max of all cores, warm-up excluded) comes from the runner's sampler.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import proc
from ._multi_iperf import MAX_PER_PROCESS, run_pairs, split_streams
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

STUDY_STREAMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class ParallelStreamsParams(WorkloadParams):
    streams: int = field(
        default=1,
        metadata={"help": "total parallel TCP streams (a list in an experiment = one case per value)"})
    per_process: int = field(
        default=MAX_PER_PROCESS,
        metadata={"help": "at most this many streams per iperf3 process (iperf3 caps it at 128)"})
    reverse: bool = field(
        default=False,
        metadata={"help": "the servers send instead of the clients (iperf3 -R)"})
    length: int = field(
        default=0,
        metadata={"help": "write size in bytes (iperf3 -l); 0 = iperf3's default"})
    congestion: str = field(
        default="",
        metadata={"help": "TCP congestion control (iperf3 -C); empty = the system default"})
    bidir: bool = field(
        default=False,
        metadata={"help": "both directions at once, `streams` streams each way (iperf3 "
                          "--bidir); throughput is their sum, each direction kept apart"})

    def validate(self) -> list[str]:
        problems = []
        if self.reverse and self.bidir:
            problems.append("reverse and bidir exclude each other (iperf3 -R or --bidir)")
        if not 1 <= self.streams <= 4096:
            problems.append(f"streams {self.streams} out of range (1..4096)")
        if not 1 <= self.per_process <= MAX_PER_PROCESS:
            problems.append(f"per_process {self.per_process} out of range (1..128, iperf3's limit)")
        if not 0 <= self.length <= IPERF3_MAX_LENGTH:
            problems.append(f"length {self.length} out of range (0..{IPERF3_MAX_LENGTH} bytes, "
                            "iperf3's largest write; 0 = its default)")
        return problems


class ParallelStreams(Workload[ParallelStreamsParams]):
    name = "parallel-streams"
    summary = ("aggregate TCP throughput and CPU for N parallel streams (iperf3, several "
               "processes past 128); streams is swept, default 1..512")
    Params = ParallelStreamsParams
    tools = ("iperf3",)
    headline = ("throughput", "retransmits")
    sweep = "streams"
    sweep_default = STUDY_STREAMS

    @classmethod
    def expected_seconds(cls, params: ParallelStreamsParams, duration: float, warmup: float) -> float:
        return duration + warmup + 1.0 + 0.5 * len(split_streams(params.streams,
                                                                 params.per_process))

    def unsupported(self, ctx: Context, params: ParallelStreamsParams) -> str | None:
        n = len(split_streams(params.streams, params.per_process))
        return relay_problem(ctx, tcp_ports=range(ctx.port_base, ctx.port_base + n))

    def run(self, ctx: Context, params: ParallelStreamsParams) -> Output:
        layout = split_streams(params.streams, params.per_process)
        res = run_pairs(ctx, layout, StreamParams(1, params.reverse, params.length,
                                                  params.congestion, bidir=params.bidir))
        metrics = {"throughput": Metric(res.throughput, "Mbit/s"),
                   "retransmits": Metric(res.retransmits(), "segments", False),
                   "processes": Metric(len(layout), "iperf3 pairs")}
        series = {"throughput": res.aggregate["sum"]}
        for way, agg in res.directions.items():   # --bidir: each direction beside their sum
            metrics[f"throughput_{way}"] = Metric(agg["mean"], "Mbit/s")
            series[f"throughput_{way}"] = agg["sum"]
        return Output(metrics=metrics, series=series,
                      raw={"iperf3": res.raw(), "iperf3_version": _version()})


def _version() -> str | None:
    path = proc.which("iperf3")
    if not path:
        return None
    r = proc.run([path, "--version"], check=False, timeout=5)
    lines = r.stdout.splitlines()
    return lines[0] if lines else None


WORKLOAD = ParallelStreams
