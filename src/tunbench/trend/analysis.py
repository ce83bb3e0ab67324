"""Trend analysis over many campaigns, pure over the store's tidy rows.

Views: where a campaign measured native in the same scenario (workload, MTU, offloads), a
tunnel's value is taken as its share of that campaign's native mean ("% of native"): host
drift between campaigns cancels. Native itself, and tunnels in campaigns without native, are
shown "absolute". Each (tunnel, workload, metric) uses one view for all its points, and says
which.

Time of day: every case is one point at its start time (local time of the analysing host,
or TZ): mean, standard deviation and n per hour (0-23) and weekday (Mon-Sun).
Time series: one point per campaign (the mean of its repeats), at the campaign's start, and
one series per setup: points follow the same series only where the campaigns' fingerprints
(results/fingerprint.py, the one compare checks) agree on what shapes this tunnel's and
workload's figures (testbed, underlay shaping/WAN, durations, kernel, CPU, the tools' versions,
the tunnel's and workload's parameters) and the case's MTU and offloads match. A setup change
(a tbf rate, an MTU, a chain) starts a new series; it is never a regression.
Change points are where FD.io CSIT's jumpavg starts a new group within one series; each is a
regression or a progression by the metric's direction, with its size in percent of the group
before.
"""

from __future__ import annotations

import hashlib
import json
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
    setup: str = ""       # Setup.id: the fingerprint this point's series follows


@dataclass(frozen=True)
class Cell:
    mean: float
    std: float
    n: int


@dataclass(frozen=True)
class Setup:
    """What a series holds fixed: the fingerprint fields that shape one tunnel's and
    workload's figures, with the case's MTU and offloads. id: a short hash of them."""
    id: str
    label: str            # e.g. "mtu 1500, default offloads, rate 200mbit"
    fields: str           # the canonical JSON the id hashes


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
    setup: str = ""       # the id of the series (Setup) both groups belong to


@dataclass
class Trend:
    points: list[Point]
    views: dict[Key, str] = field(default_factory=dict)
    units: dict[Key, str] = field(default_factory=dict)
    setups: dict[str, Setup] = field(default_factory=dict)

    def tracked(self) -> list[Key]:
        return list(self.views)

    def value(self, p: Point) -> float:
        key = (p.tunnel, p.workload, p.metric)
        if self.views[key] == SHARE and p.share is not None:
            return p.share
        return p.value


SETUP_KEYS = ("testbed", "underlay", "duration", "warmup", "kernel", "cpu_model", "cpus")


def _entry(entries: dict[str, Any], label: str, field_: str, value: str) -> Any:
    """A tunnel's (workload's) fingerprint entry: by its label, else every entry of its
    kind (name), the store keeping a workload by name and a tunnel by display name."""
    if label in entries:
        return entries[label]
    same = [entries[k] for k in sorted(entries) if entries[k].get(field_) == value]
    return same[0] if len(same) == 1 else same


def setup_of(fp: dict[str, Any] | None, p: Point) -> Setup:
    """The Setup of a point from its campaign's fingerprint (store.query.fingerprints)."""
    from ..results import fingerprint
    fp = fp or {}
    tunnel = _entry(fp.get("tunnels") or {}, p.tunnel, "kind", p.kind)
    workload = _entry(fp.get("workloads") or {}, p.workload, "name", p.workload)
    wl_name = workload.get("name", p.workload) if isinstance(workload, dict) else p.workload
    tools = set(fingerprint._kind_tools(p.kind)) | set(fingerprint._workload_tools(wl_name))
    fields = {**{k: fp.get(k) for k in SETUP_KEYS}, "tunnel": tunnel, "workload": workload,
              "tools": {t: v for t, v in sorted((fp.get("tools") or {}).items())
                        if t in tools},
              "mtu": p.mtu, "offloads": p.offloads}
    text = json.dumps(fields, sort_keys=True, default=str)
    under = ", ".join(f"{k.replace('_', ' ')} {fingerprint.show(v)}"
                      for k, v in (fp.get("underlay") or {}).items() if v)
    label = ", ".join(x for x in (f"mtu {p.mtu}", f"{p.offloads or 'default'} offloads",
                                  under, f"testbed {fp.get('testbed') or 'local'}") if x)
    return Setup(hashlib.sha256(text.encode()).hexdigest()[:8], label, text)


