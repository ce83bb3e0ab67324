"""The decision summary and `tunbench advise`: which method to use, ranked from the
campaign's own measurements, with the evidence behind every figure.

One row per method (a tunnel as the report names it: kind + implementation, 'wireguard (go)')
with its share of native throughput at one stream and at its best stream count, its NDR/PDR/
RFC 2544 packets/s per frame size as a share of native's (loss searches), its CPU per Gbit/s
against native's, the latency it adds (p50/p99), whether it encrypts (a chain: its gateways
count), the MTU it leaves ("n/a" for a TCP relay), and the confidence of each figure (n and
95% CI, "untested" for a single run). All at one underlay MTU and offload variant: 1500 and
default when measured, or the one `--mtu`/`--offloads` choose. Any of these figures can be
ranked by (`--by`, advise_figures.FIGURES); a figure or constraint the campaign did not
measure is refused in one line naming what to run. What a method carries, encrypts and
whether it runs in the kernel come from the tunnel drivers' declarations (advise_figures).

Every figure against native is computed per round: a repeat's value over native's in the
same round, because host drift moves both alike; shares and multiples on the log scale
(geometric mean, asymmetric 95% CI: report/decide.py, docs/methodology.md), latency added as
a difference. Campaigns given together (several folders, e.g. rounds run on different days,
or local and multi-host) pool their rounds: each is measured against the native of its own
sitting.

Ranking never invents a winner: each method is decided against its neighbour above it
(report/decide.py: different with Holm's correction over the neighbours compared, equivalent
within ±3 points of native, else undecided with the rounds still needed); only "different"
starts a new rank. With single runs the order is untested. Pure functions over
data.Campaign.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ..errors import SpecError
from . import data, decide, hostload, stats
from .advise_collect import FIGURE_KEYS, Samples, collect, reference
from .advise_figures import FIGURES, canonical
from .advise_names import BY, NEEDS, PREFER  # noqa: F401  (re-exported: advise.NEEDS, PREFER)
from .data import Campaign
from .ranking import (  # noqa: F401  (re-exported: advise.to_json, decision_text)
    _n,
    against_native,
    decision_text,
    method_json,
    rank,
    to_json,
    verdict,
)


@dataclass(frozen=True)
class Figure:
    """A figure with its confidence, from per-round values keyed by round: log-ratios to
    native (`scale`: 100 for % of native, 1 for × native) or differences (`scale` None,
    latency added). `verdict`/`need`: its decision against native and the rounds it needs."""
    rounds: tuple[tuple[Any, float], ...]
    scale: float | None = 100.0
    verdict: str | None = None
    need: int | None = None
    higher_is_better: bool = True    # False for a cost (CPU per Gbit/s): decide.share_level

    @cached_property
    def est(self) -> decide.Estimate:
        vals = [v for _, v in self.rounds]
        e = decide.ratio_estimate(vals, self.scale) if self.scale is not None \
            else decide.diff_estimate(vals)
        return replace(e, decision=self.verdict or e.decision, rounds_needed=self.need)

    @property
    def n(self) -> int:
        return len(self.rounds)

    @property
    def untested(self) -> bool:
        return self.n < 2

    def by_round(self) -> dict[Any, float]:
        return dict(self.rounds)

    def to_json(self) -> dict[str, Any]:
        return self.est.to_json()


@dataclass
class Method:
    label: str                      # the report's name: 'wireguard (go)'
    kind: str
    impl: str | None
    encrypts: bool
    reference: bool = False         # native: the baseline every share is measured against
    mtu_left: int | None = None     # the tunnel interface's MTU at the reference underlay MTU
    share: dict[int, Figure] = field(default_factory=dict)      # streams -> % of native
    cpu: dict[int, Figure] = field(default_factory=dict)        # streams -> × native
    cpu_abs: dict[int, Figure] = field(default_factory=dict)    # streams -> % core per Gbit/s
    latency: dict[str, Figure] = field(default_factory=dict)    # "p50"/"p99" -> added
    # loss searches: (goal ndr|pdr|rfc2544, frame size) -> packets/s as % of native
    loss: dict[tuple[str, str], Figure] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)             # why its cases failed
    carries: tuple[str, ...] | None = None   # from its driver's declaration (None: unknown)
    kernel: bool | None = None               # its datapath (and a chain's gateways') in kernel
    gateways: str | None = None              # a chain's gateway tunnel ('ipsec (libipsec)')
    gateway_encrypts: bool = False
    gateway_kernel: bool | None = None
    latency_unit: str | None = None          # the unit latency added is in ('µs')

    @property
    def relay(self) -> bool:
        """A stream relay (ssh-forward): carries TCP only, no packet MTU."""
        return self.carries is not None and "udp" not in self.carries

    def single(self) -> tuple[int, Figure] | None:
        """Share of native at the fewest streams measured (one, normally)."""
        return min(self.share.items()) if self.share else None

    def best(self) -> tuple[int, Figure] | None:
        """Share of native at the stream count where this method did best."""
        return max(self.share.items(), key=lambda kv: kv[1].est.mean) if self.share else None


@dataclass(frozen=True)
class Constraints:
    need_encryption: bool = False
    min_mtu: int | None = None
    max_cpu: float | None = None        # % of one core per Gbit/s, or a multiple of native's
    max_cpu_relative: bool = False      # max_cpu is '2x': × native
    streams: int | None = None
    prefer: str | None = None           # the figure ranked by (BY); None: what was measured
    carries: tuple[str, ...] = ()       # tcp | udp | l2: what a method must carry
    max_added_p99: float | None = None  # µs of latency added at p99
    kernel_only: bool = False           # only methods whose datapath runs in the kernel
    mtu: int | None = None              # the underlay MTU variant (None: 1500 when measured)
    offloads: str | None = None         # the offload variant (None: default when measured)
    frame_size: str | None = None       # the loss-search frame size ranked at

    def describe(self) -> str:
        parts = (["encryption"] if self.need_encryption else []) + \
            ([f"carries {'+'.join(self.carries)}"] if self.carries else []) + \
            (["kernel datapath"] if self.kernel_only else []) + \
            ([f"MTU ≥ {self.min_mtu}"] if self.min_mtu is not None else []) + \
            ([f"CPU per Gbit/s ≤ {self.max_cpu:g}" + ("× native" if self.max_cpu_relative
                                                     else "% of a core")]
             if self.max_cpu is not None else []) + \
            ([f"latency added p99 ≤ {self.max_added_p99:g} µs"]
             if self.max_added_p99 is not None else []) + \
            ([f"{self.streams} stream(s)"] if self.streams is not None else [])
        return ", ".join(parts) or "none"


def summarize(campaigns: list[Campaign], variant: tuple[int | None, str | None] = (None, None)
              ) -> tuple[list[Method], list[str]]:
    """The decision summary of one campaign, or of several pooled round by round, at one
    underlay MTU and offload variant (`variant`, as collect() takes it)."""
    pooled: Samples = {}
    notes: list[str] = []
    for i, c in enumerate(campaigns):
        got, cnotes = collect(c, variant)
        notes += [n for n in cnotes if n not in notes]
        for label, m in got.items():
            p = pooled.setdefault(label, {**m, "mtu": set(), "failed": [], "ok": 0,
                                          **{k: {} for k in FIGURE_KEYS}})
            p["encrypts"] = p["encrypts"] or m["encrypts"]
            p["mtu"] |= m["mtu"]
            p["failed"] += m["failed"]
            p["ok"] += m["ok"]
            for k in FIGURE_KEYS:
                for x, vals in m[k].items():   # rounds keyed by (campaign, repeat)
                    p[k].setdefault(x, []).extend(((i, r), v) for r, v in vals)
    busy = hostload.note(d.cpu for c in campaigns for d in c.ok)
    if busy:
        notes.append(busy)
    counts = {n for p in pooled.values() for n in p["share"]}
    if len(counts) == 1:
        notes.append(f"throughput measured at {min(counts)} stream(s) only: the best stream "
                     "count needs the stream workload at several counts (docs/report.md)")
    if len(campaigns) > 1:
        notes.append(f"{len(campaigns)} campaigns pooled: every figure against native is taken "
                     "per round, against the native of its own campaign")
    methods = []
    for label, p in pooled.items():
        relay = p["carries"] is not None and "udp" not in p["carries"]
        meth = Method(label, p["kind"], p["impl"], bool(p["encrypts"]),
                      reference=p["kind"] == "native" and not label.endswith(stats.VIA_CHAIN),
                      mtu_left=None if relay else min(p["mtu"], default=None),
                      failed=p["failed"] if not p["ok"] else [], carries=p["carries"],
                      kernel=p["kernel"], gateways=p["gateways"],
                      gateway_encrypts=p["gateway_encrypts"], gateway_kernel=p["gateway_kernel"],
                      latency_unit=p.get("latency_unit"))
        for k, scale in SCALES.items():
            setattr(meth, k, {x: Figure(tuple(v), scale, higher_is_better=k not in LOWER)
                              for x, v in p[k].items() if v})
        if len(p["mtu"]) > 1 and not relay:
            notes.append(f"{label} left MTUs {sorted(p['mtu'])}: the lowest is shown")
        methods.append(meth)
    methods.sort(key=lambda m: not m.reference)   # native first, then campaign order
    against_native(methods)
    return methods, notes


# the unit each figure is reported in: % of native, × native, absolute (log scale: positive),
# latency added (None: a difference, linear)
SCALES: dict[str, float | None] = {"share": 100.0, "cpu": 1.0, "cpu_abs": 1.0, "latency": None,
                                   "loss": 100.0}
LOWER = ("cpu", "cpu_abs", "latency")    # the figures where lower is better


# -- constraints and the ranking -------------------------------------------------------------

@dataclass
class Advice:
    constraints: Constraints
    methods: list[Method]
    ranked: list[tuple[int, Method, Figure]]          # (rank, method, the figure ranked by)
    excluded: list[tuple[Method, list[str]]]
    verdict: str
    notes: list[str]
    streams: int | None                                # the stream count ranked at
    basis: str                                         # what the ranking compares
    # per ranked method: its decision against the one above it (None for the first)
    decisions: list[decide.Decision | None] = field(default_factory=list)
    frame_size: str | None = None                      # the loss-search frame size shown
    variant: tuple[int, str] | None = None             # (underlay MTU, offloads) of the figures


def _streams_for(methods: list[Method], want: int | None) -> int | None:
    counts = sorted({n for m in methods for n in m.share})
    if want is None:
        return counts[0] if counts else None
    if want not in counts:
        raise SpecError(f"--streams {want}: no throughput case ran with {want} stream(s) "
                        f"(measured: {', '.join(map(str, counts)) or 'none'})",
                        "give one of the measured stream counts, or leave --streams out"
                        if counts else FIGURES["throughput"].run + f" (streams = {want})")
    return want


def _size_for(methods: list[Method], goal: str | None, want: str | None) -> str | None:
    """The loss-search frame size ranked at and shown: `--frame-size` (one SpecError line when
    not measured), else the smallest measured (numbers before mixes)."""
    sizes = sorted({s for m in methods for g, s in m.loss if goal in (None, g)},
                   key=data.size_order)
    if want is None:
        return sizes[0] if sizes else None
    if want not in sizes:
        raise SpecError(f"--frame-size {want}: no loss search measured frame size {want}"
                        + (f" for {goal}" if goal else "")
                        + f" (measured: {', '.join(sizes) or 'none'})",
                        f"measure it: tunbench run --workloads loss-search --sizes {want}, or "
                        "give a measured size")
    return want


def _measured(methods: list[Method], by: str, n: int | None, size: str | None) -> bool:
    return any(_ranking_figure(m, by, n, size) is not None for m in methods if not m.reference)


def _default_by(methods: list[Method], n: int | None, size: str | None) -> str:
    """Throughput where measured, else latency added, else the loss searches' rates."""
    for by in ("throughput", "latency-p50", "ndr", "pdr", "rfc2544"):
        if _measured(methods, by, n, _size_for(methods, by, None) if by in LOSS else size):
            return by
    return "throughput"


