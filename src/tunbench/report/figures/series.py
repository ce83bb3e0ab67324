"""Per-second series of a metric, one line per tunnel."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from .. import data
from ..data import Campaign
from .base import Figure, Palette, _grid, _own_scale, _save, scen_text, slug

# -- 1. throughput (any) series per tunnel -------------------------------------------------

def series_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl, name in data.series_names(c):
        for scen in [s for s in c.scenarios() if s[0] == wl]:
            per: dict[str, list[list[float]]] = {}
            for case in c.ok:
                if case.scenario == scen and case.series.get(name):
                    per.setdefault(case.tunnel.label, []).append(list(case.series[name]))
            if not per:
                continue
            unit = data.metric_unit(c.cases, name)
            fig, axes = _grid(len(per))
            tops = {t: max(max(v) for v in runs) for t, runs in per.items()}
            own = _own_scale(list(tops.values()))   # a shared axis would flatten some
            ymax = max(tops.values())
            for ax, (tun, runs) in zip(axes, sorted(per.items(), key=lambda kv:
                                                    c.tunnels().index(kv[0]))):
                for i, r in enumerate(runs):
                    ax.plot(range(1, len(r) + 1), r, lw=1, alpha=0.75, marker=".",
                            label=f"repeat {i + 1}")
                n = max(len(r) for r in runs)
                mean = [sum(r[k] for r in runs if k < len(r)) / sum(1 for r in runs if k < len(r))
                        for k in range(n)]
                ax.plot(range(1, n + 1), mean, "r--", lw=1.8, label="mean")
                ax.set_title(tun, color=pal(tun))
                ax.set_xlabel("time (s, after warm-up)")
                ax.set_ylabel(f"{name} ({unit})" if unit else name)
                ax.set_ylim(0, (tops[tun] if own else ymax) * 1.1 or None)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes[0].legend(loc="lower left", ncols=2)
            title = f"{name} series per tunnel ({scen_text(scen, c)})"
            fig.suptitle(title)
            yield _save(fig, out, slug("series", name, *scen), title,
                        "Each repeat's per-second values; the red dashed line is their mean."
                        + (" Each panel has its own y scale: the tunnels differ by more "
                           "than 8x, and one shared scale would flatten the smaller ones."
                           if own else ""))
