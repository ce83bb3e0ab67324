"""Figures of a campaign as PNG and SVG (matplotlib, Agg), each drawn only when its data exists.

`render(campaign, out_dir)` returns the figures it drew, in reading order. Every function
here takes a Campaign and returns zero or more figures; none of them fails on absent data.

One module per figure family (base.py: what they share); this package re-exports what the
rest of tunbench and its tests use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")   # before any module below imports pyplot
from ..data import Campaign  # noqa: E402
from .axes import rate_figures  # noqa: E402
from .bars import line_rate_figures, ndr_figures, other_metric_figures  # noqa: E402
from .base import (  # noqa: E402
    CPU_CEILING,
    MAX_PANELS,
    Figure,
    Palette,
    _ceiling,
    _err,
    overlapping_ticks,
    scen_text,
    slug,
)
from .cdf import cdf_figures  # noqa: E402
from .cpu import cpu_figures, percore_figures  # noqa: E402
from .distance import distance_figures  # noqa: E402
from .mesh import mesh_figures  # noqa: E402
from .mtu import mtu_figures  # noqa: E402
from .native import pct_interval, pct_native_figures  # noqa: E402
from .series import series_figures  # noqa: E402
from .sweeps import sweep_figures  # noqa: E402
from .tradeoff import tradeoff_figures  # noqa: E402

FIGURES: tuple[Callable[[Campaign, Path, Palette], Iterator[Figure]], ...] = (
    pct_native_figures, series_figures, cpu_figures, percore_figures, mtu_figures, cdf_figures,
    sweep_figures, tradeoff_figures, line_rate_figures, ndr_figures, other_metric_figures,
    mesh_figures, distance_figures, rate_figures)


def render(c: Campaign, out: Path) -> list[Figure]:
    pal = Palette(c.tunnels())
    figs: list[Figure] = []
    for fn in FIGURES:
        figs.extend(fn(c, out, pal))
    return figs


__all__ = [
    "CPU_CEILING",
    "FIGURES",
    "Figure",
    "MAX_PANELS",
    "Palette",
    "_ceiling",
    "_err",
    "cdf_figures",
    "cpu_figures",
    "distance_figures",
    "line_rate_figures",
    "mtu_figures",
    "ndr_figures",
    "other_metric_figures",
    "overlapping_ticks",
    "pct_interval",
    "pct_native_figures",
    "percore_figures",
    "rate_figures",
    "render",
    "scen_text",
    "series_figures",
    "slug",
    "sweep_figures",
    "tradeoff_figures",
]
