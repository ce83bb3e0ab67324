"""Site size in cores: how each method scales with the cores its sites may use.

A campaign on the `cpus_per_site` axis (testbed/sitecores.py) measures every method at each
core count in the same round. Per workload (its base), MTU and offload variant, one row per
method: its headline figure (throughput) and its CPU per Gbit/s at each count, and how well
it scales: its figure at the fewest cores as a share of its figure at the most, paired per
round (each round's ratio, the geometric mean over rounds, and the lowest-highest round).
A method that needs more than one core's worth of work keeps a low share; one bound by
something other than the CPU (one flow's serial path, the wire) keeps near 100 %.

Pure over the typed case records (the count is the case's `cpus_per_site`, named into the
workload by results/records.name_cores).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..results.records import CORES, CaseRecord
from .axes import axis_section, by_method, paired_share, share_text, where
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


def cores_of(r: CaseRecord) -> int | None:
    k = r.doc.get("case", {}).get(CORES) if r.doc else None
    if not isinstance(k, int) or isinstance(k, bool):
        k = r.workload.params.get(CORES)
    return k if isinstance(k, int) and not isinstance(k, bool) else None


def scalings(c: Campaign) -> list[Scaling]:
    """One Scaling per (base workload, MTU, offloads) measured at two or more core counts."""
    out = []
    for g, ks, cases in by_method(c, cores_of, order=int):
        metric = g.metric
        methods = []
        for label, at in cases.items():
            m = MethodScaling(label)
            for k, r in at:
                v = r.value(metric)
                if v is not None:
                    m.head.setdefault(k, []).append(v)
                    m.by_round.setdefault(r.repeat, {})[k] = r.paired(metric) or v
                cpu = r.value(CPU)
                if cpu is not None:
                    m.cpu.setdefault(k, []).append(cpu)
            methods.append(m)
        out.append(Scaling(g.workload, g.mtu, g.offloads, metric, g.unit, ks, methods))
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
    """The report's site-size section ('' for a campaign without the cpus_per_site axis)."""
    return axis_section(
        "<h2 id=site-size>Site size in cores</h2><p>Each site confined to that many "
        "CPUs (a cpuset cgroup per site, its underlay's receive work steered there by "
        "RPS; docs/methodology.md, \"Site size in cores\"), every method measured at "
        "each count in the same round. The figures are means over rounds; CPU/Gbit is "
        "% of a core per Gbit/s. The last column is how well the method scales: its "
        "figure at the fewest cores as a share of its figure at the most, the geometric "
        "mean of each round's ratio (lowest-highest round; n rounds).</p>",
        ((where(s.workload, s.mtu, s.offloads), rows(s)) for s in scalings(c)))
