"""The decision summary and `tunbench advise`: which method to use, ranked from the
campaign's own measurements, with the evidence behind every figure.

One row per method (a tunnel as the report names it: kind + implementation, 'wireguard (go)')
with its share of native throughput at one stream and at its best stream count, its CPU per
Gbit/s against native's, the latency it adds (p50/p99), whether it encrypts, the MTU it
leaves, and the confidence of each figure (n and 95% CI, "untested" for a single run).

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

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ..errors import SpecError
from . import data, decide, stats
from .advise_names import NEEDS, PREFER  # noqa: F401  (re-exported: advise.NEEDS, PREFER)
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

REF_MTU = 1500        # the underlay MTU the summary speaks of when a campaign ran several
REF_OFFLOADS = "default"
THROUGHPUT = "throughput"
CPU = "cpu_per_gbit"
LATENCY_PREFS = ("tcp_", "udp_", "")   # the p50 metric named first: TCP's round trip


@dataclass(frozen=True)
class Figure:
    """A figure with its confidence, from per-round values keyed by round: log-ratios to
    native (`scale`: 100 for % of native, 1 for × native) or differences (`scale` None,
    latency added). `verdict`/`need`: its decision against native and the rounds it needs."""
    rounds: tuple[tuple[Any, float], ...]
    scale: float | None = 100.0
    verdict: str | None = None
    need: int | None = None

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
    failed: list[str] = field(default_factory=list)             # why its cases failed

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
    prefer: str | None = None           # None: throughput where measured, else latency

    def describe(self) -> str:
        parts = (["encryption"] if self.need_encryption else []) + \
            ([f"MTU ≥ {self.min_mtu}"] if self.min_mtu is not None else []) + \
            ([f"CPU per Gbit/s ≤ {self.max_cpu:g}" + ("× native" if self.max_cpu_relative
                                                     else "% of a core")]
             if self.max_cpu is not None else []) + \
            ([f"{self.streams} stream(s)"] if self.streams is not None else [])
        return ", ".join(parts) or "none"


# -- collecting the figures ---------------------------------------------------------------

def _reference(c: Campaign) -> tuple[int, str] | None:
    """(underlay MTU, offload variant) the summary speaks of: 1500 and default when run."""
    scens = [(mtu, off) for _, mtu, off in c.scenarios()]
    if not scens:
        return None
    mtus = sorted({m for m, _ in scens})
    mtu = REF_MTU if REF_MTU in mtus else mtus[0]
    offs = [o for m, o in scens if m == mtu]
    return mtu, REF_OFFLOADS if REF_OFFLOADS in offs else offs[0]


def _streams(doc: dict[str, Any]) -> int:
    wl = doc["case"]["workload"]          # the axes the writer recorded (results v2)
    params = wl.get("params") or {}
    for p in wl.get("axes") or ():
        v = params.get(p)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return 1


def _throughput_base(c: Campaign, ok: list[dict[str, Any]]) -> str | None:
    """The throughput workload the summary reads: stream when run, else the first one."""
    bases = list(dict.fromkeys(data.base_workload(d) for d in ok
                               if data.metric_value(d, THROUGHPUT) is not None))
    return "stream" if "stream" in bases else (bases[0] if bases else None)


def _latency_metric(c: Campaign, ok: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(workload, base) of the first latency workload with p50 metrics ('tcp_rtt')."""
    for d in ok:
        names = [n[:-4] for n in (d.get("metrics") or {}) if n.endswith("_p50")]
        for pref in LATENCY_PREFS:
            found = [n for n in names if n.startswith(pref)]
            if found and data.metric_value(d, THROUGHPUT) is None:
                return data.scenario(d)[0], found[0]
    return None


def _paired(docs: list[dict[str, Any]], native: dict[tuple[Any, ...], float], key: Any,
            metric: str, op: str) -> list[tuple[Any, float]]:
    """Per round: (round, ln(method / native)) or (round, method - native), against native
    in the same round; a round without native (or a non-positive ratio side) is left out."""
    out = []
    for d in docs:
        v = data.metric_value(d, metric)
        r = d["case"].get("repeat")
        ref = native.get((key, r))
        if v is None or ref is None:
            continue
        if op == "diff":
            out.append((r, v - ref))
        elif v > 0 and ref > 0:
            out.append((r, math.log(v / ref)))
    return out


