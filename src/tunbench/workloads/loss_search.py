"""loss-search: loss-threshold throughput (RFC 2544 binary search and/or MLRsearch NDR/PDR)
with the native UDP generator, per packet size, then latency at 10/50/90% of the found NDR.

Trial length: `trial_duration` (default 60 s, RFC 2544) capped by tunbench's --duration, so
`--duration 60` gives the RFC's trials and `--duration 1` a quick look. Metric names and the
byte accounting are documented in docs/loss-search.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ..capabilities import Missing
from ..errors import CommandFailed, SpecError
from ..progress import rate_text
from ..testbed import bpfdrop
from . import loadgen, traffic, wirecost
from .base import Context, Metric, Output, Workload, WorkloadParams, relay_problem
from .search import GENERATOR_MARGIN, SearchResult, mlr_search, rfc2544_search

L2_EXTRA = 18      # Ethernet header + FCS per packet (loadgen's *_l2 accounting)
PROBE_MIN_SEEN = 0.5   # share of the probe the capture ring must see to be used


MAX_RATE_PPS = 1e9

@dataclass(frozen=True)
class LossSearchParams(WorkloadParams):
    method: Literal["rfc2544", "mlrsearch", "both"] = field(
        default="both",
        metadata={"help": "rfc2544 (binary search), mlrsearch (NDR and PDR), or both"})
    sizes: tuple[str, ...] = field(
        default=("361", "imix"),
        metadata={"help": "IP total lengths in bytes and/or \"imix\" (7x40, 4x576, 1x1500; "
                  "7x60 instead of 7x40 over IPv6), \"micro\" (microservice mix: 90% of "
                  "packets 64-200 B), \"mix\", \"genome\""})
    mix: str = field(
        default="",
        metadata={"help": "a custom IMIX, SIZE:WEIGHT pairs in IP bytes (\"64:7,570:4,1518:1\"); "
                  "measured as size \"mix\" (added to sizes when they do not list it)"})
    genome: str = field(
        default="",
        metadata={"help": "an RFC 6985 genome, size letters sent in this order (\"aaaaaaaabbbbg\": "
                  "a=64 b=128 c=256 d=512 e=1024 f=1280 g=1518 h=2112 i=9000 j=16000); measured "
                  "as size \"genome\" (added to sizes when they do not list it)"})
    flows: int | str = field(
        default=100,
        metadata={"help": "distinct UDP flows: a count (source ports), or \"SxDxSPxDP\" source x "
                  "destination addresses x source x destination ports stepped together, e.g. "
                  "\"5x5x100x100\" (the SD-WAN study's 100 flows; extra addresses are added "
                  "on the tunnel's inner devices)"})
    trial_duration: float = field(
        default=60.0,
        metadata={"help": "seconds per trial (RFC 2544); capped by the experiment's duration"})
    loss_threshold_pct: float = field(
        default=0.1,
        metadata={"help": "RFC 2544 acceptable loss, percent of packets sent"})
    # 1 % of the maximum rate: a third of the 3-point margin within which two methods count
    # as equivalent, so the search's own width never decides a comparison. The studies'
    # 0.01 % (the sdwan preset keeps it) costs 7 more bisection steps per size and method.
    resolution_pct: float = field(
        default=1.0,
        metadata={"help": "a search stops at this width, percent of the maximum rate "
                  "(default 1: a third of the 3-point equivalence margin; the studies "
                  "used 0.01)"})
    max_rate_pps: float = field(
        default=0.0,
        metadata={"help": "upper bound in packets/s; 0 = measure the generator's unpaced rate"})
    min_rate_pps: float = field(
        default=1000.0,
        metadata={"help": "lower bound of both searches, packets/s"})
    ndr_loss_pct: float = field(
        default=0.0,
        metadata={"help": "MLRsearch goal: loss accepted for the NDR, percent (0 = none)"})
    pdr_loss_pct: float = field(
        default=0.5,
        metadata={"help": "MLRsearch goal: loss accepted for the PDR, percent"})
    latency_at_pct: tuple[float, ...] = field(
        default=(10.0, 50.0, 90.0),
        metadata={"help": "latency under load at these percentages of the NDR; [] = skip"})
    port: int = field(
        default=5301,
        metadata={"help": "UDP destination port of the generated traffic"})
    receiver: Literal["auto", "capture", "socket"] = field(
        default="auto",
        metadata={"help": "where loss is counted: capture (far tunnel device), socket, or auto"})
    sender_threads: int = field(
        default=0,
        metadata={"help": "generator threads; 0 = one per CPU (at most 4)"})

    def validate(self) -> list[str]:
        p: list[str] = []
        if not self.sizes:
            p.append("sizes is empty (give e.g. [\"361\", \"imix\"])")
        for s in self.sizes:
            if s not in traffic.NAMED_SIZES and not (s.isdigit() and 40 <= int(s) <= 9000):
                p.append(f"size {s!r} must be \"imix\", \"micro\", \"mix\", \"genome\" or an "
                         "IP total length 40..9000 bytes")
        if len(set(self.sizes)) != len(self.sizes):
            p.append("sizes has duplicates")
        for name, value, parse in (("mix", self.mix, traffic.parse_mix),
                                   ("genome", self.genome, traffic.parse_genome)):
            if value:
                try:
                    parse(value)
                except ValueError as exc:
                    p.append(str(exc))
            elif name in self.sizes:
                p.append(f"sizes lists \"{name}\" but {name} is not set: give it "
                         + ('(mix = "64:7,570:4,1518:1")' if name == "mix" else
                            '(genome = "aaaaaaaabbbbg")'))
        try:
            traffic.parse_flows(self.flows)
        except ValueError as exc:
            p.append(str(exc))
        if not 0.1 <= self.trial_duration <= 3600:
            p.append(f"trial_duration {self.trial_duration:g} out of range (0.1..3600 s)")
        if not 0 <= self.loss_threshold_pct < 100:
            p.append(f"loss_threshold_pct {self.loss_threshold_pct:g} out of range (0..<100)")
        if not 0 < self.resolution_pct < 50:
            p.append(f"resolution_pct {self.resolution_pct:g} out of range (>0..<50)")
        if self.max_rate_pps < 0 or (self.max_rate_pps and self.max_rate_pps <= self.min_rate_pps):
            p.append("max_rate_pps must be 0 (measure it) or above min_rate_pps")
        if self.min_rate_pps <= 0:
            p.append("min_rate_pps must be > 0 (MLRsearch needs a positive minimum load)")
        if max(self.max_rate_pps, self.min_rate_pps) > MAX_RATE_PPS:
            p.append(f"max_rate_pps and min_rate_pps must be at most {MAX_RATE_PPS:.0e} "
                     "packets/s (beyond any link: 400G at 64 B is 6e8)")
        if not (0 <= self.ndr_loss_pct < 100 and 0 <= self.pdr_loss_pct < 100):
            p.append("ndr_loss_pct and pdr_loss_pct must be in 0..<100")
        if any(not 0 < x <= 100 for x in self.latency_at_pct):
            p.append("latency_at_pct values must be in (0, 100]")
        if self.receiver not in ("auto", "capture", "socket"):
            p.append(f"receiver {self.receiver!r} must be auto, capture or socket")
        if not 0 <= self.sender_threads <= 64:
            p.append(f"sender_threads {self.sender_threads} out of range (0 = one per CPU, "
                     "else 1..64)")
        if not 1024 <= self.port <= 65535:
            p.append(f"port {self.port} out of range (1024..65535)")
        return p

    def family_problems(self, family: int) -> list[str]:
        problems = []
        for size in self.profiles():
            try:
                traffic.profile(size, family, self.mix, self.genome)
            except ValueError as exc:
                problems.append(f"{exc} (experiment family {family})")
        return problems

    def flow_set(self) -> traffic.FlowSet:
        return traffic.parse_flows(self.flows)

    def profiles(self) -> tuple[str, ...]:
        """The sizes measured, in order: `sizes` plus "mix"/"genome" when those are set."""
        extra = tuple(n for n, v in (("mix", self.mix), ("genome", self.genome))
                      if v and n not in self.sizes)
        return tuple(self.sizes) + extra


def accounting(capture: bool) -> dict[str, str]:
    """How the figures are counted (stored with every loss-search result)."""
    where = ("unique packets captured where site b's tunnel device receives them (AF_PACKET "
             "ring, like a tester's receive port; site b's IP stack is bypassed by a tc drop "
             "filter); ring drops count as loss" if capture else
             "unique packets received by site b's UDP sockets; socket drops count as loss")
    return {"pps": "packets the generator sent per second (inner IP packets)",
            "mbps_l3": "IP total length x 8 x pps", "mbps_l2": "(IP total length + 18) x 8 x pps",
            "loss": f"sent - {where}"}


def counted_where(capture: bool, receiver: str, has_device: bool, threads: int) -> str:
    """One line on how this case counted loss (the same text for every tunnel counted the
    same way, so the report can group them)."""
    gen = f"{threads} sender thread{'s' if threads != 1 else ''}"
    if capture:
        return ("loss counted where site b's tunnel device receives the packets (capture "
                f"ring, site b's stack bypassed); {gen}")
    if receiver == "socket":
        return f"loss counted with UDP sockets in site b (receiver=socket); {gen}"
    if not has_device:
        return ("loss counted with UDP sockets in site b: this tunnel hands inner packets to "
                f"the stack without a device receive; {gen}")
    return f"loss counted with UDP sockets in site b (capture unavailable: see the note saying why); {gen}"


def loss_by_size(sent: dict[str, int], received: dict[str, int]) -> str:
    """Which packet sizes a trial lost, e.g. "its last trial lost 100.0% of the 1500 B packets;
    40 B: 0.0%, 576 B: 0.0%" (pure): a tunnel that drops every packet above its MTU
    (SRv6 encap does) fails a search at any rate."""
    loss = {int(s): 1 - received.get(s, 0) / n for s, n in sent.items() if n}
    if not loss:
        return "its last trial sent nothing"
    if len(loss) == 1:
        return f"its last trial lost {next(iter(loss.values())):.1%} of the packets"
    by = sorted(loss.items())
    worst = max(v for _, v in by)
    hit = [f"{s} B" for s, v in by if v == worst]
    rest = [f"{s} B: {v:.1%}" for s, v in by if v != worst]
    return (f"its last trial lost {worst:.1%} of the {' and '.join(hit)} packets"
            + (f"; {', '.join(rest)}" if rest else ""))


def size_key(size: str) -> str:
    return size if size in traffic.NAMED_SIZES else str(int(size))


def rate_metrics(prefix: str, key: str, pps: float | None, mean_l3: float,
                 lower_bound: bool = False) -> dict[str, Metric]:
    """pps plus Mbit/s at L3 (IP total length) and L2 (Ethernet frame incl. FCS). A search
    that passed at its upper bound, or failed only because the sender could not offer more,
    found no loss threshold: its figures are lower bounds."""
    l3 = pps * mean_l3 * 8 / 1e6 if pps is not None else None
    l2 = pps * (mean_l3 + L2_EXTRA) * 8 / 1e6 if pps is not None else None
    bound: Literal["lower"] | None = "lower" if lower_bound else None
    dims = {"goal": prefix, "size": key}
    return {f"{prefix}_pps_{key}": Metric(pps, "packets/s", bound=bound, base="rate_pps",
                                          dims=dims),
            f"{prefix}_mbps_l3_{key}": Metric(l3, "Mbit/s", bound=bound, base="rate_mbps",
                                              dims={**dims, "layer": "l3"}),
            f"{prefix}_mbps_l2_{key}": Metric(l2, "Mbit/s", bound=bound, base="rate_mbps",
                                              dims={**dims, "layer": "l2"})}


def latency_metrics(goal: str, key: str, t: Any, pct: float | None = None,
                    quantiles: tuple[str, ...] = ("p50", "p99")) -> dict[str, Metric]:
    """Latency at a found rate (`pct` of it when given), e.g. lat_p99_us_at_10pct_ndr_imix
    with dims {"q": 99, "goal": "ndr", "load_pct": 10, "size": "imix"}."""
    lat = (t.latency_us if t is not None else None) or {}
    at = f"{pct:g}pct_{goal}" if pct is not None else goal
    load = {"load_pct": pct} if pct is not None else {}
    return {f"lat_{q}_us_at_{at}_{key}": Metric(
        lat.get(q), "µs", False, base="latency",
        dims={"q": float(q[1:]), "goal": goal, **load, "size": key}) for q in quantiles}


def latency_spread_metrics(goal: str, key: str, t: Any,
                           pct: float | None = None) -> dict[str, Metric]:
    """Mean and sample standard deviation of the one-way latency at a found rate (`pct` of it
    when given), the way the SD-WAN study reports delay, e.g. lat_mean_us_at_10pct_ndr_imix
    with dims {"stat": "mean", "goal": "ndr", "load_pct": 10, "size": "imix"}."""
    lat = (t.latency_us if t is not None else None) or {}
    at = f"{pct:g}pct_{goal}" if pct is not None else goal
    load = {"load_pct": pct} if pct is not None else {}
    return {f"lat_{stat}_us_at_{at}_{key}": Metric(
        lat.get(stat), "µs", False, base="latency",
        dims={"stat": stat, "goal": goal, **load, "size": key}) for stat in ("mean", "std")}


COST_METRICS = (("wire_pkts_per_inner", "packets per inner packet"),
                ("wire_bytes_per_inner_byte", "bytes per inner byte"),
                ("cpu_per_mpps", "cores per Mpps"))


def cost_metrics(key: str, pct: float, spent: dict[str, Any] | None) -> dict[str, Metric]:
    """What a latency-under-load trial cost per inner packet (wirecost.py), e.g.
    wire_bytes_per_inner_byte_at_80pct_ndr_100 with dims {"load_pct": 80, "size": "100"}:
    underlay packets per inner packet, underlay bytes per inner byte, and busy cores per Mpps
    (= core-seconds per million packets); for a tunnel with datapath daemons, their own
    (datapath_cpu_per_mpps). Lower is better; None when not readable."""
    out = {f"{base}_at_{pct:g}pct_ndr_{key}": Metric(
        (spent or {}).get(base), unit, False, base=base, dims={"load_pct": pct, "size": key})
        for base, unit in COST_METRICS}
    dp = (spent or {}).get("datapath_cpu_per_mpps")
    if dp is not None:
        out[f"datapath_cpu_per_mpps_at_{pct:g}pct_ndr_{key}"] = Metric(
            dp, "cores per Mpps", False, base="datapath_cpu_per_mpps",
            dims={"load_pct": pct, "size": key})
    return out


def trial_at(trials: list[Any], rate: float | None) -> Any:
    """The last trial measured at `rate` (the search's relevant lower bound)."""
    if rate is None:
        return None
    for t in reversed(trials):
        if t.intended_pps is not None and abs(t.intended_pps - rate) <= 1e-6 * rate:
            return t
    return None


def expected_trials(params: LossSearchParams) -> int:
    """Trials one packet size takes, roughly: the max-rate trial, a search that converges (not
    one that passes at the upper bound: RFC 2544 bisects down to the resolution; MLRsearch
    measured a few trials more, 7-17 at 1 %, here) and the latency trials."""
    n = 1 + len(params.latency_at_pct)
    bisect = 1 + math.ceil(math.log2(100 / params.resolution_pct))
    n += bisect if params.method != "mlrsearch" else 0
    n += bisect + 4 if params.method != "rfc2544" else 0
    return n


@dataclass
class TrialCount:
    """The trials of a case as progress shows them: "trial k of about N". N starts from
    `expected_trials` per size and, once a size is done, follows the trials sizes really took;
    a trial's wall time, from the trials taken so far (MLRsearch's first trials are short)."""
    sizes: int
    per_size: int
    done: int = 0
    taken: tuple[int, ...] = ()     # trials each finished size took
    first_at: float | None = None   # when the first trial started (time.monotonic())

    @property
    def about(self) -> int:
        per = round(sum(self.taken) / len(self.taken)) if self.taken else self.per_size
        return max(sum(self.taken) + per * (self.sizes - len(self.taken)), self.done)

    def next(self, now: float | None = None) -> int:
        self.done += 1
        if self.first_at is None:
            self.first_at = time.monotonic() if now is None else now
        return self.done

    def trial_s(self, guess: float, now: float | None = None) -> float:
        """Mean wall time of the trials done (the guess until one is)."""
        if self.first_at is None or self.done < 2:
            return guess
        return ((time.monotonic() if now is None else now) - self.first_at) / (self.done - 1)

    def left_s(self, guess: float, now: float | None = None) -> float:
        """Seconds of trials still to come after the current one."""
        return (self.about - self.done) * self.trial_s(guess, now)

    def size_done(self) -> None:
        self.taken += (self.done - sum(self.taken),)


def search_summary(res: SearchResult) -> dict[str, Any]:
    return {"method": res.method, "rate_pps": res.rate_pps, "lower_pps": res.lower_pps,
            "upper_pps": res.upper_pps, "trial_seconds": res.trial_seconds,
            "trials": len(res.trials), "lower_bound": res.lower_bound}


class LossSearch(Workload[LossSearchParams]):
    name = "loss-search"
    summary = ("loss-threshold throughput: RFC 2544 binary search and MLRsearch NDR/PDR "
               "(native UDP generator, 100 flows, fixed sizes and IMIX), latency under load")
    Params = LossSearchParams
    headline = ("ndr_pps_imix", "pdr_pps_imix", "ndr_pps_361", "pdr_pps_361",
                "rfc2544_pps_imix", "rfc2544_pps_361", "ndr_pps_mix", "rfc2544_pps_mix",
                "ndr_pps_genome", "rfc2544_pps_genome")

    @classmethod
    def requirements(cls, params: LossSearchParams) -> list[Missing]:
        missing = [m for m in (loadgen.binary_missing(),) if m]
        if params.method in ("mlrsearch", "both"):
            try:
                import MLRsearch  # type: ignore[import-untyped]  # noqa: F401
            except ImportError:
                missing.append(Missing("python package MLRsearch", "not installed: method "
                                       f"{params.method}", "make venv (pins MLRsearch==1.2.1)"))
        return missing

    @classmethod
    def expected_seconds(cls, params: LossSearchParams, duration: float, warmup: float) -> float:
        t = min(params.trial_duration, duration) + 1.0
        return t * expected_trials(params) * len(params.profiles()) + 1.5   # + the capture probe

    def unsupported(self, ctx: Context, params: LossSearchParams) -> str | None:
        if params.receiver == "capture" and not ctx.ep.rx_ifnames:
            return ("receiver=capture needs a tunnel whose inner packets arrive on a device in "
                    "site b, and this one delivers them without one; use receiver=auto or socket")
        return relay_problem(ctx, not_tcp="UDP (the load generator)")

    def run(self, ctx: Context, params: LossSearchParams) -> Output:
        for size in params.profiles():
            try:
                self._spec(params, size, ctx.family).profile()
            except ValueError as exc:
                raise SpecError(f"workload loss-search: {exc}", "see `tunbench list "
                                "loss-search --params`") from None
        dst = ctx.server_addr()
        duration = min(params.trial_duration, ctx.duration)
        threads = loadgen.sender_threads(params.sender_threads)
        out = Output(raw={"trial_duration_s": duration, "sizes": {}})
        capture, info = self._choose_receiver(ctx, params, dst)
        if "fallback" in info:
            out.notes.append(info["fallback"] + ": loss counted with UDP sockets instead")
        out.raw["receiver"] = {"mode": "capture" if capture else "socket",
                               "rx_ifnames": list(ctx.ep.rx_ifnames) if capture else [],
                               "sender_threads": threads, **info}
        out.raw["accounting"] = accounting(capture)
        out.notes.append(counted_where(capture, params.receiver, bool(ctx.ep.rx_ifnames),
                                       threads))
        count = TrialCount(len(params.profiles()), expected_trials(params))
        fs = params.flow_set()
        addrs = self._flow_addresses(ctx, fs)
        out.raw["flows"] = {**fs.to_dict(), "src_addresses": list(addrs[0]),
                            "dst_addresses": list(addrs[1])}
        with ctx.measuring(), bpfdrop.dropping(ctx.tb.ledger, ctx.server.netns,
                                               ctx.ep.rx_ifnames if capture else (),
                                               params.port, params.port + fs.dst_ports - 1):
            for size in params.profiles():
                key = size_key(size)
                out.raw["sizes"][key] = self._one_size(ctx, params, dst, size, key, duration,
                                                       out, capture, threads, count, addrs)
                count.size_done()
        return out

    @staticmethod
    def _spec(p: LossSearchParams, size: str, family: int,
              addrs: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())) -> loadgen.TrafficSpec:
        fs = p.flow_set()
        return loadgen.TrafficSpec(size=size, flows=fs.count, port=p.port, family=family,
                                   mix=p.mix, genome=p.genome, srcs=addrs[0], dsts=addrs[1],
                                   src_ports=None if fs.classic else fs.src_ports,
                                   src_port=fs.src_port_base(p.port), ports_count=fs.dst_ports)

    @staticmethod
    def _flow_addresses(ctx: Context, fs: traffic.FlowSet
                        ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Source and destination addresses of a 4-tuple flow set (none for classic flows)."""
        if fs.classic or (fs.src_addrs == 1 and fs.dst_addrs == 1):
            return (), ()
        if not (ctx.ep.a_ifname and ctx.ep.b_ifname):
            raise CommandFailed("flows with several addresses need the tunnel's inner devices, "
                                "and this tunnel names none", "use flows = N (source ports)")
        ctx.phase("flow addresses", fs.describe())
        return loadgen.add_flow_addresses(ctx.tb, (ctx.client_addr(), ctx.ep.a_ifname),
                                          (ctx.server_addr(), ctx.ep.b_ifname), fs)

    @staticmethod
    def _choose_receiver(ctx: Context, p: LossSearchParams, dst: str
                         ) -> tuple[bool, dict[str, Any]]:
        """Capture when the tunnel names its receiving devices, the drop filter installs there
        and a 0.5 s probe at 2,000 pps shows the ring sees the traffic. A ring that sees
        (almost) nothing looks at the wrong place (SRv6-like delivery); a few lost packets are
        the path's own loss (netem, a lossy tunnel), not a blind ring. Returns (capture, what
        to record: the probe's counts and, when falling back, why). With receiver=capture a
        fallback stops the case instead."""
        ifnames = ctx.ep.rx_ifnames if p.receiver != "socket" else ()
        if not ifnames:
            return False, {}
        if ctx.server.remote:
            # the drop filter is loaded by this process (bpf(2)): not on another host
            why = "the capture receiver's drop filter cannot be loaded on a remote site"
            if p.receiver == "capture":
                raise CommandFailed(why, "use receiver=auto or receiver=socket")
            return False, {"fallback": why}
        info: dict[str, Any] = {}
        ctx.phase("capture probe", f"0.5 s at 2,000 pps, seen on {', '.join(ifnames)}",
                  site=ctx.server, expected_s=1.0)
        try:
            with bpfdrop.dropping(ctx.tb.ledger, ctx.server.netns, ifnames, p.port, p.port):
                spec = loadgen.TrafficSpec(size="128", flows=min(p.flow_set().count, 10),
                                           port=p.port)
                t = loadgen.run_trial(ctx.tb, dst, spec, 0.5, 2000.0, label="loadgen-probe",
                                      capture=True, threads=1)
            info = {"probe_sent": t.offered, "probe_captured": t.received}
            if t.offered > 0 and t.received >= PROBE_MIN_SEEN * t.offered:
                return True, info
            why = f"the capture probe saw {t.received} of {t.offered} packets on {', '.join(ifnames)}"
        except bpfdrop.DropUnavailable as exc:   # no bpf or clsact on this host, no device
            why = f"the capture receiver's drop filter could not be installed: {exc}"
        if p.receiver == "capture":
            raise CommandFailed(why, "use receiver=auto or receiver=socket (tunbench doctor "
                                "lists CONFIG_NET_CLS_BPF, CONFIG_NET_SCH_INGRESS, "
                                "CONFIG_PACKET)")
        return False, {**info, "fallback": why}

    def _one_size(self, ctx: Context, p: LossSearchParams, dst: str, size: str, key: str,
                  duration: float, out: Output, capture: bool, threads: int,
                  count: TrialCount, addrs: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
                  ) -> dict[str, Any]:
        spec = self._spec(p, size, ctx.family, addrs)
        trials: list[dict[str, Any]] = []
        costs: list[dict[str, Any] | None] = []   # the last trial's wire and CPU cost
        shape = spec.profile()
        mean_l3 = shape.mean_size
        end_l3 = loadgen.END_PAYLOAD + traffic.IP_UDP_HEADERS[ctx.family]   # an END packet

        def measure(rate: float | None, dur: float, phase: str) -> loadgen.TrialResult:
            k = count.next()
            ctx.phase("trial", f"{phase}, {key}{'' if shape.kind != 'fixed' else ' B'}, "
                      f"{rate_text(rate, mean_l3)}", trial=k, trials_about=count.about,
                      rate_pps=rate, expected_s=dur + 1.0,
                      remaining_s=count.left_s(duration + 1.0) + dur + 1.0)
            before = wirecost.snapshot(ctx.tb, ctx.ep.datapath_pids, ctx.wire_tx)
            t = loadgen.run_trial(ctx.tb, dst, spec, dur, rate, label=f"loadgen-{key}",
                                  capture=capture, threads=threads)
            spent = wirecost.cost(before, wirecost.snapshot(ctx.tb, ctx.ep.datapath_pids,
                                                            ctx.wire_tx),
                                  t.offered + t.end_sent,
                                  t.offered * mean_l3 + t.end_sent * end_l3)
            if spent is not None:
                spent["end_packets"] = t.end_sent
            trials.append({"phase": phase, **t.to_dict(), "cost": spent})
            costs.append(spent)
            return t

        raw: dict[str, Any] = {"trials": trials, "profile": shape.to_dict()}
        max_pps = p.max_rate_pps
        if not max_pps:
            t = measure(None, duration, "max-rate")
            max_pps = t.offered_pps
            raw["max_rate_trial_loss_ratio"] = t.loss_ratio
        raw.update(max_pps=max_pps, mean_size_l3=mean_l3)
        out.metrics[f"max_offered_pps_{key}"] = Metric(max_pps, "packets/s",
                                                       base="max_offered_pps",
                                                       dims={"size": key})
        if max_pps <= p.min_rate_pps:
            raise SpecError(f"the generator reached only {max_pps:.0f} pps at size {key}, not "
                            f"above min_rate_pps {p.min_rate_pps:g}", "lower min_rate_pps")
        ndr_base: tuple[str, float | None] = ("ndr", None)
        searches: dict[str, SearchResult] = {}
        if p.method in ("rfc2544", "both"):
            r = rfc2544_search(lambda rate, d: measure(rate, d, "rfc2544"), max_pps,
                               threshold=p.loss_threshold_pct / 100,
                               resolution_pps=max_pps * p.resolution_pct / 100,
                               duration=duration, min_pps=p.min_rate_pps)
            raw["rfc2544"] = search_summary(r)
            searches["rfc2544"] = r
            out.metrics.update(rate_metrics("rfc2544", key, r.rate_pps, mean_l3,
                                            r.lower_bound))
            out.metrics.update(latency_metrics("rfc2544", key, trial_at(r.trials, r.rate_pps)))
            out.metrics.update(latency_spread_metrics("rfc2544", key,
                                                      trial_at(r.trials, r.rate_pps)))
            ndr_base = ("ndr", r.rate_pps)
        if p.method in ("mlrsearch", "both"):
            found = mlr_search(lambda rate, d: measure(rate, d, "mlrsearch"), max_pps,
                               goals={"ndr": p.ndr_loss_pct / 100, "pdr": p.pdr_loss_pct / 100},
                               relative_width=p.resolution_pct / 100, duration=duration,
                               min_pps=p.min_rate_pps)
            raw["mlrsearch"] = {g: search_summary(r) for g, r in found.items()}
            for goal, r in found.items():
                searches[goal] = r
                out.metrics.update(rate_metrics(goal, key, r.rate_pps, mean_l3,
                                                r.lower_bound))
                out.metrics.update(latency_metrics(goal, key, trial_at(r.trials, r.rate_pps)))
                out.metrics.update(latency_spread_metrics(goal, key,
                                                          trial_at(r.trials, r.rate_pps)))
            ndr_base = ("ndr", found["ndr"].rate_pps)
        at_max = [name for name, res in searches.items() if res.at_upper_bound]
        if at_max:
            out.notes.append(f"size {key}: {', '.join(at_max)} reached the upper bound "
                             f"{max_pps:.0f} pps (within {GENERATOR_MARGIN:.0%}): limited by "
                             "the generator/host, "
                             "not the tunnel; their figures are lower bounds")
        raw["at_upper_bound"] = at_max
        by_sender = [name for name, res in searches.items()
                     if res.sender_bound and not res.at_upper_bound]
        if by_sender:
            out.notes.append(f"size {key}: {', '.join(by_sender)} lost nothing above the goal; "
                             "their failing trials failed only because the sender could not "
                             "offer the load (the host's CPU, which on one host also runs "
                             "encapsulation in the sender's context): their figures are lower "
                             "bounds of the loss threshold")
        raw["sender_bound"] = by_sender
        failed = [name for name, res in searches.items() if res.rate_pps is None]
        if failed and trials:
            out.notes.append(f"size {key}: {', '.join(failed)} found no passing rate, not even "
                             f"min_rate_pps {p.min_rate_pps:g}; "
                             + loss_by_size(trials[-1]["per_size_sent"],
                                            trials[-1]["per_size_received"]))
        raw["latency_base"] = {"name": ndr_base[0], "pps": ndr_base[1],
                               "source": "mlrsearch" if p.method != "rfc2544" else "rfc2544"}
        raw["latency_under_load"] = {}
        if ndr_base[1]:
            for pct in p.latency_at_pct:
                t = measure(ndr_base[1] * pct / 100, duration, f"latency-{pct:g}pct")
                raw["latency_under_load"][f"{pct:g}"] = {"rate_pps": t.intended_pps,
                                                         "latency_us": t.latency_us,
                                                         "loss_ratio": t.loss_ratio,
                                                         "cost": costs[-1]}
                out.metrics.update(latency_metrics("ndr", key, t, pct, ("p50", "p90", "p99")))
                out.metrics.update(cost_metrics(key, pct, costs[-1]))
                out.metrics.update(latency_spread_metrics("ndr", key, t, pct))
        raw["trial_seconds_total"] = sum(t["duration_s"] for t in trials)
        return raw


WORKLOAD = LossSearch
