"""A campaign folder as the report sees it, and the conventions it draws from.

Everything here is pure over the typed case records (results/records.py), read through the
one reader (results/reader.py, which upgrades older formats), and nothing here asks a
registry: a case file says what it means (docs/results.md). The report is data-driven, so a new workload
appears in the tables and in the generic figures without code changes, and in a dedicated
figure when its records carry one of these:

- sweeps: a workload parameter among the case's recorded ``workload.axes`` that varies across
  the campaign's cases (e.g. ``streams`` 1..512), or metrics with a point dimension
  (``dims: {"streams": 64}``);
- percentiles: metrics whose only dimension is ``q`` (``tcp_rtt`` at ``{"q": 50}``);
- distributions: a case's ``distributions`` or ``raw["distributions"]``, each
  ``{name: {"unit": u, "values": [...]}}`` (full samples) or ``{"unit": u, "percentiles": {"50": v}}``;
  or a quantile sketch ``raw[group]["cdf"] = {"pct": [...], "<q>_<unit>": [...]}``
  (the latency workload's ``raw.tcp.cdf.rtt_us``), repeats pooled as a mixture;
- tunnel sweeps: ``case.tunnel.base`` and ``case.tunnel.sweep`` (``{"tunnels": 2}``), recorded
  for an experiment's ``tunnels = [1, 2, 4]``;
- NDR/PDR: metrics with ``dims.goal`` ``ndr``/``pdr`` (and ``size``, ``layer``);
- line rate: metrics whose unit is ``% of line rate`` or whose name contains ``line_rate``;
- latency under load: metrics whose name contains ``under_load`` or ``loaded``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..results import reader
from ..results.model import MetricRecord
from ..results.records import CaseRecord, WorkloadIdentity
from . import metrics as catalogue
from . import stats

Scenario = tuple[str, int, str]   # workload, MTU, offload variant


@dataclass
class Campaign:
    root: Path
    index: dict[str, Any]
    # the cases as typed records (results/records.py), named as every table shows them
    cases: list[CaseRecord]
    rows: list[stats.Row] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)   # listed in the index, file gone
    pending: list[str] = field(default_factory=list)   # listed, never recorded
    _records: dict[str, MetricRecord] | None = field(default=None, init=False, repr=False,
                                                     compare=False)

    @property
    def folder(self) -> reader.CampaignFolder:
        """What the reader says of the folder: state, incomplete, resume command, problems."""
        return reader.CampaignFolder(self.root, self.index, [r.doc for r in self.cases],
                                     self.missing, self.pending)

    def planned(self) -> tuple[list[str], list[str]]:
        """(tunnel labels, workload labels) the experiment asked for: the header of a campaign
        cut short still names them, even with no case recorded."""
        tuns, wls = reader.experiment_labels(self.index)
        return tuns or self.tunnels(), wls or self.workloads()

    def metric(self, name: str) -> MetricRecord | None:
        """The record of a metric key (base, unit, dims) as the cases recorded it."""
        if self._records is None:
            self._records = {}
            for r in self.cases:
                for k, rec in r.metrics.items():
                    self._records.setdefault(k, rec)
        return self._records.get(name)

    def display(self, metric: str, workload: str | None = None) -> str:
        """The name a reader sees for a metric key (report/metrics.py), in a scenario's
        workload: its per-site metrics named by the direction it ran."""
        return catalogue.display_name(metric, self.metric(metric), self.direction(workload))

    def direction(self, workload: str | None = None) -> str | None:
        """How a scenario's workload ran ('reverse': site b sent, iperf3 -R; 'bidir'; None:
        a sent to b) as its cases recorded it; without a workload, the campaign's one
        direction when all its cases ran alike, else None."""
        if workload is not None:
            w = self.declared(workload)
            return w.direction if w else None
        ways = {r.workload.direction for r in self.cases}
        return ways.pop() if len(ways) == 1 else None

    def unit_label(self, metric: str, unit: str) -> str:
        return catalogue.unit_label(metric, unit, self.metric(metric))

    @property
    def ok(self) -> list[CaseRecord]:
        return [r for r in self.cases if r.ok]

    @property
    def failed(self) -> list[CaseRecord]:
        """Cases that did not measure: failed, and skipped (the workload cannot run over that
        tunnel); each carries its reason in `error`."""
        return [r for r in self.cases if not r.ok]

    @property
    def env(self) -> dict[str, Any]:
        return self.index.get("env") or {}

    def tunnels(self) -> list[str]:
        """Tunnel labels in campaign order (native first when present)."""
        order = list(dict.fromkeys(r.tunnel.label for r in self.cases))
        native = {r.tunnel.label for r in self.cases if r.tunnel.native}
        return sorted(order, key=lambda t: (t not in native, order.index(t)))

    def kind_of(self, label: str) -> str:
        return next((r.tunnel.kind for r in self.cases if r.tunnel.label == label), label)

    def is_reference(self, label: str) -> bool:
        """Whether the tunnel shown as `label` is the campaign's reference (native; not native
        through a chain, which is measured against it: stats.is_reference)."""
        return self.kind_of(label) == "native" and not label.endswith(stats.VIA_CHAIN)

    def encrypts(self, label: str) -> bool:
        """Whether the tunnel shown as `label` encrypts (as its cases recorded it, or from the
        kind in older files)."""
        return any(r.tunnel.encrypts for r in self.cases if r.tunnel.label == label)

    def scenarios(self) -> list[Scenario]:
        return list(dict.fromkeys((r.workload, r.mtu, r.offloads) for r in self.rows))

    def row(self, tun: str, scen: Scenario, metric: str) -> stats.Row | None:
        wl, mtu, off = scen
        return next((r for r in self.rows if r.tunnel == tun and r.workload == wl
                     and r.mtu == mtu and r.offloads == off and r.metric == metric), None)

    def native_row(self, scen: Scenario, metric: str) -> stats.Row | None:
        wl, mtu, off = scen
        return next((r for r in self.rows if stats.is_reference(r) and r.workload == wl
                     and r.mtu == mtu and r.offloads == off and r.metric == metric), None)

    def mtus(self, workload: str | None = None) -> list[int]:
        return sorted({r.mtu for r in self.rows if workload in (None, r.workload)})

    def workloads(self) -> list[str]:
        return list(dict.fromkeys(r.workload for r in self.rows))

    def declared(self, workload: str) -> WorkloadIdentity | None:
        """The workload of a scenario name as its cases recorded it (headline, sweep)."""
        return next((r.workload for r in self.cases if r.workload.name == workload), None)

    def sweep_point(self, label: str) -> tuple[str, str, int] | None:
        """(base workload, parameter, value) when the workload label is one value of a sweep
        of a single integer parameter ('parallel-streams streams=64'), else None."""
        w = self.declared(label)
        if w is None or len(w.sweep) != 1:
            return None
        (param, value), = w.sweep.items()
        return (w.base, param, value) if isinstance(value, int) else None


def load(root: Path) -> Campaign:
    """A campaign folder through the one reader (results/reader.py), as typed records."""
    camp = reader.read_records(root)
    return Campaign(root, camp.index, camp.cases, stats.rows(camp.cases), camp.missing,
                    camp.pending)


def metric_unit(cases: Iterable[CaseRecord], name: str) -> str:
    """The unit the first case that recorded a metric gives it."""
    return next((r.metrics[name].unit for r in cases if name in r.metrics), "")


_RATE = re.compile(r"^[kmgt]?(bit/s|bps|b/s|pps)$")


def is_rate_unit(unit: str) -> bool:
    return bool(_RATE.match(unit.strip().lower()))


def headline_metric(c: Campaign, workload: str) -> str | None:
    """The metric a workload is judged by: its declared headline, else its first rate metric."""
    names = [r.metric for r in c.rows if r.workload == workload]
    if not names:
        return None
    w = c.declared(workload)
    for h in w.headline if w else ():   # as the case recorded its workload's declaration
        if h in names:
            return str(h)
    for r in c.rows:
        if r.workload == workload and r.higher_is_better and is_rate_unit(r.unit) \
                and not is_point(c, r.metric):
            return r.metric
    hib = [r.metric for r in c.rows if r.workload == workload and r.higher_is_better]
    return hib[0] if hib else names[0]


def is_point(c: Campaign, metric: str) -> bool:
    """Whether a metric is one point of a sweep recorded inside a case (dims {"streams": 8})."""
    rec = c.metric(metric)
    return bool(rec and rec.points)


# -- per-case values -----------------------------------------------------------------------

def values_by_tunnel(c: Campaign, scen: Scenario, metric: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in c.ok:
        if r.scenario != scen:
            continue
        v = r.value(metric)
        if v is not None:
            out.setdefault(r.tunnel.label, []).append(v)
    return out


def series_names(c: Campaign) -> list[tuple[str, str]]:
    """(workload, series name) pairs with at least one non-empty series."""
    seen: dict[tuple[str, str], None] = {}
    for r in c.ok:
        for name, vals in r.series.items():
            if vals:
                seen[(r.workload.name, name)] = None
    return list(seen)


# -- sweeps (x axis from a parameter) ------------------------------------------------------

@dataclass
class Sweep:
    workload: str
    param: str
    mtu: int
    offloads: str
    # metric -> tunnel -> x -> values over repeats
    points: dict[str, dict[str, dict[int, list[float]]]]
    units: dict[str, str]
    # "workload": a workload parameter (streams); "tunnel": a tunnel parameter recorded as
    # the case's tunnel sweep (tunnels=N), the curve's name then being the base label
    over: str = "workload"


def sweeps(c: Campaign) -> list[Sweep]:
    found: dict[tuple[str, str, int, str], Sweep] = {}

    def add(scen: Scenario, param: str, metric: str, unit: str, tun: str, x: int,
            v: float) -> None:
        key = (scen[0], param, scen[1], scen[2])
        sw = found.setdefault(key, Sweep(scen[0], param, scen[1], scen[2], {}, {}))
        sw.points.setdefault(metric, {}).setdefault(tun, {}).setdefault(x, []).append(v)
        sw.units[metric] = unit

    varying: dict[str, set[str]] = {}
    for wl in dict.fromkeys(r.workload.base for r in c.ok):
        axes = dict.fromkeys(p for r in c.ok if r.workload.base == wl for p in r.workload.axes)
        for p in axes:
            xs = {r.workload.params.get(p) for r in c.ok if r.workload.base == wl}
            if len(xs) > 1 and all(isinstance(x, int) for x in xs):
                varying.setdefault(wl, set()).add(p)
    for case in c.ok:
        scen = (case.workload.base, case.mtu, case.offloads)
        params = case.workload.params
        for name, rec in case.metrics.items():
            if rec.value is None:
                continue
            at = [(p, x) for p, x in rec.points.items() if isinstance(x, int)]
            if len(at) == 1:   # a point recorded inside the case: {"streams": 8}
                (p, x), = at
                add(scen, p, name if rec.qualifiers else rec.base, rec.unit,
                    case.tunnel.label, x, rec.value)
                continue
            for p in varying.get(scen[0], ()):
                add(scen, p, name, rec.unit, case.tunnel.label, int(params[p]), rec.value)
    for case in c.ok:
        point = case.tunnel.sweep_point()
        if point is None:
            continue
        base, param, x = point
        scen = case.scenario
        key = (scen[0], param, scen[1], scen[2])
        found.setdefault(key, Sweep(scen[0], param, scen[1], scen[2], {}, {}, "tunnel"))
        for name, rec in case.metrics.items():
            if rec.value is not None and not rec.points:
                add(scen, param, name, rec.unit, base, x, rec.value)
        dp = datapath_cpu(case)
        if dp is not None:
            add(scen, param, DATAPATH_CPU, "% of one core", base, x, dp)
    return [sw for sw in found.values()
            if any(len(xs) > 1 for per in sw.points.values() for xs in per.values())]


DATAPATH_CPU = "datapath_cpu"


def datapath_cpu(case: CaseRecord) -> float | None:
    """CPU of the tunnel's datapath daemons (wireguard-go, charon, ovs-vswitchd, ssh), both
    sites summed, in % of one core, from the per-process CPU the case recorded; None for a
    kernel datapath (no daemon tracked)."""
    procs = case.cpu.get("processes") or {}
    vals = [float(e.get("pct_of_one_core", 0.0)) for label, e in procs.items()
            if label.startswith("datapath")]
    return sum(vals) if vals else None


# -- latency distributions -----------------------------------------------------------------

@dataclass
class Distribution:
    name: str
    unit: str
    # tunnel -> sorted values (full samples) or (quantile 0..1, value) points
    samples: dict[str, list[float]] = field(default_factory=dict)
    quantiles: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    # tunnel -> how many transactions the quantiles summarize (a sketch), when recorded
    counts: dict[str, int] = field(default_factory=dict)

    def dense(self, tun: str) -> bool:
        """True when a tunnel's quantiles are a sketch of the whole distribution (hundreds of
        levels), not a handful of reported percentiles."""
        return len(self.quantiles.get(tun, ())) >= SKETCH_MIN


SKETCH_MIN = 50
_UNIT_SUFFIX = re.compile(r"^(?P<q>.+)_(?P<unit>us|ms|ns|s)$")


def _sketches(case: CaseRecord) -> dict[str, dict[str, Any]]:
    """Quantile sketches a case recorded: ``raw.<group>.cdf = {"pct": [...], "<q>_<unit>":
    [...]}`` (the latency workload: ``raw.tcp.cdf.rtt_us`` -> ``tcp_rtt`` in us), with the
    group's ``stats.samples`` as the count when present."""
    out: dict[str, dict[str, Any]] = {}
    for group, val in case.raw.items():
        cdf = val.get("cdf") if isinstance(val, dict) else None
        if not isinstance(cdf, dict) or not isinstance(cdf.get("pct"), list):
            continue
        for key, vals in cdf.items():
            m = _UNIT_SUFFIX.match(key)
            if key == "pct" or not m or not isinstance(vals, list) \
                    or len(vals) != len(cdf["pct"]):
                continue
            out[f"{group}_{m['q']}"] = {
                "unit": "µs" if m["unit"] == "us" else m["unit"],
                "pct": cdf["pct"], "values": vals,
                "count": (val.get("stats") or {}).get("samples")}
    return out