def _native_values(ok: list[dict[str, Any]], keyf: Any, metric: str
                   ) -> dict[tuple[Any, ...], float]:
    by_round: dict[tuple[Any, ...], float] = {}
    for d in ok:
        v = data.metric_value(d, metric)
        if _is_reference(d) and v is not None:
            by_round[(keyf(d), d["case"].get("repeat"))] = v
    return by_round


def _is_reference(d: dict[str, Any]) -> bool:
    """Native measured direct (a native through a chain is measured against it)."""
    return d["case"]["tunnel"]["kind"] == "native" and not data.tunnel(d).endswith(
        stats.VIA_CHAIN)


Samples = dict[str, dict[str, Any]]   # label -> what collect() gathered


def collect(c: Campaign) -> tuple[Samples, list[str]]:
    """Per method, the raw per-round figures of one campaign; and notes on what was read."""
    notes: list[str] = []
    ref = _reference(c)
    out: Samples = {}
    for d in c.cases:
        label = data.tunnel(d)
        ident = data.tunnel_identity(d)
        m = out.setdefault(label, {"kind": d["case"]["tunnel"]["kind"], "impl": ident["impl"],
                                   "encrypts": ident["encrypts"], "mtu": set(), "share": {},
                                   "cpu": {}, "cpu_abs": {}, "latency": {}, "failed": [],
                                   "ok": 0})
        if d.get("status") != "ok":
            m["failed"].append(str(d.get("error") or d.get("status")))
    if ref is None:
        return out, ["no case measured: nothing to summarize"]
    mtu, off = ref
    ok = [d for d in c.ok if (d["case"]["mtu"], d["case"]["offloads"]["name"]) == (mtu, off)]
    if len(c.mtus()) > 1 or len({s[2] for s in c.scenarios()}) > 1:
        notes.append(f"figures at underlay MTU {mtu}, offloads {off} (the tables give the "
                     "others)")
    for d in ok:
        m = out[data.tunnel(d)]
        m["ok"] += 1
        tmtu = (d.get("tunnel") or {}).get("mtu")
        if isinstance(tmtu, int):
            m["mtu"].add(tmtu)
    base = _throughput_base(c, ok)
    if base is not None:
        tdocs = [d for d in ok if data.base_workload(d) == base]
        nat = _native_values(tdocs, _streams, THROUGHPUT)
        cnat = _native_values(tdocs, _streams, CPU)
        for d in tdocs:
            m, n = out[data.tunnel(d)], _streams(d)
            m["share"].setdefault(n, []).extend(_paired([d], nat, n, THROUGHPUT, "ratio"))
            m["cpu"].setdefault(n, []).extend(_paired([d], cnat, n, CPU, "ratio"))
            v = data.metric_value(d, CPU)
            if v is not None and v > 0:   # a positive quantity: on the log scale too
                m["cpu_abs"].setdefault(n, []).append((d["case"].get("repeat"), math.log(v)))
        if not nat:
            notes.append(f"no native baseline in {base}: shares of native cannot be computed")
    lat = _latency_metric(c, ok)
    if lat is not None:
        wl, metric = lat
        ldocs = [d for d in ok if data.scenario(d)[0] == wl]
        for q in ("p50", "p99"):
            nat = _native_values(ldocs, lambda d: 0, f"{metric}_{q}")
            for d in ldocs:
                out[data.tunnel(d)]["latency"].setdefault(q, []).extend(
                    _paired([d], nat, 0, f"{metric}_{q}", "diff"))
        unit = data.metric_unit(ldocs, f"{metric}_p50")
        notes.append(f"latency added: {metric} p50/p99 of {wl}, in {unit}, against native's")
        for m in out.values():
            m["latency_unit"] = unit
    return out, notes


