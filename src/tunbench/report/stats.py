"""Statistics over repeats, and ratios against the native baseline of the same campaign.

One row per (tunnel, workload label, metric, MTU, offload variant) with n, mean, median, std,
95% confidence interval of the mean (Student's t), coefficient of variation, and its share of
native measured in the same campaign: the paired per-round estimate of report/decide.py
(each round's value over native's in that round, on the log scale; geometric mean and an
asymmetric 95% CI), the one figure the summary, tables, take-aways, figures and compare show. A workload label is the workload name, or NAME-VALUE for
one value of a swept parameter (parallel-streams-64); `sweep` holds that value.

Throughput rows also carry percent of line rate: the shaped underlay rate when the campaign
was shaped (--rate), else, for the line-rate-processes workload, the native throughput of the
same campaign (the study's "percentage of line-rate"); `line_rate_source` says which.
Pure functions over the typed case records (results/records.py).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..rates import rate_mbps
from ..results.model import VIA_CHAIN, log_share, round_reference
from ..results.records import CaseRecord
from . import decide

NOISY_CV = 0.10  # default: flag a figure whose coefficient of variation exceeds 10%
BOUND_NOTE = ("≥ lower bound: the measurement reached its tool's limit on this host (e.g. the "
              "load generator's top rate), not the tunnel's")
LINE_RATE_WORKLOADS = ("line-rate-processes",)



@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    std: float
    ci95_low: float
    ci95_high: float
    cv: float | None
    min: float
    max: float


def summarize(values: list[float], confidence: float = 0.95) -> Summary:
    if not values:
        raise ValueError("no values")
    n = len(values)
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else 0.0
    if n > 1:
        half = decide._t((1 + confidence) / 2, n - 1) * std / math.sqrt(n)
    else:
        half = 0.0
    cv = std / abs(mean) if mean else None
    return Summary(n, mean, statistics.median(values), std, mean - half, mean + half, cv,
                   min(values), max(values))


@dataclass(frozen=True)
class Row:
    tunnel: str
    kind: str
    workload: str
    metric: str
    unit: str
    mtu: int
    offloads: str
    higher_is_better: bool
    stats: Summary
    pct_of_native: float | None
    noisy: bool
    label: str = ""                    # workload label (NAME or NAME-VALUE of a sweep)
    sweep: Any = None                  # the swept parameter's value, if any
    pct_of_line_rate: float | None = None
    line_rate_source: str | None = None  # "shaped underlay rate 500mbit" | "native (same campaign)"
    bound: str | None = None           # "lower": some repeat hit its tool's limit (value >= mean)
    # the share of native (% of native; its CI, n rounds, decision against native), paired per
    # round on the log scale (report/decide.py); None for native itself or without native
    share: decide.Estimate | None = None
    # per round (repeat): ln(value / native's value in that round), what `share` rests on
    ratios: tuple[tuple[Any, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(d.pop("stats"))
        d.pop("ratios")
        d["share_of_native"] = self.share.to_json() if self.share else None
        d.pop("share")
        return d


Key = tuple[str, str, str, str, str, int, str]


def _round(case: CaseRecord, seen: int) -> Any:
    """The round a case's value is paired by. A mesh case: its round and its pair, so each
    pair's tunnel meets that pair's native (a mesh's pooled rows take every pair of every
    round as one paired observation; report/mesh.py has the per-pair grids)."""
    pair = (case.doc.get("mesh") or {}).get("pair")
    if pair and case.repeat is not None:
        return (case.repeat, "-".join(map(str, pair)))
    return case.repeat if case.repeat is not None else seen


def round_of(case: CaseRecord) -> Any:
    """The round a case pairs by (_round): its repeat, on a mesh with its pair."""
    return _round(case, 0)


def _group(cases: list[CaseRecord]) -> tuple[dict[Key, dict[Any, float]], dict[
        Key, tuple[str, bool, Any]], dict[Key, str], dict[Key, str], list[str],
        dict[Key, dict[Any, float]], dict[Key, dict[Any, float]]]:
    """Per row key: value by round (repeat), (unit, higher is better, sweep), shaped rate,
    bound; the tunnels in campaign order; per row key the value each round pairs against
    native (CaseRecord.paired: a rate's best second; native measured several times in a round:
    the geometric mean of its runs, model.round_reference); and per row key the shares of
    native its cases measured themselves by round (CaseRecord.own_share)."""
    groups: dict[Key, dict[Any, float]] = {}
    runs: dict[Key, dict[Any, list[float]]] = {}   # paired values by round (natives: several)
    meta: dict[Key, tuple[str, bool, Any]] = {}
    rates: dict[Key, str] = {}
    bounds: dict[Key, str] = {}
    own: dict[Key, dict[Any, float]] = {}
    order: list[str] = []
    for case in cases:
        if not case.ok:
            continue
        label, kind, wl = case.tunnel.label, case.tunnel.kind, case.workload
        if label not in order:
            order.append(label)
        rate = case.rate
        for name, m in case.metrics.items():
            if m.value is None:
                continue
            key = (label, kind, wl.name, wl.label, name, case.mtu, case.offloads)
            vals = groups.setdefault(key, {})
            base = _round(case, len(vals))
            r = base if base not in vals else (base, len(vals))   # none lost
            vals[r] = m.value
            pv = case.paired(name)   # None: the host slowed this case throughout (not paired)
            if pv is not None:   # a round's further native runs join its first
                runs.setdefault(key, {}).setdefault(
                    base if case.native_run > 1 else r, []).append(pv)
            s = case.own_share(name)
            if s is not None:
                own.setdefault(key, {})[r] = s
            meta[key] = (m.unit, m.higher_is_better, wl.sweep_value)
            if rate:
                rates[key] = rate
            if m.bound:
                bounds[key] = m.bound
    paired = {k: {r: round_reference(v) for r, v in by_round.items()}
              for k, by_round in runs.items()}
    return groups, meta, rates, bounds, order, paired, own


def _ref_key(key: Key, groups: dict[Key, dict[Any, float]]) -> Key | None:
    return next((k for k in groups if k[1] == "native" and not k[0].endswith(VIA_CHAIN)
                 and k[2:] == key[2:]), None)


def _shares(groups: dict[Key, dict[Any, float]], higher_is_better: Mapping[Key, bool],
            own: Mapping[Key, Mapping[Any, float]] | None = None
            ) -> tuple[dict[Key, decide.Estimate], dict[Key, tuple[tuple[Any, float], ...]]]:
    """Every non-reference row's share of native, paired per round on the log scale (a case
    that measured native beside it pairs by its own share, `own`, model.log_share); the
    decisions against native Holm-corrected over the rows of one column (scenario, metric),
    the margin read on native's share of a delay or a cost (decide.share_level)."""
    ratios: dict[Key, tuple[tuple[Any, float], ...]] = {}
    for key, vals in groups.items():
        ref = _ref_key(key, groups)
        if ref is None or ref == key:
            continue
        nat, mine = groups[ref], (own or {}).get(key, {})
        ratios[key] = tuple((r, x) for r, v in vals.items()
                            for x in [log_share(v, nat.get(r), mine.get(r))] if x is not None)
    shares: dict[Key, decide.Estimate] = {}
    columns = {k[2:] for k in ratios}
    for col in columns:
        logs = {k: [x for _, x in ratios[k]] for k in ratios if k[2:] == col and ratios[k]}
        hib = all(higher_is_better.get(k, True) for k in logs)
        got = decide.against_reference({"|".join(map(str, k)): v for k, v in logs.items()},
                                       higher_is_better=hib)
        shares.update({k: got["|".join(map(str, k))] for k in logs})
    return shares, ratios


