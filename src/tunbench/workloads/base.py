"""The workload contract. One module per workload under workloads/, each exporting WORKLOAD.

A workload gets a `Context` (the testbed, the tunnel's inner endpoints, duration, warm-up and a
CPU sampler) and returns an `Output`: scalar metrics with units, per-interval series, and the
parsed raw output of its tools. It never knows which tunnel it runs over. Each workload is split
into building argv, running, and a pure parse function tested on captured real output.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar

from ..capabilities import Missing, congestion_missing, congestion_problems, tool_missing
from ..errors import SpecError
from ..metrics.cpu import CpuRecord, CpuSampler, SplitSampler
from ..params import coerce_fields
from ..ports import PORT_BASE
from ..proc import Process, wait_ready
from ..progress import PhaseEvent, ProgressSink, ignore
from ..testbed.base import Site, Testbed
from ..tunnels.base import Endpoints


@dataclass(frozen=True)
class WorkloadParams:
    def validate(self) -> list[str]:
        return []

    def family_problems(self, family: int) -> list[str]:
        """What these params cannot do over inner IP `family` (e.g. a packet size IPv6 cannot
        carry), checked with the experiment before anything is created."""
        return []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


IPERF3_MAX_LENGTH = 1 << 20   # iperf3's largest TCP write (-l), MAX_BLOCKSIZE


@dataclass(frozen=True)
class Metric:
    value: float | None
    unit: str
    higher_is_better: bool = True
    # "lower": the measurement reached its tool's limit (e.g. the load generator's top rate
    # passed without loss), so the true value is at least `value`; None: a measured value
    bound: Literal["lower"] | None = None
    # Result format v2 (docs/results.md): what is measured and at which point, instead of
    # packing the point into the key: `Metric(v, "µs", False, base="tcp_rtt", dims={"q": 99})`
    # stored as "tcp_rtt_p99". Left out, the key is the base name and there are no dims.
    base: str | None = None
    dims: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Output:
    metrics: dict[str, Metric] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)   # per interval (1 s)
    raw: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # per metric: native's bursts measured beside the method's (Context.native_beside), the
    # case file's `paired_native` (results/model.own_share)
    paired_native: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Context:
    tb: Testbed
    ep: Endpoints
    duration: float
    warmup: float = 1.0
    family: Literal[4, 6] = 4          # inner address family to use
    port_base: int = PORT_BASE
    cpu_interval: float = 1.0
    cpu_record: CpuRecord | None = None
    progress: ProgressSink = ignore    # phase events for whoever shows progress (one way)
    # the tunnel's own count of what it put on site a's wire, when the underlay device's
    # counters cannot tell (TunnelDriver.wire_tx); None: read the underlay counters
    wire_tx: Callable[[], tuple[int, int] | None] | None = None
    # the server site's underlay address native's traffic goes to while the tunnel is up,
    # when the case may measure native beside the method (runner.native_beside); None: the
    # case pairs with its round's native cases
    native_beside: str | None = None

    def phase(self, name: str, detail: str = "", *, site: Site | None = None,
              expected_s: float | None = None, remaining_s: float | None = None,
              warmup_s: float = 0.0, trial: int | None = None,
              trials_about: int | None = None, rate_pps: float | None = None) -> None:
        """Announce the phase that starts now (see progress.PhaseEvent). `site` when it runs
        on one site only: its name and host go into the event."""
        self.progress(PhaseEvent(name, detail, site.name if site else None,
                                 site.host if site else None, expected_s, remaining_s,
                                 warmup_s, trial, trials_about, rate_pps))

    @property
    def client(self) -> Site:
        return self.tb.a

    @property
    def server(self) -> Site:
        return self.tb.b

    def server_addr(self) -> str:
        addr = self.ep.b4 if self.family == 4 else self.ep.b6
        if not addr:
            raise SpecError("this tunnel has no IPv6 inner address", "use family 4")
        return addr

    def client_addr(self) -> str:
        addr = self.ep.a4 if self.family == 4 else self.ep.a6
        return str(addr)

    @contextmanager
    def measuring(self) -> Iterator[CpuSampler]:
        """The measurement window: CPU per core and per datapath daemon are sampled inside.
        Sites on hosts are sampled each by its own agent (SplitSampler); sites on one machine
        (namespaces here, or two hosts that share it) are recorded as sharing the CPUs."""
        sampler: Any
        if self.tb.shares_cpus and not any(s.remote for s in self.tb.sites()):
            sampler = CpuSampler(self.cpu_interval)
            for site, pids in self.ep.datapath_pids.items():
                for pid in pids:
                    sampler.track(pid, f"datapath-{site}")
            sampler.track_kernel_threads("ksoftirqd/")   # softirq work no process is charged
        else:
            sampler = SplitSampler({s.name: s.cpu_sampler(self.cpu_interval)
                                    for s in self.tb.sites()}, self.tb.a.name)
            for site, pids in self.ep.datapath_pids.items():
                for pid in pids:
                    sampler.track(pid, f"datapath-{site}", site)
            sampler.track_kernel_threads("ksoftirqd/")   # on each host
        sampler.start()
        try:
            yield sampler
        finally:
            self.cpu_record = sampler.stop()
            self.cpu_record.shared_by_sites = self.tb.shares_cpus
            for per_end in self.cpu_record.sites.values():   # each end's view: the same CPUs
                per_end.shared_by_sites = self.tb.shares_cpus


def relay_problem(ctx: Context, *, tcp_ports: Iterable[int] = (),
                  not_tcp: str = "") -> str | None:
    """Over a stream relay (ssh -L) only the forwarded TCP ports get through: the reason a
    workload needing `not_tcp` traffic (e.g. "UDP") or other ports cannot run, else None."""
    if not ctx.ep.relay:
        return None
    if not_tcp:
        return (f"{not_tcp} cannot cross a stream relay, which forwards TCP ports only "
                f"({', '.join(map(str, ctx.ep.relay_ports)) or 'none'})")
    missing = [p for p in tcp_ports if p not in ctx.ep.relay_ports]
    if missing:
        return (f"needs TCP port(s) {', '.join(map(str, missing))} forwarded, the relay "
                f"forwards {', '.join(map(str, ctx.ep.relay_ports)) or 'none'} "
                "(raise the tunnel's ports parameter)")
    return None


def wait_for_output(p: Process, needle: str, timeout: float = 5.0) -> None:
    """Readiness by what a server prints, not by sleeping."""
    wait_ready(p, ready_text=needle, timeout=timeout)


W = TypeVar("W", bound=WorkloadParams)


class Workload(ABC, Generic[W]):
    """Generic over its params class (`class Stream(Workload[StreamParams])`): every method
    receives its own typed params, mypy checks them, no isinstance asserts."""

    name: ClassVar[str]
    summary: ClassVar[str]
    # the concrete workload's params class (W); ClassVar cannot name a type variable
    Params: ClassVar[type[Any]] = WorkloadParams
    tools: ClassVar[tuple[str, ...]] = ()
    headline: ClassVar[tuple[str, ...]] = ()   # metrics the console summary shows first
    # A parameter that an experiment may give as a list: one case per value (e.g. streams).
    sweep: ClassVar[str | None] = None
    sweep_default: ClassVar[tuple[Any, ...]] = ()   # the values used when it is left out
    # Parameters that place a case on a sweep's x axis when they vary across a campaign (the
    # result's workload "axes"; two [[workload]] entries at streams 1 and 16 are one sweep).
    axes: ClassVar[tuple[str, ...]] = ("streams", "processes", "parallel", "flows",
                                       "connections")

    @classmethod
    def parse_params(cls, raw: dict[str, Any], where: str = "") -> W:
        problems, values = coerce_fields(cls.Params, raw, f"{where}workload {cls.name}")
        if not problems:
            params: W = cls.Params(**values)
            problems = [f"{where}workload {cls.name}: {p}" for p in params.validate()
                        + congestion_problems(getattr(params, "congestion", ""))]
            if not problems:
                return params
        raise SpecError("; ".join(problems), "see `tunbench list --params`")

    @classmethod
    def requirements(cls, params: W) -> list[Missing]:
        found = [tool_missing(t, f"workload {cls.name}") for t in cls.tools]
        found.append(congestion_missing(getattr(params, "congestion", "")))
        return [m for m in found if m]

    @classmethod
    def expected_seconds(cls, params: W, duration: float, warmup: float) -> float:
        """Rough wall time of one case, for the ETA."""
        return duration + warmup + 1.0

    def unsupported(self, ctx: Context, params: W) -> str | None:
        """Why this workload cannot run over these endpoints (None: it can). The runner then
        records the case as skipped with this reason instead of running it."""
        return None

    @abstractmethod
    def run(self, ctx: Context, params: W) -> Output:
        """Run the traffic and return parsed figures."""

    def after_window(self, ctx: Context, params: W, out: Output) -> None:
        """More traffic after the measurement, once the runner has read the case's counters
        (TCP, the tunnel's), so none of it enters a case figure; what it finds goes into
        `out` (stream: native beside the method, Output.paired_native). The tunnel is still
        up and the daemons still watched."""
        return None