def summarize(campaigns: list[Campaign]) -> tuple[list[Method], list[str]]:
    """The decision summary of one campaign, or of several pooled round by round."""
    pooled: Samples = {}
    notes: list[str] = []
    for i, c in enumerate(campaigns):
        got, cnotes = collect(c)
        notes += [n for n in cnotes if n not in notes]
        for label, m in got.items():
            p = pooled.setdefault(label, {**m, "mtu": set(), "share": {}, "cpu": {},
                                          "cpu_abs": {}, "latency": {}, "failed": [], "ok": 0})
            p["encrypts"] = p["encrypts"] or m["encrypts"]
            p["mtu"] |= m["mtu"]
            p["failed"] += m["failed"]
            p["ok"] += m["ok"]
            for k in ("share", "cpu", "cpu_abs", "latency"):
                for x, vals in m[k].items():   # rounds keyed by (campaign, repeat)
                    p[k].setdefault(x, []).extend(((i, r), v) for r, v in vals)
    counts = {n for p in pooled.values() for n in p["share"]}
    if len(counts) == 1:
        notes.append(f"throughput measured at {min(counts)} stream(s) only: the best stream "
                     "count needs the stream workload at several counts (docs/report.md)")
    if len(campaigns) > 1:
        notes.append(f"{len(campaigns)} campaigns pooled: every figure against native is taken "
                     "per round, against the native of its own campaign")
    methods = []
    for label, p in pooled.items():
        meth = Method(label, p["kind"], p["impl"], bool(p["encrypts"]),
                      reference=p["kind"] == "native"
                      and not label.endswith(stats.VIA_CHAIN), mtu_left=min(p["mtu"], default=None),
                      failed=p["failed"] if not p["ok"] else [])
        for k, scale in SCALES.items():
            setattr(meth, k, {x: Figure(tuple(v), scale) for x, v in p[k].items() if v})
        if len(p["mtu"]) > 1:
            notes.append(f"{label} left MTUs {sorted(p['mtu'])}: the lowest is shown")
        methods.append(meth)
    methods.sort(key=lambda m: not m.reference)   # native first, then campaign order
    against_native(methods)
    return methods, notes


# the unit each figure is reported in: % of native, × native, absolute (log scale: positive),
# latency added (None: a difference, linear)
SCALES: dict[str, float | None] = {"share": 100.0, "cpu": 1.0, "cpu_abs": 1.0, "latency": None}


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


def _streams_for(methods: list[Method], want: int | None) -> int | None:
    counts = sorted({n for m in methods for n in m.share})
    if want is None:
        return counts[0] if counts else None
    if want not in counts:
        raise SpecError(f"--streams {want}: no throughput case ran with {want} stream(s) "
                        f"(measured: {', '.join(map(str, counts)) or 'none'})",
                        "give one of the measured stream counts, or leave --streams out")
    return want


def _why_not(m: Method, k: Constraints, n: int | None) -> list[str]:
    why = []
    if m.failed:
        why.append(f"every case failed ({m.failed[0]})")
    if k.need_encryption and not m.encrypts:
        why.append("does not encrypt")
    if k.min_mtu is not None:
        if m.mtu_left is None:
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
    return why


def _ranking_figure(m: Method, prefer: str, n: int | None) -> Figure | None:
    if prefer == "latency":
        return m.latency.get("p50")
    if n is None:
        return None
    return (m.share if prefer == "throughput" else m.cpu).get(n)


BASIS = {"throughput": "share of native throughput", "latency": "latency added (p50)",
         "cpu": "CPU per Gbit/s against native's"}


def advise(methods: list[Method], k: Constraints, notes: list[str] | None = None) -> Advice:
    """Rank the methods meeting the constraints by the preferred figure; name the others
    and why; a rank is shared unless the neighbours are decided different (rank())."""
    n = _streams_for(methods, k.streams)
    if k.prefer is None:   # what the campaign measured decides; a choice is never refused
        k = replace(k, prefer="throughput" if n is not None or not any(
            m.latency for m in methods) else "latency")
    prefer = str(k.prefer)
    basis = BASIS[prefer] + (f" at {n} stream(s)" if n is not None and prefer != "latency"
                             else "")
    cands, excluded = [], []
    for m in methods:
        if m.reference:
            continue
        why = _why_not(m, k, n)
        fig = _ranking_figure(m, prefer, n)
        if fig is None and not why:
            why.append(f"no {basis} measured")
        if why:
            excluded.append((m, why))
        else:
            assert fig is not None
            cands.append((m, fig))
    hib = prefer == "throughput"
    cands.sort(key=lambda mf: -mf[1].est.mean if hib else mf[1].est.mean)
    ranked, decisions = rank(cands)
    return Advice(k, methods, ranked, excluded, verdict(ranked, decisions, excluded, basis),
                  list(notes or []), n, basis, decisions)


def build(campaigns: list[Campaign], k: Constraints | None = None) -> Advice:
    methods, notes = summarize(campaigns)
    return advise(methods, k or Constraints(), notes)