def _refuse_unmeasured(methods: list[Method], k: Constraints, by: str, n: int | None,
                       size: str | None, asked: str | None) -> None:
    """A figure ranked by or a constraint on a figure the campaign did not measure: one line
    naming what to run (SpecError, exit 2)."""
    others = [m for m in methods if not m.reference]
    if asked is not None and others and not _measured(methods, by, n, size):
        at = f" at frame size {size}" if by in LOSS and size else \
            f" at {n} stream(s)" if by in ("throughput", "cpu") and n else ""
        raise SpecError(f"--by {asked}: the campaign measured no {FIGURES[by].basis}{at}",
                        FIGURES[by].run)
    if k.max_added_p99 is not None and others and not any("p99" in m.latency for m in others):
        raise SpecError(f"--max-added-p99 {k.max_added_p99:g}: the campaign measured no "
                        "latency", FIGURES["latency-p99"].run)
    if k.max_cpu is not None and others and not any(m.cpu or m.cpu_abs for m in others):
        raise SpecError(f"--max-cpu-per-gbit {k.max_cpu:g}: the campaign measured no CPU per "
                        "Gbit/s", FIGURES["cpu"].run)


LOSS = ("ndr", "pdr", "rfc2544")
US_PER = {"us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6, "ns": 1e-3}


def _why_not(m: Method, k: Constraints, n: int | None, lat_unit: str) -> list[str]:
    why = []
    if m.failed:
        why.append(f"every case failed ({m.failed[0]})")
    if k.need_encryption and not m.encrypts:
        why.append("does not encrypt")
    why += _why_not_declared(m, k)
    if k.min_mtu is not None:
        if m.relay:
            why.append("a TCP relay: carries no packets, so it leaves no MTU")
        elif m.mtu_left is None:
            why.append("the MTU it leaves was not recorded")
        elif m.mtu_left < k.min_mtu:
            why.append(f"leaves MTU {m.mtu_left} < {k.min_mtu}")
    if k.max_cpu is not None:
        fig = (m.cpu if k.max_cpu_relative else m.cpu_abs).get(n) if n is not None else None
        unit = "× native" if k.max_cpu_relative else "% of a core"
        if fig is None:
            why.append("no CPU per Gbit/s measured" + (f" at {n} stream(s)" if n else ""))
        elif fig.est.mean > k.max_cpu:
            why.append(f"CPU per Gbit/s {_n(fig.est.mean)}{unit} > {k.max_cpu:g}{unit}")
    if k.max_added_p99 is not None:
        fig = m.latency.get("p99")
        scale = US_PER.get(lat_unit)
        if fig is None:
            why.append("no latency added p99 measured")
        elif scale is None:
            why.append(f"latency measured in {lat_unit!r}, not a time unit")
        elif fig.est.mean * scale > k.max_added_p99:
            why.append(f"latency added p99 {_n(fig.est.mean * scale)} µs > "
                       f"{k.max_added_p99:g} µs")
    return why


def _why_not_declared(m: Method, k: Constraints) -> list[str]:
    """--carries and --kernel-only, against the drivers' declarations."""
    why = []
    if (k.carries or k.kernel_only) and (m.carries is None or m.kernel is None):
        why.append("what it carries and where its datapath runs were not recorded")
        return why
    missing = [c for c in k.carries if m.carries is not None and c not in m.carries]
    if missing:
        what = {"tcp": "TCP", "udp": "UDP", "l2": "Ethernet frames (L2)"}
        why.append(("carries TCP only (a TCP port relay)" if m.relay else
                    f"does not carry {' or '.join(what[c] for c in missing)}")
                   + (f" through its gateways ({m.gateways})" if m.gateways else ""))
    if k.kernel_only and m.kernel is False:
        why.append(f"its gateways' datapath ({m.gateways}) runs in userspace"
                   if m.gateways and m.gateway_kernel is False
                   else "its datapath runs in userspace")
    return why


def _ranking_figure(m: Method, by: str, n: int | None, size: str | None) -> Figure | None:
    if by.startswith("latency"):
        return m.latency.get("p99" if by == "latency-p99" else "p50")
    if by in LOSS:
        return m.loss.get((by, size)) if size is not None else None
    if by == "throughput-best":
        best = m.best()
        return best[1] if best else None
    if n is None:
        return None
    return (m.share if by == "throughput" else m.cpu).get(n)


def _basis(by: str, n: int | None, size: str | None) -> str:
    return FIGURES[by].basis + (f" at {n} stream(s)" if n is not None and by in (
        "throughput", "cpu") else f" at frame size {size}" if by in LOSS and size else "")


def advise(methods: list[Method], k: Constraints, notes: list[str] | None = None,
           variant: tuple[int, str] | None = None) -> Advice:
    """Rank the methods meeting the constraints by the figure asked for (`prefer`, else what
    was measured); name the others and why; a rank is shared unless the neighbours are
    decided different (rank()). A figure or constraint the campaign did not measure: one
    SpecError line naming what to run."""
    n = _streams_for(methods, k.streams)
    explicit = k.prefer is not None
    by = canonical(k.prefer) if k.prefer is not None else _default_by(methods, n, None)
    size = _size_for(methods, by if by in LOSS else None, k.frame_size)
    _refuse_unmeasured(methods, k, by, n, size, k.prefer)
    k = replace(k, prefer=by)
    basis = _basis(by, n, size)
    lat_unit = next((m.latency_unit for m in methods if m.latency_unit), "µs")
    cands, excluded = [], []
    for m in methods:
        if m.reference:
            continue
        why = _why_not(m, k, n, lat_unit)
        fig = _ranking_figure(m, by, n, size)
        if fig is None and not why:
            why.append(f"no {basis} measured")
        if why:
            excluded.append((m, why))
        else:
            assert fig is not None
            cands.append((m, fig))
    hib = FIGURES[by].higher_is_better
    cands.sort(key=lambda mf: -mf[1].est.mean if hib else mf[1].est.mean)
    ranked, decisions = rank(cands)
    said = verdict(ranked, decisions, excluded, basis)
    if not cands and excluded and not explicit and all(
            why == [f"no {basis} measured"] for _, why in excluded):
        said = ("Nothing to rank: the campaign measured none of the figures advise ranks by "
                "(throughput, latency added, loss-search packets/s); run the stream, latency "
                "or loss-search workload.")
    return Advice(k, methods, ranked, excluded, said, list(notes or []), n, basis, decisions,
                  size, variant)


def build(campaigns: list[Campaign], k: Constraints | None = None) -> Advice:
    k = k or Constraints()
    methods, notes = summarize(campaigns, (k.mtu, k.offloads))
    variant = next((v for v in (reference(c, k.mtu, k.offloads) for c in campaigns) if v),
                   None)
    return advise(methods, k, notes, variant)