def mixture(sketches: list[tuple[list[float], list[float]]],
            levels: list[float]) -> list[tuple[float, float]]:
    """The CDF of repeats pooled with equal weight, from each repeat's quantile sketch
    (levels in %, values ascending): F(x) = mean of the repeats' F_r(x), each F_r linear
    between its quantiles; returned as (fraction, value) at the given levels. With one repeat
    this is the repeat's own sketch."""
    import numpy as np
    if len(sketches) == 1:
        pct, vals = sketches[0]
        return [(p / 100.0, v) for p, v in zip(pct, vals)]
    grid = np.unique(np.concatenate([np.asarray(v, dtype=float) for _, v in sketches]))
    f = np.zeros(len(grid))
    for pct, vals in sketches:
        f += np.interp(grid, np.asarray(vals, dtype=float), np.asarray(pct, dtype=float) / 100)
    f /= len(sketches)
    xs = np.interp(np.asarray(levels, dtype=float) / 100, f, grid)
    return [(p / 100.0, float(x)) for p, x in zip(levels, xs)]


def distributions(c: Campaign, scen: Scenario) -> list[Distribution]:
    """Every distribution of a scenario, per tunnel, best data first: full samples, then a
    recorded quantile sketch (repeats pooled), then the percentile metrics (``*_pNN``)."""
    out: dict[str, Distribution] = {}
    qpts: dict[tuple[str, str], dict[float, list[float]]] = {}
    sk: dict[tuple[str, str], list[tuple[list[float], list[float]]]] = {}
    for case in c.ok:
        if case.scenario != scen:
            continue
        tun = case.tunnel.label
        dists = dict(case.raw.get("distributions") or {})
        dists.update(case.distributions)
        for name, dist in dists.items():
            if not isinstance(dist, dict):
                continue
            dd = out.setdefault(name, Distribution(name, str(dist.get("unit", ""))))
            if dist.get("values"):
                dd.samples.setdefault(tun, []).extend(float(v) for v in dist["values"])
            for q, v in (dist.get("percentiles") or {}).items():
                qpts.setdefault((name, tun), {}).setdefault(float(q) / 100, []).append(float(v))
        for name, s in _sketches(case).items():
            if name in dists:
                continue
            dd = out.setdefault(name, Distribution(name, s["unit"]))
            sk.setdefault((name, tun), []).append(
                ([float(p) for p in s["pct"]], [float(v) for v in s["values"]]))
            if s["count"]:
                dd.counts[tun] = dd.counts.get(tun, 0) + int(s["count"])
        for rec in case.metrics.values():
            # a percentile metric: its only dimension is q ({"q": 99} of tcp_rtt)
            if set(rec.dims) == {"q"} and rec.value is not None and rec.base not in dists:
                out.setdefault(rec.base, Distribution(rec.base, rec.unit))
                qpts.setdefault((rec.base, tun), {}).setdefault(
                    float(rec.dims["q"]) / 100, []).append(rec.value)
    for (name, tun), reps in sk.items():
        out[name].quantiles[tun] = mixture(reps, reps[0][0])
    for (name, tun), pts in qpts.items():
        if tun in out[name].samples or tun in out[name].quantiles:
            continue
        out[name].quantiles[tun] = sorted((q, sum(v) / len(v)) for q, v in pts.items())
    for dist in out.values():
        for tun in dist.samples:
            dist.samples[tun].sort()
        dist.quantiles = {t: q for t, q in dist.quantiles.items() if len(q) >= 3}
    return [d for d in out.values() if d.samples or d.quantiles]


