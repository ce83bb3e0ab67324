"""The headline metric by underlay MTU, grouped bars."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt

from .. import data
from ..data import Campaign
from .base import Figure, Palette, _err, _save, slug

# -- 4. MTU grouped bars -------------------------------------------------------------------

def mtu_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl in c.workloads():
        mtus = c.mtus(wl)
        metric = data.headline_metric(c, wl)
        if len(mtus) < 2 or metric is None:
            continue
        offs = list(dict.fromkeys(s[2] for s in c.scenarios() if s[0] == wl))
        for off in offs:
            tuns = [t for t in c.tunnels() if any(c.row(t, (wl, m, off), metric) for m in mtus)]
            fig, ax = plt.subplots(figsize=(max(4.5, 1.3 * len(tuns) + 2), 3.3),
                                   layout="constrained")
            width = 0.8 / len(mtus)
            for j, mtu in enumerate(mtus):
                for i, tun in enumerate(tuns):
                    r = c.row(tun, (wl, mtu, off), metric)
                    if r is None:
                        continue
                    x = i - 0.4 + width * (j + 0.5)
                    ax.bar(x, r.stats.mean, width * 0.92, color=pal(tun),
                           alpha=0.45 + 0.55 * j / max(len(mtus) - 1, 1),
                           hatch="" if j == 0 else "//", edgecolor="white",
                           label=f"MTU {mtu}" if i == 0 else None)
                    ax.errorbar(x, r.stats.mean, yerr=[[_err(r.stats)[0]], [_err(r.stats)[1]]],
                                color="k", capsize=3, lw=1)
            ax.set_xticks(range(len(tuns)), tuns)
            unit = next(r.unit for r in c.rows if r.metric == metric and r.workload == wl)
            ax.set_ylabel(f"{metric} ({unit})")
            leg = ax.legend(title="underlay MTU", loc="upper left", bbox_to_anchor=(1.0, 1.0))
            for h in leg.legend_handles:
                if h is not None and hasattr(h, "set_color"):
                    h.set_color("0.5")
            title = f"{metric} at underlay MTU {' vs '.join(map(str, mtus))} ({wl}" \
                    + ("" if off == "default" else f", {off}") + ")"
            ax.set_title(title)
            yield _save(fig, out, slug("mtu", wl, metric, off), title,
                        "Mean over repeats per underlay MTU; whiskers: 95% CI. Lighter bars: "
                        "smaller MTU; hatched: larger.")
