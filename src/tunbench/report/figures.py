"""Figures of a campaign as PNG and SVG (matplotlib, Agg), each drawn only when its data exists.

`render(campaign, out_dir)` returns the figures it drew, in reading order. Every function
here takes a Campaign and returns zero or more figures; none of them fails on absent data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from . import data, stats  # noqa: E402
from . import metrics as catalogue  # noqa: E402
from .data import Campaign, Scenario  # noqa: E402

matplotlib.rcParams.update({
    "svg.fonttype": "none", "svg.hashsalt": "tunbench", "font.size": 9,
    "axes.titlesize": 10, "figure.titlesize": 11, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "legend.fontsize": 8,
    "figure.dpi": 100, "savefig.dpi": 110, "savefig.bbox": "tight",
})
MAX_PANELS = 12


@dataclass(frozen=True)
class Figure:
    name: str        # file stem under report/
    title: str
    caption: str
    png: Path
    svg: Path


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


def _save(fig: MplFigure, out: Path, name: str, title: str, caption: str) -> Figure:
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / f"{name}.png", out / f"{name}.svg"
    fig.savefig(png)
    fig.savefig(svg, metadata={"Date": None})
    plt.close(fig)
    return Figure(name, title, caption, png, svg)


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


def _ceiling(metric: str, unit: str) -> float | None:
    return CPU_CEILING if catalogue.unit_label(metric, unit) == "% of all cores" else None


def _label_in_bar(ax: Axes, x: float, height: float, text: str) -> None:
    if height > 0:
        ax.text(x, height / 2, text, ha="center", va="center", fontsize=7, color="white",
                fontweight="bold")


# -- 1. throughput (any) series per tunnel -------------------------------------------------

def series_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl, name in data.series_names(c):
        for scen in [s for s in c.scenarios() if s[0] == wl]:
            per: dict[str, list[list[float]]] = {}
            for d in c.ok:
                if data.scenario(d) == scen and (d.get("series") or {}).get(name):
                    per.setdefault(data.tunnel(d), []).append(list(d["series"][name]))
            if not per:
                continue
            unit = data.metric_unit(c.ok, name)
            fig, axes = _grid(len(per))
            ymax = max(max(v) for runs in per.values() for v in runs)
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
                ax.set_ylim(0, ymax * 1.1)
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes[0].legend(loc="lower left", ncols=2)
            title = f"{name} series per tunnel ({scen_text(scen, c)})"
            fig.suptitle(title)
            yield _save(fig, out, slug("series", name, *scen), title,
                        "Each repeat's per-second values; the red dashed line is their mean.")


# -- 2. CPU bars with min/max whiskers -----------------------------------------------------

def cpu_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl in c.workloads():
        scens = [s for s in c.scenarios() if s[0] == wl]
        bars: list[tuple[str, Scenario, float, float, float]] = []
        for scen in scens:
            for tun in c.tunnels():
                docs = [d for d in c.ok if data.scenario(d) == scen and data.tunnel(d) == tun
                        and d.get("cpu")]
                if not docs:
                    continue
                avg = sum(d["cpu"]["busy_avg"] for d in docs) / len(docs)
                # a sample's rounding can land past 0..100%: whiskers show what is possible
                lo = max(min(d["cpu"]["busy_min"] for d in docs), 0.0)
                hi = min(max(d["cpu"]["busy_max"] for d in docs), CPU_CEILING)
                bars.append((tun, scen, avg, lo, hi))
        if not bars:
            continue
        fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(bars) + 1.5), 3.2),
                               layout="constrained")
        labels = []
        for i, (tun, scen, avg, lo, hi) in enumerate(bars):
            ax.bar(i, avg, color=pal(tun), width=0.7)
            ax.errorbar(i, avg, yerr=[[max(avg - lo, 0.0)], [max(hi - avg, 0.0)]], color="k",
                        capsize=4, lw=1)
            _label_in_bar(ax, i, avg, f"{avg:.0f}%")
            labels.append(tun if len(scens) == 1 else f"{tun}\nMTU {scen[1]}"
                          + ("" if scen[2] == "default" else f"\n{scen[2]}"))
        ax.set_xticks(range(len(bars)), labels)
        ax.set_ylim(0, 105)
        ax.set_ylabel("CPU busy (% of all cores)")
        shared = any((d.get("cpu") or {}).get("shared_by_sites") for d in c.ok)
        title = f"CPU utilization per tunnel ({wl})"
        ax.set_title(title)
        cap = "Bar: average busy % over the measurement and repeats; whiskers: min and max " \
              "of the 1 s samples."
        if shared:
            cap += " Both sites share this host's CPUs: this is the cost of both ends."
        yield _save(fig, out, slug("cpu", wl), title, cap)


# -- 3. % of native with 95% CI ------------------------------------------------------------

def pct_interval(r: stats.Row, base: stats.Row) -> tuple[float, float, float]:
    """Percent of native and its 95% half-widths (relative errors added in quadrature)."""
    pct = 100.0 * r.stats.mean / base.stats.mean
    rel = 0.0
    for s in (r.stats, base.stats):
        if s.mean:
            rel += ((s.ci95_high - s.mean) / s.mean) ** 2
    half = pct * math.sqrt(rel)
    return pct, half, half


def pct_native_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl in c.workloads():
        metric = data.headline_metric(c, wl)
        if metric is None:
            continue
        entries: list[tuple[str, Scenario, float, float]] = []
        scens = [s for s in c.scenarios() if s[0] == wl]
        for scen in scens:
            base = c.native_row(scen, metric)
            if base is None or not base.stats.mean:
                continue
            for tun in c.tunnels():
                r = c.row(tun, scen, metric)
                if r is not None and r.kind == "native":
                    entries.append((tun, scen, 100.0, 0.0))   # the reference, not a measurement
                elif r is not None:
                    pct, lo, _ = pct_interval(r, base)
                    entries.append((tun, scen, pct, lo))
        if len(entries) < 2:
            continue
        fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(entries) + 1.5), 3.2),
                               layout="constrained")
        labels = []
        for i, (tun, scen, pct, half) in enumerate(entries):
            if c.kind_of(tun) == "native":
                ax.bar(i, pct, color="white", edgecolor=pal(tun), hatch="//", width=0.7)
                ax.text(i, pct / 2, "reference", ha="center", va="center", fontsize=7,
                        rotation=90)
            else:
                ax.bar(i, pct, color=pal(tun), width=0.7)
                ax.errorbar(i, pct, yerr=half, color="k", capsize=4, lw=1)
                _label_in_bar(ax, i, pct, f"{pct:.0f}%")
            labels.append(tun if len(scens) == 1 else f"{tun}\nMTU {scen[1]}")
        ax.axhline(100, color="k", lw=0.8, ls=":")
        ax.set_xticks(range(len(entries)), labels)
        ax.set_ylabel(f"{metric} (% of native)")
        ax.set_ylim(0, max(110, max(e[2] + e[3] for e in entries) * 1.1))
        title = f"{metric} as % of native ({wl})"
        ax.set_title(title)
        yield _save(fig, out, slug("pct-native", wl, metric), title,
                    "Mean over repeats divided by native's mean in the same campaign and "
                    "scenario; whiskers: 95% CI (both relative errors combined). Native is the "
                    "reference (100%, hatched), not a measurement.")


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
            leg = ax.legend(title="underlay MTU", loc="lower right")
            for h in leg.legend_handles:
                if h is not None and hasattr(h, "set_color"):
                    h.set_color("0.5")
            title = f"{metric} at underlay MTU {' vs '.join(map(str, mtus))} ({wl}" \
                    + ("" if off == "default" else f", {off}") + ")"
            ax.set_title(title)
            yield _save(fig, out, slug("mtu", wl, metric, off), title,
                        "Mean over repeats per underlay MTU; whiskers: 95% CI. Lighter bars: "
                        "smaller MTU; hatched: larger.")


# -- 5. latency CDF ------------------------------------------------------------------------

def cdf_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for scen in c.scenarios():
        for dist in data.distributions(c, scen):
            fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="constrained")
            allv: list[float] = []
            for tun in c.tunnels():
                if tun in dist.samples:
                    v = dist.samples[tun]
                    ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post",
                            color=pal(tun), label=f"{tun} (n={len(v)})")
                    allv += v
                elif tun in dist.quantiles:
                    q = dist.quantiles[tun]
                    ax.plot([v for _, v in q], [p for p, _ in q], marker="o", ms=3,
                            color=pal(tun), label=f"{tun} (percentiles)")
                    allv += [v for _, v in q]
            pos = [v for v in allv if v > 0]
            if pos and max(pos) / min(pos) > 50:
                ax.set_xscale("log")
            ax.set_ylim(0, 1.02)
            ax.set_xlabel(f"{dist.name} ({dist.unit})" if dist.unit else dist.name)
            ax.set_ylabel("fraction of samples ≤ x")
            ax.legend(loc="lower right")
            title = f"{dist.name} CDF per tunnel ({scen_text(scen, c)})"
            ax.set_title(title)
            yield _save(fig, out, slug("cdf", dist.name, *scen), title,
                        "Cumulative distribution over all repeats (full samples where the "
                        "workload kept them, otherwise its reported percentiles).")


# -- 6. sweeps: aggregate throughput and CPU vs parallel streams / processes ---------------

def _metric_rank(name: str, unit: str) -> tuple[int, str]:
    if data.is_rate_unit(unit) or data.is_line_rate(name, unit):
        return (0, name)
    if name == "cpu_busy":
        return (1, name)
    return (2, name)


def sweep_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for sw in data.sweeps(c):
        ranked = sorted(sw.points, key=lambda m: _metric_rank(m, sw.units.get(m, "")))
        metrics = [m for m in ranked if _metric_rank(m, sw.units.get(m, ""))[0] < 2] \
            or ranked[:2]
        fig, axes = _grid(len(metrics), 4.2, 3.0)
        xs_all: set[int] = set()
        for ax, metric in zip(axes, metrics):
            top = 0.0
            for tun in c.tunnels():
                pts = sw.points[metric].get(tun)
                if not pts:
                    continue
                xs = sorted(pts)
                xs_all.update(xs)
                summ = [stats.summarize(pts[x]) for x in xs]
                ax.errorbar(xs, [s.mean for s in summ],
                            yerr=[[s.mean - s.ci95_low for s in summ],
                                  [s.ci95_high - s.mean for s in summ]],
                            marker="o", ms=3, capsize=2, color=pal(tun), label=tun)
                top = max(top, *(min(s.ci95_high, 2 * s.mean) for s in summ))
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(xs_all), [str(x) for x in sorted(xs_all)])
            ax.set_xlabel(f"parallel {sw.param}")
            unit = sw.units.get(metric, "")
            ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
            ax.set_ylim(0, top * 1.08 or None)
            ax.set_title(metric)
        axes[0].legend(loc="best")
        title = f"{', '.join(metrics)} vs {sw.param} ({sw.workload}" + \
                ("" if sw.mtu == 1500 else f", MTU {sw.mtu}") + ")"
        fig.suptitle(title)
        yield _save(fig, out, slug("sweep", sw.workload, sw.param, sw.mtu, sw.offloads), title,
                    f"Mean over repeats at each number of {sw.param} (log2 axis); "
                    "whiskers: 95% CI (cut at twice the mean).")


# -- 7. bars by tunnel for selected metrics (line rate, NDR/PDR, latency under load) -------

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


def line_rate_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for scen in c.scenarios():
        rows = [r for r in c.rows if (r.workload, r.mtu, r.offloads) == scen
                and data.is_line_rate(r.metric, r.unit) and "@" not in r.metric]
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
                _grouped(axes[1], c, pal, [""], {("", r.tunnel): r.stats for r in cpu if r})
                axes[1].set_ylabel("CPU busy (% of all cores)")
                axes[1].set_title("CPU")
            title = f"Percent of line rate ({scen_text(scen, c)})"
            fig.suptitle(title)
            yield _save(fig, out, slug("line-rate", metric, *scen), title,
                        "Mean over repeats; whiskers: 95% CI.")


def ndr_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for scen in c.scenarios():
        srows = [r for r in c.rows if (r.workload, r.mtu, r.offloads) == scen]
        nd = data.ndr_metrics(r.metric for r in srows)
        loaded = [r for r in srows if data.is_under_load(r.metric)]
        if not nd and not loaded:
            continue
        kinds = sorted({k for k, _ in nd.values()})
        panels = len(kinds) + (1 if loaded else 0)
        fig, axes = _grid(panels, 4.6, 3.0)
        for ax, kind in zip(axes, kinds):
            sizes = sorted({s for k, s in nd.values() if k == kind}, key=data.size_order)
            vals = {(nd[r.metric][1], r.tunnel): r.stats for r in srows
                    if r.metric in nd and nd[r.metric][0] == kind}
            _grouped(ax, c, pal, sizes, vals)
            unit = next(r.unit for r in srows if r.metric in nd and nd[r.metric][0] == kind)
            ax.set_ylabel(f"{kind.upper()} ({unit})")
            ax.set_xlabel("frame size (bytes) / mix")
            ax.set_title(f"{kind.upper()}: " + ("no drop" if kind == "ndr" else "partial drop")
                         + " rate")
            ax.legend(loc="best")
        if loaded:
            ax = axes[-1]
            names = list(dict.fromkeys(r.metric for r in loaded))
            _grouped(ax, c, pal, names, {(r.metric, r.tunnel): r.stats for r in loaded})
            ax.set_ylabel(f"latency ({loaded[0].unit})")
            ax.set_title("latency under load")
            ax.tick_params(axis="x", labelrotation=15)
        title = f"NDR/PDR and latency under load ({scen_text(scen, c)})"
        fig.suptitle(title)
        yield _save(fig, out, slug("ndr", *scen), title,
                    "Mean over repeats per frame size and IMIX; whiskers: 95% CI.")


# -- 8. every other metric, so new workloads show up without code ---------------------------

SHOWN_ELSEWHERE = ("cpu_busy",)


def other_metric_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for wl in c.workloads():
        head = data.headline_metric(c, wl)
        rows = [r for r in c.rows if r.workload == wl and "@" not in r.metric]
        nd = data.ndr_metrics(r.metric for r in rows)
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
            _grouped(ax, c, pal, groups, vals, _ceiling(metric, mrows[0].unit))
            ax.set_title(catalogue.display_name(metric))
            ax.set_ylabel(catalogue.unit_label(metric, mrows[0].unit))
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6))
        title = f"Other metrics of {wl}"
        fig.suptitle(title)
        yield _save(fig, out, slug("metrics", wl), title,
                    "Every further metric the workload recorded: mean over repeats per tunnel; "
                    "whiskers: 95% CI.")


FIGURES: tuple[Callable[[Campaign, Path, Palette], Iterator[Figure]], ...] = (
    pct_native_figures, series_figures, cpu_figures, mtu_figures, cdf_figures,
    sweep_figures, line_rate_figures, ndr_figures, other_metric_figures)


def render(c: Campaign, out: Path) -> list[Figure]:
    pal = Palette(c.tunnels())
    figs: list[Figure] = []
    for fn in FIGURES:
        figs.extend(fn(c, out, pal))
    return figs