# -- NDR/PDR, line rate, latency under load ------------------------------------------------

def ndr_metrics(c: Campaign, names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """metric name -> (ndr|pdr, size label) for NDR/PDR metrics (dims goal ndr|pdr); the
    label is the frame size or mix, prefixed with the layer of a Mbit/s rate ('l2_imix')."""
    out = {}
    for n in names:
        rec = c.metric(n)
        if rec is None or rec.dims.get("goal") not in ("ndr", "pdr") or "q" in rec.dims:
            continue
        size = str(rec.dims.get("size", "all"))
        out[n] = (str(rec.dims["goal"]), f"{rec.dims['layer']}_{size}"
                  if rec.dims.get("layer") else size)
    return out


def size_order(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def is_line_rate(name: str, unit: str) -> bool:
    return "line rate" in unit.lower() or "line_rate" in name


def is_under_load(name: str) -> bool:
    return "under_load" in name or "loaded" in name


def overlap(a: stats.Summary, b: stats.Summary) -> bool:
    """True when the 95% confidence intervals of two means overlap (or either has n < 2)."""
    if a.n < 2 or b.n < 2:
        return True
    return not (a.ci95_high < b.ci95_low or b.ci95_high < a.ci95_low)


def case_notes(cases: Iterable[CaseRecord]) -> list[tuple[str, str, list[str]]]:
    """The notes cases carry (caveats a reader needs: lower bounds, fallbacks, what a search
    lost), grouped: (workload, note text, tunnels that got it), in order of first appearance.
    A note given in every repeat of a tunnel is listed once."""
    found: dict[tuple[str, str], list[str]] = {}
    for case in cases:
        for note in case.notes:
            tuns = found.setdefault((case.workload.label, note), [])
            if case.tunnel.label not in tuns:
                tuns.append(case.tunnel.label)
    return [(wl, note, tuns) for (wl, note), tuns in found.items()]
