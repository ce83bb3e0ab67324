"""CPU: busy bars with min/max whiskers, and CPU per core with the one-core bottleneck."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from ...results.records import CaseRecord
from .. import cores
from ..data import Campaign, Scenario
from ..metrics import end, role
from .base import CPU_CEILING, Figure, Palette, _label_in_bar, _save, scen_text, slug

# -- 2. CPU bars with min/max whiskers -----------------------------------------------------

def _cpu_ends(docs: list[CaseRecord]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(site, each case's CPU record of that end): the sender and the receiver apart when
    every case ran on separate hosts (cpu.sites), else ("", the cases' records)."""
    cpus = [d.cpu for d in docs]
    if all(cpu.get("shared_by_sites") is False and cpu.get("sites") for cpu in cpus):
        names = sorted(set.intersection(*(set(cpu["sites"]) for cpu in cpus)))
        return [(n, [cpu["sites"][n] for cpu in cpus]) for n in names]
    return [("", cpus)]


def cpu_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl in c.workloads():
        scens = [s for s in c.scenarios() if s[0] == wl]
        bars: list[tuple[str, Scenario, str, float, float, float]] = []
        for scen in scens:
            for tun in c.tunnels():
                docs = [r for r in c.ok if r.scenario == scen and r.tunnel.label == tun
                        and r.cpu]
                for site, recs in _cpu_ends(docs) if docs else []:
                    avg = sum(r["busy_avg"] for r in recs) / len(recs)
                    # a sample's rounding can land past 0..100%: whiskers show what is possible
                    lo = max(min(r["busy_min"] for r in recs), 0.0)
                    hi = min(max(r["busy_max"] for r in recs), CPU_CEILING)
                    bars.append((tun, scen, site, avg, lo, hi))
        if not bars:
            continue
        fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(bars) + 1.5), 3.2),
                               layout="constrained")
        labels = []
        for i, (tun, scen, site, avg, lo, hi) in enumerate(bars):
            ax.bar(i, avg, color=pal(tun), width=0.7, hatch="//" if site == "b" else None)
            ax.errorbar(i, avg, yerr=[[max(avg - lo, 0.0)], [max(hi - avg, 0.0)]], color="k",
                        capsize=4, lw=1)
            _label_in_bar(ax, i, avg, f"{avg:.0f}%")
            labels.append((tun if len(scens) == 1 else f"{tun}\nMTU {scen[1]}"
                           + ("" if scen[2] == "default" else f"\n{scen[2]}"))
                          + (f"\n{role(site, c.direction(scen[0]))}" if site else ""))
        ax.set_xticks(range(len(bars)), labels)
        ax.set_ylim(0, 105)
        ax.set_ylabel("CPU busy (% of all cores)")
        shared = any(r.cpu.get("shared_by_sites") for r in c.ok)
        title = f"CPU utilization per tunnel ({wl})"
        ax.set_title(title)
        cap = "Bar: average busy % over the measurement and repeats; whiskers: min and max " \
              "of the 1 s samples."
        if shared:
            cap += " Both sites share this host's CPUs: this is the cost of both ends."
        if any(b[2] for b in bars):
            way = c.direction(wl)
            cap += (f" The sites are separate hosts: each end's CPU apart, the {end('a', way)} "
                    f"and the {end('b', way)} (hatched), each as % of its own host's cores.")
        yield _save(fig, out, slug("cpu", wl), title, cap)


# -- 2b. CPU per core: cores ranked per sample, and the one-core bottleneck -----------------

CORE_PARTS = (("usr", "user", "#4c78a8"), ("sys", "system", "#f58518"),
              ("softirq", "irq + softirq", "#e45756"))
MAX_RANKS = 8


def _shown_ranks(n: int) -> list[int]:
    """Which core ranks to draw: all up to MAX_RANKS, else the busiest ones and the least."""
    return list(range(n)) if n <= MAX_RANKS else [*range(MAX_RANKS - 1), n - 1]


def _core_groups(c: Campaign) -> list[tuple[Scenario, list[Scenario]]]:
    """One figure per scenario; the values of a workload sweep (stream streams=1, 4, 16)
    share one figure, keyed by the base workload."""
    groups: dict[Scenario, list[Scenario]] = {}
    for scen in c.scenarios():
        point = c.sweep_point(scen[0])
        key = (point[0], scen[1], scen[2]) if point else scen
        groups.setdefault(key, []).append(scen)
    for members in groups.values():
        members.sort(key=lambda m: (c.sweep_point(m[0]) or ("", "", 0))[2])
    return list(groups.items())


def percore_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    profs = cores.profiles(c)
    for scen, members in _core_groups(c):
        ps = [p for m in members for p in profs if p.scenario == m]
        if not ps:
            continue
        swept = len(members) > 1
        ranks = max(len(_shown_ranks(p.cores)) for p in ps)
        rows = sum(len(_shown_ranks(p.cores)) for p in ps) + len(ps)
        fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.24 * rows), layout="constrained")
        y, centers, labels = 0.0, [], []
        for p in ps:
            shown = _shown_ranks(p.cores)
            top = y
            for i in shown:
                left = 0.0
                for key, name, color in CORE_PARTS:
                    v = p.parts[i][key]
                    ax.barh(y, v, left=left, height=0.8, color=color,
                            label=name if (p is ps[0] and i == 0) else None)
                    left += v
                rank = "busiest" if i == 0 else ("least busy" if i == p.cores - 1
                                                 else f"#{i + 1}")
                ax.text(101, y, f"{p.busy[i]:.0f}% {rank}", va="center", fontsize=7)
                y += 1
            centers.append((top + y - 1) / 2)
            b = cores.bottleneck(p)
            point = c.sweep_point(p.scenario[0]) if swept else None
            labels.append(p.tunnel + (f" · {point[1]}={point[2]}" if point else "")
                          + (f"\n{p.end}" if p.site else "")
                          + ("\n⚠ one core" if b else ""))
            y += 1
        ax.set_yticks(centers, labels)
        for t, p in zip(ax.get_yticklabels(), ps):
            t.set_color(pal(p.tunnel))   # type: ignore[arg-type]
        ax.invert_yaxis()
        ax.set_xlim(0, 130)
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.set_xlabel("busy (% of one core)")
        ax.grid(False, axis="y")
        fig.legend(loc="outside lower center", ncols=3, fontsize=7)
        shared = any(p.shared_by_sites for p in ps)
        title = f"CPU per core ({scen_text(scen, c)})"
        ax.set_title(title)
        cap = (f"Each tunnel's cores ranked by how busy they were in each 1 s sample (busiest "
               f"first; threads move between cores), averaged over samples and repeats; "
               f"split into user, system and irq + softirq time. ⚠ marks one core at "
               f"≥{cores.SATURATED:.0f}% while another stayed ≥{cores.ROOM:.0f} points lower.")
        if ranks < max(p.cores for p in ps):
            cap += f" Over {MAX_RANKS} cores: the busiest {MAX_RANKS - 1} and the least busy."
        if shared:
            cap += " Both sites share this host's cores: the bars are both ends together."
        elif any(p.site for p in ps):
            way = ps[0].direction
            cap += (" The sites are separate hosts: each end's cores apart, the "
                    f"{end('a', way)} and the {end('b', way)}.")
        yield _save(fig, out, slug("cores", *scen), title, cap)
