"""What every figure family shares: the matplotlib setup, the Figure record, the tunnel
palette, saving with the overlap check, grids, whiskers and grouped bars."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from .. import stats
from ..data import Campaign, Scenario

matplotlib.rcParams.update({
    "svg.fonttype": "none", "svg.hashsalt": "tunbench", "font.size": 9,
    "axes.titlesize": 10, "figure.titlesize": 11, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "legend.fontsize": 8,
    # the figure's dpi is the saved one: _save lays a figure out once, at the size it is saved
    "figure.dpi": 110, "savefig.dpi": 110, "savefig.bbox": "tight",
})
MAX_PANELS = 12


@dataclass(frozen=True)
class Figure:
    name: str        # file stem under report/
    title: str
    caption: str
    png: Path
    svg: Path
    overlaps: tuple[str, ...] = ()   # tick labels that ran into a neighbour (should be none)


class Palette:
    """One colour per tunnel label, stable across every figure of a report."""

    def __init__(self, labels: list[str]) -> None:
        cmap = matplotlib.colormaps["tab10"]
        self.colors = {t: cmap(i % 10) for i, t in enumerate(labels)}

    def __call__(self, label: str) -> tuple[float, ...]:
        return tuple(self.colors.get(label, (0.4, 0.4, 0.4, 1.0)))


def scen_text(scen: Scenario, c: Campaign) -> str:
    wl, mtu, off = scen
    parts = [wl]
    if len(c.mtus()) > 1 or mtu != 1500:
        parts.append(f"MTU {mtu}")
    if off != "default":
        parts.append(f"offloads {off}")
    return ", ".join(parts)


def slug(*parts: object) -> str:
    text = "-".join(str(p) for p in parts if p not in ("", None, "default"))
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def _collisions(labels: list[Text], renderer: Any) -> list[str]:
    """Neighbouring tick labels that touch: boxes intersecting for level text; for slanted
    text, anchors closer than the text's height across the slant."""
    shown = [t for t in labels if t.get_visible() and t.get_text()]
    out = []
    for a, b in zip(shown, shown[1:]):
        ea, eb = a.get_window_extent(renderer), b.get_window_extent(renderer)
        angle = abs(a.get_rotation()) % 180
        if angle < 1:
            inter = Bbox.intersection(ea, eb)
            hit = inter is not None and inter.width > 1 and inter.height > 1
        else:
            pa = a.get_transform().transform(a.get_position())
            pb = b.get_transform().transform(b.get_position())
            line = float(a.get_fontsize()) * a.figure.dpi / 72   # px
            gap = max(abs(pb[0] - pa[0]), abs(pb[1] - pa[1]))
            hit = gap * math.sin(math.radians(angle)) < line * 0.95
        if hit:
            out.append(f"{a.get_text()}|{b.get_text()}")
    return out


def overlapping_ticks(fig: MplFigure, fix: bool = False) -> tuple[str, ...]:
    """Tick labels of the drawn figure that run into a neighbour ('a|b' pairs): the check
    behind "no overlapping tick labels". With fix, an axis whose x labels collide gets them
    slanted (right-aligned on their tick), and y labels a smaller font, before checking.
    The figure is laid out and its text measured, not rasterized (draw_without_rendering)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()   # type: ignore[attr-defined]
    if fix:
        changed = False
        for ax in fig.axes:
            if ax.get_visible() and _collisions(ax.get_xticklabels(), renderer):
                ax.tick_params(axis="x", labelrotation=35, labelsize=7)
                for t in ax.get_xticklabels():
                    t.set_horizontalalignment("right")
                    t.set_rotation_mode("anchor")
                changed = True
            if ax.get_visible() and _collisions(ax.get_yticklabels(), renderer):
                ax.tick_params(axis="y", labelsize=6.5)
                changed = True
        if changed:
            fig.draw_without_rendering()
    found: list[str] = []
    for ax in fig.axes:
        if ax.get_visible():
            found += _collisions(ax.get_xticklabels(), renderer)
            found += _collisions(ax.get_yticklabels(), renderer)
    return tuple(found)


def _save(fig: MplFigure, out: Path, name: str, title: str, caption: str) -> Figure:
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / f"{name}.png", out / f"{name}.svg"
    overlaps = overlapping_ticks(fig, fix=True)
    # the check laid the figure out (constrained layout) and measured it: both files keep that
    # layout and its tight box (savefig would lay it out and measure it again for each file,
    # twice the work of the check)
    renderer = fig.canvas.get_renderer()   # type: ignore[attr-defined]
    box = fig.get_tightbbox(renderer).padded(matplotlib.rcParams["savefig.pad_inches"])
    fig.set_layout_engine(None)   # None, not "none": savefig draws a figure with an engine twice
    fig.savefig(png, bbox_inches=box)
    fig.savefig(svg, bbox_inches=box, metadata={"Date": None})
    plt.close(fig)
    return Figure(name, title, caption, png, svg, overlaps)


def _grid(n: int, width: float = 3.6, height: float = 2.6) -> tuple[MplFigure, list[Axes]]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols + 0.6, height * rows + 0.6),
                             squeeze=False, layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


CPU_CEILING = 100.0   # % of all cores: a whisker above it would show the impossible


def _err(s: stats.Summary, upper: float | None = None) -> tuple[float, float]:
    """CI half-widths; the lower one clipped at zero for non-negative data (counts, %), the
    upper one at `upper` where the quantity cannot exceed it (CPU busy, % of all cores)."""
    low = max(s.ci95_low, 0.0) if s.min >= 0 else s.ci95_low
    high = min(s.ci95_high, upper) if upper is not None else s.ci95_high
    return (s.mean - low, max(high - s.mean, 0.0))


def _ceiling(c: Campaign, metric: str, unit: str) -> float | None:
    return CPU_CEILING if c.unit_label(metric, unit) == "% of all cores" else None


def _label_in_bar(ax: Axes, x: float, height: float, text: str) -> None:
    if height > 0:
        ax.text(x, height / 2, text, ha="center", va="center", fontsize=7, color="white",
                fontweight="bold")


def _own_scale(tops: list[float]) -> bool:
    """One shared linear axis flattens the small curves when the largest is over 8x the
    smallest (native at 10 Gbit/s next to wireguard-go at 0.2)."""
    pos = [t for t in tops if t > 0]
    return len(pos) > 1 and max(pos) / min(pos) > 8



def _grouped(ax: Axes, c: Campaign, pal: Palette, groups: list[str],
             values: dict[tuple[str, str], stats.Summary], upper: float | None = None) -> None:
    tuns = [t for t in c.tunnels() if any((g, t) in values for g in groups)]
    width = 0.8 / max(len(tuns), 1)
    for j, tun in enumerate(tuns):
        for i, g in enumerate(groups):
            s = values.get((g, tun))
            if s is None:
                continue
            x = i - 0.4 + width * (j + 0.5)
            ax.bar(x, s.mean, width * 0.92, color=pal(tun), label=tun if i == 0 else None)
            lo, hi = _err(s, upper)
            ax.errorbar(x, s.mean, yerr=[[lo], [hi]], color="k", capsize=2, lw=0.8)
    if groups == [""]:   # one group: name the bars instead
        ax.set_xticks([-0.4 + width * (j + 0.5) for j in range(len(tuns))], tuns)
        ax.grid(False, axis="x")
    else:
        ax.set_xticks(range(len(groups)), groups)