def rows(cases: list[CaseRecord], noisy_cv: float = NOISY_CV) -> list[Row]:
    """Aggregate the ok cases of a campaign into rows, in the campaign's tunnel order."""
    groups, meta, rates, bounds, order, paired, own = _group(cases)
    shares, ratios = _shares(paired, {k: m[1] for k, m in meta.items()}, own)
    out = []
    for key, vals in groups.items():
        s = summarize(list(vals.values()))
        label, kind, wl, wlabel, metric, mtu, off = key
        share = shares.get(key)
        ref = _ref_key(key, groups)
        pct = 100.0 if ref == key else share.mean if share else None
        unit, hib, sweep = meta[key]
        line_pct, line_src = None, None
        if metric == "throughput" and key in rates:
            line_pct = 100.0 * s.mean / rate_mbps(rates[key])
            line_src = f"shaped underlay rate {rates[key]}"
        elif metric == "throughput" and wl in LINE_RATE_WORKLOADS and pct is not None:
            line_pct, line_src = pct, "native throughput measured in the same campaign"
        out.append(Row(label, kind, wl, metric, unit, mtu, off, hib, s, pct,
                       s.cv is not None and s.cv > noisy_cv, wlabel, sweep, line_pct, line_src,
                       bounds.get(key), share, ratios.get(key, ())))
    out.sort(key=lambda r: (natural(r.workload), r.sweep if isinstance(r.sweep, (int, float))
                            else 0, natural(r.label), r.mtu, r.offloads, r.metric,
                            order.index(r.tunnel)))
    return out


