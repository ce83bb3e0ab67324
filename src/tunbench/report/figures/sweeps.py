"""Sweeps: a metric and CPU against streams, processes, N tunnels or cores per site."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ...results.records import CORES
from .. import data, stats
from ..data import Campaign
from .base import Figure, Palette, _ceiling, _err, _grid, _own_scale, _save, slug

# -- 6. sweeps: aggregate throughput and CPU vs parallel streams / processes ---------------

def _metric_rank(name: str, unit: str) -> tuple[int, str]:
    if data.is_rate_unit(unit) or data.is_line_rate(name, unit):
        return (0, name)
    if name in ("cpu_busy", data.DATAPATH_CPU):
        return (1, name)
    return (2, name)


def _sweep_color(c: Campaign, pal: Palette, name: str) -> tuple[float, ...]:
    """A tunnel's colour; a tunnel sweep's curve (base label) takes its first value's."""
    if name in pal.colors:
        return pal(name)
    first = next((r.tunnel.label for r in c.cases
                  if (r.tunnel.sweep_point() or ("",))[0] == name), name)
    return pal(first)


def sweep_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for sw in data.sweeps(c):
        ranked = sorted(sw.points, key=lambda m: _metric_rank(m, sw.units.get(m, "")))
        metrics = [m for m in ranked if _metric_rank(m, sw.units.get(m, ""))[0] < 2] \
            or ranked[:2]
        head = data.headline_metric(c, sw.workload)
        if head in sw.points and head not in metrics:   # latency vs N: the median RTT
            metrics.insert(0, head)
        if sw.param == CORES and "cpu_per_gbit" in sw.points:   # how each method scales
            metrics.append("cpu_per_gbit")
        fig, axes = _grid(len(metrics), 4.2, 3.0)
        xs_all: set[int] = set()
        logy = False
        for ax, metric in zip(axes, metrics):
            tops: list[float] = []
            lows: list[float] = []
            for tun, pts in sw.points[metric].items():
                xs = sorted(pts)
                xs_all.update(xs)
                summ = [stats.summarize(pts[x]) for x in xs]
                ceil = _ceiling(c, metric, sw.units.get(metric, ""))
                ax.errorbar(xs, [s.mean for s in summ],
                            yerr=[[min(s.mean - s.ci95_low, s.mean * 0.9) for s in summ],
                                  [_err(s, ceil)[1] for s in summ]],
                            marker="o", ms=3, capsize=2, color=_sweep_color(c, pal, tun),
                            label=tun)
                tops.append(max(min(s.ci95_high, 2 * s.mean) for s in summ))
                lows.append(min(s.mean for s in summ))
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(xs_all), [str(x) for x in sorted(xs_all)])
            ax.minorticks_off()
            ax.set_xlabel("ECMP tunnels" if sw.over == "tunnel" else "cores per site"
                          if sw.param == CORES else f"parallel {sw.param}")
            unit = sw.units.get(metric, "")
            shown = c.unit_label(metric, unit)
            name = c.display(metric)
            ax.set_ylabel(f"{name} ({shown})" if shown else name)
            if _metric_rank(metric, unit)[0] == 0 and _own_scale(tops) and min(lows) > 0:
                ax.set_yscale("log")   # each curve readable: equal ratios, equal distances
                logy = True
            else:
                ax.set_ylim(0, max(tops) * 1.08 or None)
            ax.set_title(name)
        axes[0].legend(loc="best")
        over = "ECMP tunnels" if sw.over == "tunnel" else "cores per site" \
            if sw.param == CORES else sw.param
        title = f"{', '.join(map(c.display, metrics))} vs {over} ({sw.workload}" + \
                ("" if sw.mtu == 1500 else f", MTU {sw.mtu}") + ")"
        fig.suptitle(title)
        cap = (f"Mean over repeats at each number of {over} (log2 axis); whiskers: 95% CI "
               "(cut at twice the mean).")
        if sw.over == "tunnel":
            cap += (" Each point is the tunnel built N times in parallel, flows spread over "
                    "them by an L4-hashed ECMP route (tunnels=N). datapath_cpu: the tunnel's "
                    "daemons (both sites, all N) in % of one core.")
        if sw.param == CORES:
            cap += (" Each site confined to that many CPUs by a cpuset cgroup, its receive "
                    "work steered there by RPS (docs/methodology.md, \"Site size in cores\").")
        if logy:
            cap += " Rates on a log axis: the curves differ by more than 8x."
        yield _save(fig, out, slug("sweep", sw.workload, sw.param, sw.mtu, sw.offloads), title,
                    cap)