def points_from_rows(rows: list[dict[str, Any]],
                     fingerprints: dict[str, dict[str, Any]] | None = None,
                     setups: dict[str, Setup] | None = None) -> list[Point]:
    """Tidy rows (store.query.rows) as points, with the share of the campaign's native mean
    and the setup (from the campaign's fingerprint) whose series each point follows."""
    pts = [Point(str(r["campaign"]), float(r["campaign_created"] or r["started"] or 0),
                 float(r["started"] or r["campaign_created"] or 0), str(r["tunnel"]),
                 str(r["kind"]), str(r["workload"]), int(r["mtu"] or 0),
                 str(r["offloads"] or ""), str(r["metric"]), str(r["unit"] or ""),
                 bool(r["higher_is_better"]), float(r["value"]))
           for r in rows if r.get("value") is not None and r.get("status", "ok") == "ok"]
    for p in pts:
        s = setup_of((fingerprints or {}).get(p.campaign), p)
        p.setup = s.id
        if setups is not None:
            setups[s.id] = s
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


def build(rows: list[dict[str, Any]], *, absolute: bool = False,
          fingerprints: dict[str, dict[str, Any]] | None = None) -> Trend:
    """fingerprints: each campaign's (store.query.fingerprints), by campaign path."""
    setups: dict[str, Setup] = {}
    pts = points_from_rows(rows, fingerprints, setups)
    t = Trend(pts, setups=setups)
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


SeriesKey = tuple[str, str, str, str]   # tunnel, workload, metric, setup id


def series(t: Trend) -> dict[SeriesKey, list[tuple[float, str, float]]]:
    """Per key and setup, (campaign start, campaign, mean of its cases) in time order: one
    series per setup, so only like is compared with like (a campaign's cases at two MTUs are
    two series)."""
    out: dict[SeriesKey, dict[str, list[float]]] = {}
    when: dict[str, float] = {}
    for p in t.points:
        out.setdefault((p.tunnel, p.workload, p.metric, p.setup), {}).setdefault(
            p.campaign, []).append(t.value(p))
        when[p.campaign] = min(when.get(p.campaign, math.inf), p.created)
    return {k: sorted((when[c], c, statistics.fmean(v)) for c, v in per.items())
            for k, per in out.items()}


def change_points(t: Trend, ser: dict[SeriesKey, list[tuple[float, str, float]]] | None = None
                  ) -> list[Change]:
    """jumpavg's group boundaries within each series (one setup), as regressions or
    progressions; a series of fewer than 3 campaigns is drawn, never flagged."""
    import jumpavg
    ser = series(t) if ser is None else ser
    hib = {(p.tunnel, p.workload, p.metric): p.higher_is_better for p in t.points}
    out = []
    for skey, pts in ser.items():
        key, setup = skey[:3], skey[3]
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
                              PROGRESSION if better else REGRESSION, setup))
    return out


def to_json(t: Trend, changes: list[Change]) -> dict[str, Any]:
    hours, days = by_slot(t, "hour"), by_slot(t, "weekday")
    return {
        "format": "tunbench-trend", "format_version": 2,
        "campaigns": len({p.campaign for p in t.points}), "cases": len(t.points),
        "entries": [{"tunnel": k[0], "workload": k[1], "metric": k[2], "view": t.views[k],
                     "unit": "%" if t.views[k] == SHARE else t.units[k],
                     "by_hour": {str(h): c.__dict__ for h, c in hours.get(k, {}).items()},
                     "by_weekday": {WEEKDAYS[d]: c.__dict__ for d, c in days.get(k, {}).items()}}
                    for k in t.tracked()],
        "setups": {s.id: {"label": s.label, "fingerprint": json.loads(s.fields)}
                   for s in t.setups.values()},
        "series": [{"tunnel": k[0], "workload": k[1], "metric": k[2], "setup": k[3],
                    "points": [{"at": at, "campaign": c, "value": v} for at, c, v in pts]}
                   for k, pts in series(t).items()],
        "changes": [c.__dict__ for c in changes]}
