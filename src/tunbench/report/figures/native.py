"""Share of native with 95% CI: sorted horizontal bars, labelled with their values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from .. import data, stats
from ..data import Campaign, Scenario
from .base import Figure, Palette, _save, slug

# -- 3. % of native with 95% CI ------------------------------------------------------------

def pct_interval(r: stats.Row) -> tuple[float, float, float] | None:
    """Percent of native and the lengths of its whiskers below and above: the paired
    per-round share and its asymmetric 95% CI (stats.Row.share, the tables' figure); no
    whisker for a single round. None without a share."""
    e = r.share
    if e is None:
        return None
    if e.ci_low is None or e.ci_high is None:
        return e.mean, 0.0, 0.0
    return e.mean, e.mean - e.ci_low, e.ci_high - e.mean


def _hbar_height(n: int) -> float:
    return max(2.3, 0.9 + 0.3 * n)


def _value_label(ax: Axes, y: float, end: float, text: str) -> None:
    """A bar's value just right of its end (or whisker): readable however short the bar."""
    ax.text(end, y, f" {text}", va="center", ha="left", fontsize=7.5)


def pct_native_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    """Horizontal bars sorted by share, each labelled with its value next to its end, so a
    tunnel at 2% of native is as readable as one at 100%."""
    for wl in c.workloads():
        metric = data.headline_metric(c, wl)
        if metric is None:
            continue
        entries: list[tuple[str, Scenario, float, float, float]] = []
        scens = [s for s in c.scenarios() if s[0] == wl]
        for scen in scens:
            base = c.native_row(scen, metric)
            if base is None or not base.stats.mean:
                continue
            for tun in c.tunnels():
                r = c.row(tun, scen, metric)
                if r is not None and stats.is_reference(r):
                    entries.append((tun, scen, 100.0, 0.0, 0.0))   # the reference
                elif r is not None and (got := pct_interval(r)) is not None:
                    entries.append((tun, scen, *got))
        if len(entries) < 2:
            continue
        higher = next((r.higher_is_better for r in c.rows
                       if r.workload == wl and r.metric == metric), True)
        entries.sort(key=lambda e: -e[2] if higher else e[2])   # best first, top down
        fig, ax = plt.subplots(figsize=(6.0, _hbar_height(len(entries))),
                               layout="constrained")
        # the scale follows the shares, not the CIs: two repeats give t = 12.7 and whiskers
        # that would squeeze every bar into the left edge; a cut whisker ends in an arrow
        top = max(110.0, max(e[2] for e in entries) * 1.25)
        cut = False
        labels = []
        for i, (tun, scen, pct, below, half) in enumerate(entries):
            if c.is_reference(tun):   # the reference (100%), not a measurement
                ax.barh(i, pct, color="white", edgecolor=pal(tun), hatch="//", height=0.7)
                ax.text(pct / 2, i, "reference", ha="center", va="center", fontsize=7)
                _value_label(ax, i, pct, f"{pct:.0f}%")
            else:
                ax.barh(i, pct, color=pal(tun), height=0.7)
                hi = min(pct + half, top * 0.86)
                ax.errorbar(pct, i, xerr=[[below], [hi - pct]], color="k", capsize=3,
                            lw=0.9)
                if hi < pct + half:
                    cut = True
                    ax.annotate("", (hi + top * 0.03, i), (hi, i),
                                arrowprops={"arrowstyle": "->", "lw": 0.9})
                text = f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"
                if not higher and pct >= 150:    # a delay or cost many times native's
                    text += f" ({pct / 100:.1f}× native)"
                _value_label(ax, i, hi + (top * 0.03 if hi < pct + half else 0), text)
            labels.append(tun if len(scens) == 1 else f"{tun} · MTU {scen[1]}"
                          + ("" if scen[2] == "default" else f" · {scen[2]}"))
        ax.axvline(100, color="k", lw=0.8, ls=":")
        ax.set_yticks(range(len(entries)), labels)
        ax.invert_yaxis()
        ax.grid(False, axis="y")
        ax.set_xlim(0, top)
        name = c.display(metric)
        ax.set_xlabel(f"{name} (% of native)")
        title = f"{name} as % of native ({wl})"
        ax.set_title(title)
        yield _save(fig, out, slug("pct-native", wl, metric), title,
                    "Paired per round: the geometric mean of each round's value over native's in "
                    "that round (the tables' and the summary's figure), "
                    + ("highest" if higher else "closest to native") + " first; "
                    "whiskers: its 95% CI on the log scale (asymmetric, never below 0)"
                    + ("; an arrow marks a whisker cut at the edge" if cut else "")
                    + ". Native is the reference (100%, hatched), not a measurement.")
