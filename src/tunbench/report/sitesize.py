"""Site size in cores: how each method scales with the cores its sites may use.

A campaign on the `cpus_per_site` axis (testbed/sitecores.py) measures every method at each
core count in the same round. Per workload (its base), MTU and offload variant, one row per
method: its headline figure (throughput) and its CPU per Gbit/s at each count, and how well
it scales: its figure at the fewest cores as a share of its figure at the most, paired per
round (each round's ratio, the geometric mean over rounds, and the lowest-highest round).
A method that needs more than one core's worth of work keeps a low share; one bound by
something other than the CPU (one flow's serial path, the wire) keeps near 100 %.

The layout (testbed/sitecores.py, one per campaign) is read from each case's
`testbed.cores`: "shared" (both sites on the same lowest k CPUs at every count: the axis
varies capacity) or "apart" (each site on CPUs of its own at every count); a campaign
recorded before the layout was one per campaign may mix them, and the section says so.

Pure over the typed case records (the count is the case's `cpus_per_site`, named into the
workload by results/records.name_cores).
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass, field
from typing import Any

from ..results.records import CORES, CaseRecord
from .axes import by_method, paired_share, share_text, table_html, where
from .data import Campaign

CPU = "cpu_per_gbit"


@dataclass
class MethodScaling:
    tunnel: str
    # core count -> values over rounds, of the headline figure and of CPU per Gbit/s
    head: dict[int, list[float]] = field(default_factory=dict)
    cpu: dict[int, list[float]] = field(default_factory=dict)
    # round -> core count -> headline value (for the paired ratio)
    by_round: dict[Any, dict[int, float]] = field(default_factory=dict)

    def share(self, low: int, high: int) -> tuple[float, float, float, int] | None:
        """(geometric mean, lowest, highest, n) of value(low)/value(high) over the rounds
        that measured both; None without one."""
        return paired_share((r[low], r[high]) for r in self.by_round.values()
                            if low in r and high in r)


@dataclass
class Scaling:
    workload: str        # the base workload ('stream')
    mtu: int
    offloads: str
    metric: str          # the headline figure
    unit: str
    cores: list[int]
    methods: list[MethodScaling]
    # core count -> the layouts its cases recorded ("apart"/"shared"), and why (the record's)
    layouts: dict[int, set[str]] = field(default_factory=dict)
    reasons: set[str] = field(default_factory=set)

    @property
    def layout(self) -> str:
        """'apart', 'shared', 'mixed' (layouts differ between counts: a campaign recorded
        before one layout per campaign) or '' (not recorded)."""
        found = {lay for lays in self.layouts.values() for lay in lays}
        return found.pop() if len(found) == 1 else ("mixed" if found else "")

    def layout_text(self) -> str:
        """One sentence saying which layout the cases ran in and why."""
        lay = self.layout
        if lay in ("apart", "shared"):
            why = "; ".join(sorted(self.reasons))
            return f"Layout: {lay}" + (f" ({why})." if why else ".")
        if lay == "mixed":
            per = ", ".join(f"{'/'.join(sorted(self.layouts[k]))} at {k}"
                            for k in sorted(self.layouts))
            return (f"Layout: mixed ({per}): recorded before one layout per campaign, so "
                    "the counts differ in layout as well as capacity.")
        return "Layout: not recorded."


def cores_of(r: CaseRecord) -> int | None:
    k = r.doc.get("case", {}).get(CORES) if r.doc else None
    if not isinstance(k, int) or isinstance(k, bool):
        k = r.workload.params.get(CORES)
    return k if isinstance(k, int) and not isinstance(k, bool) else None


def layout_of(r: CaseRecord) -> tuple[str, str]:
    """(layout, reason) a case recorded in testbed.cores; an older record without a
    layout: from its `apart` flag, no reason ('' when neither)."""
    rec = (r.doc or {}).get("testbed", {}).get("cores") or {}
    lay = rec.get("layout")
    if isinstance(lay, str):
        return lay, str(rec.get("layout_reason", ""))
    if isinstance(rec.get("apart"), bool):
        return ("apart" if rec["apart"] else "shared"), ""
    return "", ""


def scalings(c: Campaign) -> list[Scaling]:
    """One Scaling per (base workload, MTU, offloads) measured at two or more core counts."""
    out = []
    for g, ks, cases in by_method(c, cores_of, order=int):
        metric = g.metric
        methods = []
        layouts: dict[int, set[str]] = {}
        reasons: set[str] = set()
        for label, at in cases.items():
            m = MethodScaling(label)
            for k, r in at:
                lay, why = layout_of(r)
                if lay:
                    layouts.setdefault(k, set()).add(lay)
                if why:
                    reasons.add(why)
                v = r.value(metric)
                if v is not None:
                    m.head.setdefault(k, []).append(v)
                    pv = r.paired(metric)   # None: slowed by the host throughout
                    if pv is not None:
                        m.by_round.setdefault(r.repeat, {})[k] = pv
                cpu = r.value(CPU)
                if cpu is not None:
                    m.cpu.setdefault(k, []).append(cpu)
            methods.append(m)
        out.append(Scaling(g.workload, g.mtu, g.offloads, metric, g.unit, ks, methods,
                           layouts, reasons))
    return out


def _mean(vals: list[float] | None) -> str:
    return f"{statistics.fmean(vals):,.0f}" if vals else "-"


def _mean1(vals: list[float] | None) -> str:
    return f"{statistics.fmean(vals):,.1f}" if vals else "-"


def rows(s: Scaling) -> list[list[str]]:
    """The table of one Scaling as text cells (header first)."""
    low, high = s.cores[0], s.cores[-1]
    head = (["method"] + [f"{s.metric} at {k} ({s.unit})" for k in s.cores]
            + [f"CPU/Gbit at {k}" for k in s.cores]
            + [f"at {low} core(s) as % of at {high} (per-round range; n)"])
    out = [head]
    for m in s.methods:
        out.append([m.tunnel] + [_mean(m.head.get(k)) for k in s.cores]
                   + [_mean1(m.cpu.get(k)) for k in s.cores] + [share_text(m.share(low, high))])
    return out


def section_html(c: Campaign) -> str:
    """The report's site-size section ('' for a campaign without the cpus_per_site axis):
    each table followed by the sentence naming the layout its cases ran in and why."""
    found = scalings(c)
    if not found:
        return ""
    intro = ("<h2 id=site-size>Site size in cores</h2><p>Each site confined to that many "
             "CPUs (a cpuset cgroup per site, its underlay's receive work steered there by "
             "RPS; docs/methodology.md, \"Site size in cores\"), every method measured at "
             "each count in the same round. The figures are means over rounds; CPU/Gbit is "
             "% of a core per Gbit/s. The last column is how well the method scales: its "
             "figure at the fewest cores as a share of its figure at the most, the geometric "
             "mean of each round's ratio (lowest-highest round; n rounds).</p>")
    return intro + "".join(
        table_html(where(s.workload, s.mtu, s.offloads), rows(s))
        + f"<p class=layout>{html.escape(s.layout_text())}</p>" for s in found)
