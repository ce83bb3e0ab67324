"""An aggregating kind's flush-timeout trade-off (report/tradeoff.py; agg): one panel per
metric against the flush timeout (0 = no aggregation), native and the kind's baseline (agg:
kernel VXLAN) of the same run as horizontal reference lines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from matplotlib.ticker import EngFormatter

from .. import tradeoff
from ..data import Campaign
from .base import Figure, Palette, _grid, _save, slug


def tradeoff_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for t in tradeoff.find(c):
        panels = [(k, title, unit) for k, title, unit, _ in tradeoff.METRICS
                  if any(k in v.values for v in t.aggs)]
        if not panels:
            continue
        fig, axes = _grid(len(panels), 3.8, 2.8)
        xs_all = sorted({v.flush_us or 0 for v in t.aggs})
        color = pal(t.aggs[0].label)
        for ax, (key, title, unit) in zip(axes, panels):
            lat = key.startswith("add_")
            load = f"one-way at {t.load_pct:g}%" if t.load_pct is not None else "loaded"
            second = (t.loaded(key), "--", f"{t.kind}, {load}") if lat else \
                ("dp_cpu", "--", f"{t.kind}, {t.daemon} only") if key == "cpu" else None
            for k, style, name in ((key, "-", f"{t.kind}, {t.rtt} idle" if lat
                                    else f"{t.kind}, host" if key == "cpu" else t.kind),
                                   *([second] if second else [])):
                pts = [(v.flush_us or 0, v.values[k]) for v in t.aggs if k in v.values]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                            ms=4, color=color, label=name)
                for ref in t.refs if lat or k == key else ():
                    if k in ref.values:
                        ax.axhline(ref.values[k], ls=style if k != key else ":",
                                   color=pal(ref.label), lw=1.2,
                                   label=ref.label + (f", {load}" if k != key else ""))
            # symlog: 0 (no aggregation) and 50..1000 µs on one readable axis
            ax.set_xscale("symlog", linthresh=max(1, min([x for x in xs_all if x] or [1])))
            ax.set_xticks(xs_all, [str(x) for x in xs_all])
            ax.set_xlim(0, max(xs_all) * 1.3 or 1)
            ax.minorticks_off()
            ax.set_xlabel("flush timeout (µs)")
            ax.set_ylabel(unit)
            if key == "pps":
                ax.yaxis.set_major_formatter(EngFormatter(sep=" "))
            if not key.startswith("add_"):
                ax.set_ylim(bottom=0)
            ax.set_title(title)
            ax.legend(loc="best", fontsize=6.5)
        where = f"MTU {t.mtu}" + ("" if t.offloads == "default" else f", offloads {t.offloads}")
        what = f"{t.size} B inner UDP, " if t.size else ""
        title = f"{t.kind} flush-timeout trade-off ({what}{where})"
        fig.suptitle(title)
        refs = " and ".join(r.label for r in t.refs) or "none"
        cap = tradeoff.caption(t) + (f" Dotted lines: {refs} (idle); dashed: the "
                                     "same at the loaded trial; in the CPU panel, dashed: "
                                     f"{t.daemon}'s own CPU.")
        yield _save(fig, out, slug(f"{t.kind}-tradeoff", t.mtu, t.offloads), title, cap)
