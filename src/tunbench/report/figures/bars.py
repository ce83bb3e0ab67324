"""Bars by tunnel for selected metrics (line rate, NDR/PDR, latency under load), and every
other metric, so new workloads show up without code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from matplotlib.ticker import EngFormatter

from .. import data
from ..data import Campaign
from .base import (
    CPU_CEILING,
    MAX_PANELS,
    Figure,
    Palette,
    _ceiling,
    _grid,
    _grouped,
    _save,
    scen_text,
    slug,
)

# -- 7. bars by tunnel for selected metrics (line rate, NDR/PDR, latency under load) -------

def line_rate_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for scen in c.scenarios():
        rows = [r for r in c.rows if (r.workload, r.mtu, r.offloads) == scen
                and data.is_line_rate(r.metric, r.unit) and not data.is_point(c, r.metric)]
        for metric in dict.fromkeys(r.metric for r in rows):
            mrows = [r for r in rows if r.metric == metric]
            cpu = [c.row(r.tunnel, scen, "cpu_busy") for r in mrows]
            panels = 2 if any(cpu) else 1
            fig, axes = _grid(panels, 4.2, 3.0)
            vals = {("", r.tunnel): r.stats for r in mrows}
            _grouped(axes[0], c, pal, [""], vals)
            axes[0].set_ylabel(f"{metric} ({mrows[0].unit})")
            axes[0].set_ylim(0, max(105, max(r.stats.ci95_high for r in mrows) * 1.05))
            axes[0].legend(loc="best")
            axes[0].set_title("share of line rate")
            if panels == 2:
                _grouped(axes[1], c, pal, [""], {("", r.tunnel): r.stats for r in cpu if r},
                         CPU_CEILING)
                axes[1].set_ylabel("CPU busy (% of all cores)")
                axes[1].set_title("CPU")
            title = f"Percent of line rate ({scen_text(scen, c)})"
            fig.suptitle(title)
            yield _save(fig, out, slug("line-rate", metric, *scen), title,
                        "Mean over repeats; whiskers: 95% CI.")


def ndr_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for scen in c.scenarios():
        srows = [r for r in c.rows if (r.workload, r.mtu, r.offloads) == scen]
        nd = data.ndr_metrics(c, (r.metric for r in srows))
        loaded = [r for r in srows if data.is_under_load(r.metric)]
        if not nd and not loaded:
            continue
        units = {r.metric: r.unit for r in srows if r.metric in nd}
        # one panel per kind and unit: pps and Mbit/s never share an axis
        panels_nd = sorted({(k, units[m]) for m, (k, _) in nd.items()},   # packets first
                           key=lambda ku: ("packets" not in ku[1] and "pps" not in ku[1],
                                           ku[1], ku[0]))
        panels = len(panels_nd) + (1 if loaded else 0)
        fig, axes = _grid(panels, 4.6, 3.0)
        for ax, (kind, unit) in zip(axes, panels_nd):
            mine = {m: sz for m, (k, sz) in nd.items()
                    if k == kind and units[m] == unit}
            sizes = sorted(set(mine.values()), key=data.size_order)
            vals = {(mine[r.metric], r.tunnel): r.stats for r in srows if r.metric in mine}
            _grouped(ax, c, pal, sizes, vals)
            ax.set_ylabel(f"{kind.upper()} ({unit})")
            if "packets" in unit or "pps" in unit:
                ax.yaxis.set_major_formatter(EngFormatter(sep=" "))   # 1.5 M, not 1e6
            ax.set_xlabel("frame size (bytes) / mix")
            ax.set_title(f"{kind.upper()}: " + ("no drop" if kind == "ndr" else "partial drop")
                         + f" rate, {unit}")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6))
        if loaded:
            ax = axes[-1]
            names = list(dict.fromkeys(r.metric for r in loaded))
            _grouped(ax, c, pal, names, {(r.metric, r.tunnel): r.stats for r in loaded})
            ax.set_ylabel(f"latency ({loaded[0].unit})")
            ax.set_title("latency under load")
        title = f"NDR/PDR and latency under load ({scen_text(scen, c)})"
        fig.suptitle(title)
        yield _save(fig, out, slug("ndr", *scen), title,
                    "Mean over repeats per frame size and IMIX; whiskers: 95% CI.")


# -- 8. every other metric, so new workloads show up without code ---------------------------

SHOWN_ELSEWHERE = ("cpu_busy",)


def other_metric_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl in c.workloads():
        head = data.headline_metric(c, wl)
        rows = [r for r in c.rows if r.workload == wl and not data.is_point(c, r.metric)]
        nd = data.ndr_metrics(c, (r.metric for r in rows))
        metrics = [m for m in dict.fromkeys(r.metric for r in rows)
                   if m not in SHOWN_ELSEWHERE and m not in nd and m != head
                   and not data.is_line_rate(m, "") and not data.is_under_load(m)]
        if not metrics:
            continue
        metrics = metrics[:MAX_PANELS]
        mtus = c.mtus(wl)
        fig, axes = _grid(len(metrics), 3.4, 2.5)
        for ax, metric in zip(axes, metrics):
            mrows = [r for r in rows if r.metric == metric]
            groups = [f"MTU {m}" for m in mtus] if len(mtus) > 1 else [""]
            vals = {((f"MTU {r.mtu}" if len(mtus) > 1 else ""), r.tunnel): r.stats
                    for r in mrows if r.offloads == mrows[0].offloads}
            _grouped(ax, c, pal, groups, vals, _ceiling(c, metric, mrows[0].unit))
            ax.set_title(c.display(metric))
            ax.set_ylabel(c.unit_label(metric, mrows[0].unit))
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6))
        title = f"Other metrics of {wl}"
        fig.suptitle(title)
        yield _save(fig, out, slug("metrics", wl), title,
                    "Every further metric the workload recorded: mean over repeats per tunnel; "
                    "whiskers: 95% CI.")
