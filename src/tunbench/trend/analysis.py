"""Trend analysis over many campaigns, pure over the store's tidy rows.

Views: where a campaign measured native in the same scenario (workload, MTU, offloads), a
tunnel's value is taken as its share of that campaign's native mean ("% of native"): host
drift between campaigns cancels. Native itself, and tunnels in campaigns without native, are
shown "absolute". Each (tunnel, workload, metric) uses one view for all its points, and says
which.

Time of day: every case is one point at its start time (local time of the analysing host,
or TZ): mean, standard deviation and n per hour (0-23) and weekday (Mon-Sun).
Time series: one point per campaign (the mean of its repeats), at the campaign's start;
change points are where FD.io CSIT's jumpavg starts a new group; each is a regression or a
progression by the metric's direction, with its size in percent of the group before.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEFAULT_METRICS = ("throughput", "cpu_busy", "cpu_per_gbit", "tcp_rtt_p50", "udp_rtt_p50",
                   "rtt_avg")
SHARE, ABSOLUTE = "% of native", "absolute"
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
REGRESSION, PROGRESSION = "regression", "progression"

Key = tuple[str, str, str]   # tunnel, workload, metric


@dataclass
class Point:
    campaign: str
    created: float
    started: float
    tunnel: str
    kind: str
    workload: str
    mtu: int
    offloads: str
    metric: str
    unit: str
    higher_is_better: bool
    value: float
    share: float | None = None


@dataclass(frozen=True)
class Cell:
    mean: float
    std: float
    n: int


@dataclass
class Change:
    tunnel: str
    workload: str
    metric: str
    view: str
    at: float            # start of the first campaign of the new group
    campaign: str
    before: float
    after: float
    change_pct: float
    verdict: str


@dataclass
class Trend:
    points: list[Point]
    views: dict[Key, str] = field(default_factory=dict)
    units: dict[Key, str] = field(default_factory=dict)

    def tracked(self) -> list[Key]:
        return list(self.views)

    def value(self, p: Point) -> float:
        key = (p.tunnel, p.workload, p.metric)
        if self.views[key] == SHARE and p.share is not None:
            return p.share
        return p.value


def points_from_rows(rows: list[dict[str, Any]]) -> list[Point]:
    """Tidy rows (store.query.rows) as points, with the share of the campaign's native mean."""
    pts = [Point(str(r["campaign"]), float(r["campaign_created"] or r["started"] or 0),
                 float(r["started"] or r["campaign_created"] or 0), str(r["tunnel"]),
                 str(r["kind"]), str(r["workload"]), int(r["mtu"] or 0),
                 str(r["offloads"] or ""), str(r["metric"]), str(r["unit"] or ""),
                 bool(r["higher_is_better"]), float(r["value"]))
           for r in rows if r.get("value") is not None and r.get("status", "ok") == "ok"]
    native: dict[tuple[str, str, int, str, str], list[float]] = {}
    for p in pts:
        if p.kind == "native":
            native.setdefault((p.campaign, p.workload, p.mtu, p.offloads, p.metric),
                              []).append(p.value)
    for p in pts:
        base = native.get((p.campaign, p.workload, p.mtu, p.offloads, p.metric))
        if p.kind != "native" and base and statistics.fmean(base):
            p.share = 100.0 * p.value / statistics.fmean(base)
    return pts


def build(rows: list[dict[str, Any]], *, absolute: bool = False) -> Trend:
    pts = points_from_rows(rows)
    t = Trend(pts)
    for p in pts:
        key = (p.tunnel, p.workload, p.metric)
        t.units.setdefault(key, p.unit)
        share = not absolute and p.share is not None
        t.views[key] = SHARE if share and t.views.get(key, SHARE) == SHARE else ABSOLUTE
    for key in list(t.views):   # absolute for all of a key's points if any lacks a native
        if any(p.share is None for p in pts if (p.tunnel, p.workload, p.metric) == key):
            t.views[key] = ABSOLUTE
    return t


def _cell(vals: list[float]) -> Cell:
    return Cell(statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0,
                len(vals))


def by_slot(t: Trend, slot: str) -> dict[Key, dict[int, Cell]]:
    """slot 'hour' (0-23) or 'weekday' (0 = Monday): per key, per slot, mean ± std of cases."""
    groups: dict[Key, dict[int, list[float]]] = {}
    for p in t.points:
        when = datetime.fromtimestamp(p.started)
        s = when.hour if slot == "hour" else when.weekday()
        groups.setdefault((p.tunnel, p.workload, p.metric), {}).setdefault(s, []).append(
            t.value(p))
    return {k: {s: _cell(v) for s, v in sorted(per.items())} for k, per in groups.items()}


def series(t: Trend) -> dict[Key, list[tuple[float, str, float]]]:
    """Per key, (campaign start, campaign, mean of its cases) in time order. The mean covers
    all of a campaign's cases of that key (every MTU and offload variant): compare like with
    like by keeping such campaigns apart (--since/--until, --host) or by one scenario each."""
    out: dict[Key, dict[str, list[float]]] = {}
    when: dict[str, float] = {}
    for p in t.points:
        out.setdefault((p.tunnel, p.workload, p.metric), {}).setdefault(p.campaign, []).append(
            t.value(p))
        when[p.campaign] = min(when.get(p.campaign, math.inf), p.created)
    return {k: sorted((when[c], c, statistics.fmean(v)) for c, v in per.items())
            for k, per in out.items()}


def change_points(t: Trend, ser: dict[Key, list[tuple[float, str, float]]] | None = None
                  ) -> list[Change]:
    """jumpavg's group boundaries in each series, as regressions/progressions."""
    import jumpavg
    ser = series(t) if ser is None else ser
    hib = {(p.tunnel, p.workload, p.metric): p.higher_is_better for p in t.points}
    out = []
    for key, pts in ser.items():
        vals = [v for _, _, v in pts]
        if len(vals) < 3 or max(vals) <= 0:
            continue
        groups = jumpavg.classify(vals)
        i = 0
        bounds = []
        for g in groups:
            bounds.append((i, i + len(g)))
            i += len(g)
        for (a0, a1), (b0, b1) in zip(bounds, bounds[1:], strict=False):
            before, after = statistics.fmean(vals[a0:a1]), statistics.fmean(vals[b0:b1])
            pct = 100.0 * (after - before) / abs(before) if before else 0.0
            better = (after > before) == hib.get(key, True)
            out.append(Change(*key, t.views[key], pts[b0][0], pts[b0][1], before, after, pct,
                              PROGRESSION if better else REGRESSION))
    return out


def to_json(t: Trend, changes: list[Change]) -> dict[str, Any]:
    hours, days = by_slot(t, "hour"), by_slot(t, "weekday")
    return {
        "format": "tunbench-trend", "format_version": 1,
        "campaigns": len({p.campaign for p in t.points}), "cases": len(t.points),
        "entries": [{"tunnel": k[0], "workload": k[1], "metric": k[2], "view": t.views[k],
                     "unit": "%" if t.views[k] == SHARE else t.units[k],
                     "by_hour": {str(h): c.__dict__ for h, c in hours.get(k, {}).items()},
                     "by_weekday": {WEEKDAYS[d]: c.__dict__ for d, c in days.get(k, {}).items()}}
                    for k in t.tracked()],
        "changes": [c.__dict__ for c in changes]}
