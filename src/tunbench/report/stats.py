"""Statistics over repeats, and ratios against the native baseline of the same campaign.

One row per (tunnel, workload, metric, MTU, offload variant) with n, mean, median, std,
95% confidence interval of the mean (Student's t), coefficient of variation, and percent of
native measured in the same campaign. Pure functions over case documents.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from scipy import stats as sps

NOISY_CV = 0.10  # flag a figure whose coefficient of variation exceeds 10%


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
        half = float(sps.t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(d.pop("stats"))
        return d


def rows(cases: list[dict[str, Any]]) -> list[Row]:
    """Aggregate the ok cases of a campaign into rows, in the campaign's tunnel order."""
    groups: dict[tuple[str, str, str, str, int, str], list[float]] = {}
    meta: dict[tuple[str, str, str, str, int, str], tuple[str, bool]] = {}
    order: list[str] = []
    for doc in cases:
        if doc.get("status") != "ok":
            continue
        c = doc["case"]
        label, kind = c["tunnel"]["label"], c["tunnel"]["kind"]
        if label not in order:
            order.append(label)
        for name, m in doc.get("metrics", {}).items():
            if m.get("value") is None:
                continue
            key = (label, kind, c["workload"]["name"], name, c["mtu"], c["offloads"]["name"])
            groups.setdefault(key, []).append(float(m["value"]))
            meta[key] = (m["unit"], bool(m.get("higher_is_better", True)))
    summaries = {k: summarize(v) for k, v in groups.items()}
    out = []
    for key, s in summaries.items():
        label, kind, wl, metric, mtu, off = key
        base = next((summaries[k] for k in summaries if k[1] == "native" and k[2:] == key[2:]),
                    None)
        pct = 100.0 * s.mean / base.mean if base and base.mean else None
        unit, hib = meta[key]
        out.append(Row(label, kind, wl, metric, unit, mtu, off, hib, s, pct,
                       s.cv is not None and s.cv > NOISY_CV))
    out.sort(key=lambda r: (r.workload, r.mtu, r.offloads, r.metric, order.index(r.tunnel)))
    return out


def summary_json(cases: list[dict[str, Any]], campaign: str) -> dict[str, Any]:
    return {"format": "tunbench-summary", "format_version": 1, "campaign": campaign,
            "failed_cases": [d["case"]["id"] for d in cases if d.get("status") != "ok"],
            "entries": [r.to_dict() for r in rows(cases)]}
