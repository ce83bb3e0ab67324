"""line-rate-processes: independent single-stream iperf3 pairs, grown until the aggregate stops
rising (the study's line-rate method), or a fixed K.

The study ran several iperf3 processes without -P to reach line rate and plotted throughput as
a percentage of line rate (Fig. 15/24). How many processes line rate takes depends on the host
and the tunnel, so by default K is found, not assumed: 1, 2, 4, ... processes (doubling, the
cap `max_processes` included as the last step) each measured for `step_duration`, until one
step gains less than `min_gain` % over the step before. The plateau is the best aggregate
measured; the chosen K is the fewest processes within `min_gain` % of it (more processes added
nothing). Every step is kept as `throughput@processesK` (the report draws it as a sweep) and in
raw.steps; `throughput` and the per-second series are the chosen step's, and so is the CPU.
`processes = K` runs exactly K (the study's fixed 4 included). The aggregate is the sum over
the common measured interval (see _multi_iperf). Line rate is the shaped underlay rate when
the campaign is shaped (--rate); otherwise the native throughput of the same workload in the
same campaign: the summary (report/stats.py) computes it and names its source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..metrics.cpu import CpuRecord
from ..rates import rate_mbps
from ._multi_iperf import PairsResult, run_pairs
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

MAX_PROCESSES = 64


@dataclass(frozen=True)
class LineRateParams(WorkloadParams):
    processes: int = field(
        default=0,
        metadata={"help": "0 = grow 1, 2, 4, ... pairs until the aggregate stops rising; "
                  "K = exactly K independent iperf3 client/server pairs"})
    max_processes: int = field(
        default=16,
        metadata={"help": "growing: the most pairs tried (the last step even if not a power "
                  "of two)"})
    min_gain: float = field(
        default=5.0,
        metadata={"help": "growing: stop once a step gains less than this % over the step "
                  "before"})
    step_duration: float = field(
        default=0.0,
        metadata={"help": "growing: seconds per step; 0 = the campaign's duration"})
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
        if not 0 <= self.processes <= MAX_PROCESSES:
            problems.append(f"processes {self.processes} out of range (0..{MAX_PROCESSES}; "
                            "0 = grow until the aggregate stops rising)")
        if not 1 <= self.max_processes <= MAX_PROCESSES:
            problems.append(f"max_processes {self.max_processes} out of range "
                            f"(1..{MAX_PROCESSES})")
        if not 0 < self.min_gain < 100:
            problems.append(f"min_gain {self.min_gain} out of range (a % above 0, below 100)")
        if self.step_duration and not 2 <= self.step_duration <= 3600:
            problems.append(f"step_duration {self.step_duration} out of range (2..3600 s; "
                            "0 = the campaign's duration)")
        if not 1 <= self.streams <= 128:
            problems.append(f"streams {self.streams} out of range (1..128 per iperf3 process)")
        if not 0 <= self.length <= IPERF3_MAX_LENGTH:
            problems.append(f"length {self.length} out of range (0..{IPERF3_MAX_LENGTH} bytes, "
                            "iperf3's largest write; 0 = its default)")
        return problems

    @property
    def grows(self) -> bool:
        return self.processes == 0

    @property
    def most(self) -> int:
        """The most pairs any step runs (ports and the relay check)."""
        return self.max_processes if self.grows else self.processes


def step_counts(cap: int) -> list[int]:
    """1, 2, 4, ... below `cap`, then `cap` itself (pure): 16 -> [1, 2, 4, 8, 16]; 6 -> [1, 2, 4, 6]."""
    out = []
    k = 1
    while k < cap:
        out.append(k)
        k *= 2
    return out + [cap]


def gain_pct(before: float, after: float) -> float:
    return 100.0 * (after - before) / before if before > 0 else float("inf")


def keeps_rising(steps: list[tuple[int, float]], min_gain: float) -> bool:
    """Whether to try the next step: the last step gained at least `min_gain` % (pure)."""
    return len(steps) < 2 or gain_pct(steps[-2][1], steps[-1][1]) >= min_gain


def choose(steps: list[tuple[int, float]], min_gain: float) -> tuple[int, float]:
    """(chosen K, plateau Mbit/s) from the measured (K, Mbit/s) steps (pure): the plateau is
    the best aggregate; K is the fewest processes whose aggregate is within `min_gain` % of it."""
    plateau = max(t for _, t in steps)
    k = min(k for k, t in steps if t >= plateau * (1 - min_gain / 100.0))
    return k, plateau


class LineRateProcesses(Workload[LineRateParams]):
    name = "line-rate-processes"
    summary = ("independent single-stream iperf3 pairs grown 1, 2, 4, ... until the aggregate "
               "stops rising (or a fixed K); throughput as % of line rate (shaped --rate, "
               "else native)")
    Params = LineRateParams
    tools = ("iperf3",)
    headline = ("throughput", "line_rate_pct")

    @classmethod
    def expected_seconds(cls, params: LineRateParams, duration: float, warmup: float) -> float:
        if not params.grows:
            return duration + warmup + 1.0 + 0.3 * params.processes
        step = params.step_duration or duration
        # an estimate: growth usually stops half-way up the steps
        counts = step_counts(params.max_processes)[:4]
        return sum(step + warmup + 1.0 + 0.3 * k for k in counts)

    def unsupported(self, ctx: Context, params: LineRateParams) -> str | None:
        return relay_problem(ctx, tcp_ports=range(ctx.port_base, ctx.port_base + params.most))

    def run(self, ctx: Context, params: LineRateParams) -> Output:
        base = StreamParams(1, params.reverse, params.length, params.congestion)
        if not params.grows:
            res = run_pairs(ctx, [params.streams] * params.processes, base)
            return self._output(ctx, params, res, [], None)
        step_ctx = dataclasses.replace(ctx, duration=params.step_duration or ctx.duration)
        steps: list[tuple[int, float]] = []
        results: dict[int, tuple[PairsResult, CpuRecord | None]] = {}
        for k in step_counts(params.max_processes):
            res = run_pairs(step_ctx, [params.streams] * k, base)
            results[k] = (res, step_ctx.cpu_record)
            steps.append((k, res.throughput))
            if not keeps_rising(steps, params.min_gain):
                break
        k, _ = choose(steps, params.min_gain)
        res, ctx.cpu_record = results[k]
        growth = {"steps": [{"processes": n, "mbps": t, "gain_pct": (
                      None if i == 0 else gain_pct(steps[i - 1][1], t))}
                            for i, (n, t) in enumerate(steps)],
                  "chosen_processes": k, "min_gain_pct": params.min_gain,
                  "max_processes": params.max_processes,
                  "plateau_reached": not keeps_rising(steps, params.min_gain),
                  "step_duration_s": step_ctx.duration}
        return self._output(ctx, params, res, steps, growth)

    @staticmethod
    def _output(ctx: Context, params: LineRateParams, res: PairsResult,
                steps: list[tuple[int, float]], growth: dict[str, Any] | None) -> Output:
        metrics = {"throughput": Metric(res.throughput, "Mbit/s"),
                   "retransmits": Metric(res.retransmits(), "segments", False),
                   "processes": Metric(len(res.layout), "iperf3 pairs")}
        raw: dict[str, Any] = {"iperf3": res.raw()}
        per = [sum(s) / len(s) for s in res.aggregate["per_process"]]
        metrics["process_min"] = Metric(min(per), "Mbit/s")
        metrics["process_max"] = Metric(max(per), "Mbit/s")
        for k, t in steps:
            metrics[f"throughput@processes{k}"] = Metric(t, "Mbit/s", base="throughput",
                                                         dims={"processes": k})
        notes = []
        if growth is not None:
            raw["growth"] = growth
            if not growth["plateau_reached"]:
                notes.append(f"the aggregate still rose at max_processes "
                             f"{params.max_processes}: raise it to find the plateau")
        if ctx.tb.rate:
            line = rate_mbps(ctx.tb.rate)
            metrics["line_rate_pct"] = Metric(100.0 * res.throughput / line, "% of line rate")
            raw["line_rate"] = {"mbps": line, "source": f"shaped underlay rate {ctx.tb.rate}"}
        else:
            raw["line_rate"] = {"mbps": None, "source": "native throughput measured in the "
                                "same campaign (see the summary's pct_of_line_rate)"}
        return Output(metrics=metrics, series={"throughput": res.aggregate["sum"]}, raw=raw,
                      notes=notes)


WORKLOAD = LineRateProcesses
