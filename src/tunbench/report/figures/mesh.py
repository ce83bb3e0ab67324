"""The mesh grids as heat maps (report/mesh.py computes them): one figure per workload, MTU
and tunnel, each cell the share of native of that pair with its value written in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .. import mesh
from ..data import Campaign
from .base import Figure, Palette, _save, slug


def mesh_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for g in mesh.grids(c):
        n = len(g.sites)
        grid = np.full((n, n), np.nan)
        for (a, b), cell in g.cells.items():
            if cell.share is not None:
                grid[g.sites.index(a), g.sites.index(b)] = cell.share
        fig, ax = plt.subplots(figsize=(1.1 * n + 2.2, 1.0 * n + 1.2), layout="constrained")
        im = ax.imshow(grid, cmap=mesh.CMAP, vmin=mesh.SCALE[0], vmax=mesh.SCALE[1])
        ax.grid(False)
        ax.set_xticks(range(n), g.sites)
        ax.set_yticks(range(n), g.sites)
        ax.set_xlabel("receiving site")
        ax.set_ylabel("sending site")
        for (a, b), cell in g.cells.items():
            i, j = g.sites.index(a), g.sites.index(b)
            text = "failed" if cell.share is None and cell.failed else (
                "–" if cell.share is None else f"{cell.share:.0f}%")
            ax.text(j, i, text, ha="center", va="center", fontsize=9)
        for k in range(n):
            ax.text(k, k, "–", ha="center", va="center", color="#888")
        fig.colorbar(im, ax=ax, label="% of native (same pair, same round)")
        ttl = mesh.title(g, c)
        ax.set_title(ttl, fontsize=9)
        yield _save(fig, out, slug("mesh", g.tunnel, g.workload, g.mtu), ttl,
                    f"Rows send, columns receive; {mesh.worst_text(g)}.")