def natural(text: str) -> tuple[Any, ...]:
    """A sort key that orders the numbers inside a name by value: 'stream streams=4' before
    'stream streams=16' (scenarios of a sweep read 1, 4, 16, never 1, 16, 4)."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", text)))




def is_reference(r: Row) -> bool:
    """Whether a row is the baseline of its column (native, direct when a chain is compared)."""
    return r.kind == "native" and not r.tunnel.endswith(VIA_CHAIN)


def vs_native(r: Row) -> str:
    """A figure against native's in the same campaign: a share for what should be high
    (throughput: '90.3%'), a multiple for a cost or a delay ('53.0×' native's CPU per Gbit/s,
    not '5304.0%'); '-' without a native baseline. The paired per-round estimate."""
    if r.pct_of_native is None:
        return "-"
    if r.higher_is_better:
        return f"{r.pct_of_native:.1f}%"
    return f"{r.pct_of_native / 100:.2f}×"


def vs_native_ci(r: Row) -> str:
    """The 95% CI of vs_native(r), asymmetric ('85.1–97.0%', '1.9–2.3×'); 'n=1' untested;
    '' for the reference or without a share."""
    e = r.share
    if e is None:
        return ""
    if e.ci_low is None or e.ci_high is None:
        return "n=1"
    if r.higher_is_better:
        return f"{e.ci_low:.1f}–{e.ci_high:.1f}%"
    return f"{e.ci_low / 100:.2f}–{e.ci_high / 100:.2f}×"


def bound_mark(r: Row) -> str:
    """'≥' before a figure that is a lower bound, else nothing."""
    return "≥" if r.bound == "lower" else ""


def summary_json(docs: list[dict[str, Any]], campaign: str,
                 noisy_cv: float = NOISY_CV) -> dict[str, Any]:
    """`tunbench run --json`: the case documents the run recorded (results/store.py), typed
    as recorded (labels not renamed)."""
    cases = [CaseRecord.from_doc(d) for d in docs]
    return {"format": "tunbench-summary", "format_version": 2, "campaign": campaign,
            "noisy_cv": noisy_cv,
            "failed_cases": [r.id for r in cases if r.status == "failed"],
            "skipped_cases": [r.id for r in cases if r.status == "skipped"],
            "entries": [r.to_dict() for r in rows(cases, noisy_cv)]}
