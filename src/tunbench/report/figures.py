"""Figures of a campaign as PNG and SVG (matplotlib, Agg), each drawn only when its data exists.

`render(campaign, out_dir)` returns the figures it drew, in reading order. Every function
here takes a Campaign and returns zero or more figures; none of them fails on absent data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import EngFormatter, MaxNLocator  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from . import cores, data, stats  # noqa: E402
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
    slanted (right-aligned on their tick), and y labels a smaller font, before checking."""
    fig.canvas.draw()
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
            fig.canvas.draw()
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
    fig.savefig(png)
    fig.savefig(svg, metadata={"Date": None})
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


# -- 2b. CPU per core: cores ranked per sample, and the one-core bottleneck -----------------

CORE_PARTS = (("usr", "user", "#4c78a8"), ("sys", "system", "#f58518"),
              ("softirq", "irq + softirq", "#e45756"))
MAX_RANKS = 8


def _shown_ranks(n: int) -> list[int]:
    """Which core ranks to draw: all up to MAX_RANKS, else the busiest ones and the least."""
    return list(range(n)) if n <= MAX_RANKS else [*range(MAX_RANKS - 1), n - 1]


def _core_groups(c: Campaign) -> list[tuple[Scenario, list[Scenario]]]:
    """One figure per scenario; the values of a workload sweep (stream streams=1, 4, 16)
    share one figure, keyed by the base workload."""
    groups: dict[Scenario, list[Scenario]] = {}
    for scen in c.scenarios():
        point = c.sweep_point(scen[0])
        key = (point[0], scen[1], scen[2]) if point else scen
        groups.setdefault(key, []).append(scen)
    for members in groups.values():
        members.sort(key=lambda m: (c.sweep_point(m[0]) or ("", "", 0))[2])
    return list(groups.items())


def percore_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    profs = cores.profiles(c)
    for scen, members in _core_groups(c):
        ps = [p for m in members for p in profs if p.scenario == m]
        if not ps:
            continue
        swept = len(members) > 1
        ranks = max(len(_shown_ranks(p.cores)) for p in ps)
        rows = sum(len(_shown_ranks(p.cores)) for p in ps) + len(ps)
        fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.24 * rows), layout="constrained")
        y, centers, labels = 0.0, [], []
        for p in ps:
            shown = _shown_ranks(p.cores)
            top = y
            for i in shown:
                left = 0.0
                for key, name, color in CORE_PARTS:
                    v = p.parts[i][key]
                    ax.barh(y, v, left=left, height=0.8, color=color,
                            label=name if (p is ps[0] and i == 0) else None)
                    left += v
                rank = "busiest" if i == 0 else ("least busy" if i == p.cores - 1
                                                 else f"#{i + 1}")
                ax.text(101, y, f"{p.busy[i]:.0f}% {rank}", va="center", fontsize=7)
                y += 1
            centers.append((top + y - 1) / 2)
            b = cores.bottleneck(p)
            point = c.sweep_point(p.scenario[0]) if swept else None
            labels.append(p.tunnel + (f" · {point[1]}={point[2]}" if point else "")
                          + ("\n⚠ one core" if b else ""))
            y += 1
        ax.set_yticks(centers, labels)
        for t, p in zip(ax.get_yticklabels(), ps):
            t.set_color(pal(p.tunnel))   # type: ignore[arg-type]
        ax.invert_yaxis()
        ax.set_xlim(0, 130)
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.set_xlabel("busy (% of one core)")
        ax.grid(False, axis="y")
        fig.legend(loc="outside lower center", ncols=3, fontsize=7)
        shared = any(p.shared_by_sites for p in ps)
        title = f"CPU per core ({scen_text(scen, c)})"
        ax.set_title(title)
        cap = (f"Each tunnel's cores ranked by how busy they were in each 1 s sample (busiest "
               f"first; threads move between cores), averaged over samples and repeats; "
               f"split into user, system and irq + softirq time. ⚠ marks one core at "
               f"≥{cores.SATURATED:.0f}% while another stayed ≥{cores.ROOM:.0f} points lower.")
        if ranks < max(p.cores for p in ps):
            cap += f" Over {MAX_RANKS} cores: the busiest {MAX_RANKS - 1} and the least busy."
        if shared:
            cap += " Both sites share this host's cores: the bars are both ends together."
        yield _save(fig, out, slug("cores", *scen), title, cap)


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
        for i, (tun, scen, pct, half) in enumerate(entries):
            if c.kind_of(tun) == "native":   # the reference (100%), not a measurement
                ax.barh(i, pct, color="white", edgecolor=pal(tun), hatch="//", height=0.7)
                ax.text(pct / 2, i, "reference", ha="center", va="center", fontsize=7)
                _value_label(ax, i, pct, f"{pct:.0f}%")
            else:
                ax.barh(i, pct, color=pal(tun), height=0.7)
                hi = min(pct + half, top * 0.86)
                ax.errorbar(pct, i, xerr=[[min(half, pct)], [hi - pct]], color="k", capsize=3,
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
                    "Mean over repeats divided by native's mean in the same campaign and "
                    "scenario, " + ("highest" if higher else "closest to native") + " first; "
                    "whiskers: 95% CI (both relative errors combined)"
                    + ("; an arrow marks a whisker cut at the edge" if cut else "")
                    + ". Native is the reference (100%, hatched), not a measurement.")


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


# -- 5. latency CDF ------------------------------------------------------------------------

def _cdf_points(dist: data.Distribution, tun: str) -> tuple[list[float], list[float], str]:
    """x values, cumulative fractions and a legend label of one tunnel's curve."""
    if tun in dist.samples:
        v = dist.samples[tun]
        return v, [(i + 1) / len(v) for i in range(len(v))], f"{tun} (n={len(v):,})"
    q = dist.quantiles[tun]
    xs, fs = [v for _, v in q], [p for p, _ in q]
    if dist.dense(tun):
        n = dist.counts.get(tun)
        return xs, fs, f"{tun} (n={n:,})" if n else f"{tun} ({len(q)} quantiles)"
    return xs, fs, f"{tun} (percentiles only)"


def cdf_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    """The study's RTT CDF: one curve per tunnel from the recorded distribution (every sample,
    or the workload's quantile sketch with repeats pooled), and the tail (1 - F, log axis)
    where p99 and p99.9 differ, which a linear CDF squeezes into its top pixel."""
    for scen in c.scenarios():
        for dist in data.distributions(c, scen):
            tuns = [t for t in c.tunnels() if t in dist.samples or t in dist.quantiles]
            fig, (ax, tail) = plt.subplots(1, 2, figsize=(8.4, 3.4), layout="constrained")
            allv: list[float] = []
            for tun in tuns:
                xs, fs, label = _cdf_points(dist, tun)
                sparse = tun not in dist.samples and not dist.dense(tun)
                style = {"marker": "o", "ms": 3} if sparse else {}
                ax.plot(xs, fs, color=pal(tun), label=label, drawstyle="steps-post"
                        if tun in dist.samples else "default", **style)
                tx = [(x, 1 - f) for x, f in zip(xs, fs) if 1 - f > 0]
                if tx:
                    tail.plot([x for x, _ in tx], [y for _, y in tx], color=pal(tun), **style)
                allv += xs
            pos = [v for v in allv if v > 0]
            for a in (ax, tail):
                if pos and max(pos) / min(pos) > 4:
                    a.set_xscale("log")
                a.set_xlabel(f"{c.display(dist.name)} "
                             f"({c.unit_label(dist.name, dist.unit)})" if dist.unit
                             else c.display(dist.name))
            ax.set_ylim(0, 1.02)
            ax.set_ylabel("fraction of transactions ≤ x")
            ax.set_title("CDF")
            tail.set_yscale("log")
            tail.set_ylabel("fraction > x (tail)")
            tail.set_title("tail: p90 at 0.1, p99 at 0.01, p99.9 at 0.001")
            ax.legend(loc="lower right")
            title = f"{c.display(dist.name)} CDF per tunnel ({scen_text(scen, c)})"
            fig.suptitle(title)
            yield _save(fig, out, slug("cdf", dist.name, *scen), title,
                        "Cumulative distribution of every transaction over all repeats (full "
                        "samples, or the workload's 1000-quantile sketch of them with repeats "
                        "pooled); where only a few percentiles were recorded, they are marked. "
                        "Right: the tail on a log scale.")


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
    first = next((data.tunnel(d) for d in c.cases
                  if (data.tunnel_sweep(d) or ("",))[0] == name), name)
    return pal(first)


def sweep_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for sw in data.sweeps(c):
        ranked = sorted(sw.points, key=lambda m: _metric_rank(m, sw.units.get(m, "")))
        metrics = [m for m in ranked if _metric_rank(m, sw.units.get(m, ""))[0] < 2] \
            or ranked[:2]
        head = data.headline_metric(c, sw.workload)
        if head in sw.points and head not in metrics:   # latency vs N: the median RTT
            metrics.insert(0, head)
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
            ax.set_xlabel("ECMP tunnels" if sw.over == "tunnel" else f"parallel {sw.param}")
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
        over = "ECMP tunnels" if sw.over == "tunnel" else sw.param
        title = f"{', '.join(map(c.display, metrics))} vs {over} ({sw.workload}" + \
                ("" if sw.mtu == 1500 else f", MTU {sw.mtu}") + ")"
        fig.suptitle(title)
        cap = (f"Mean over repeats at each number of {over} (log2 axis); whiskers: 95% CI "
               "(cut at twice the mean).")
        if sw.over == "tunnel":
            cap += (" Each point is the tunnel built N times in parallel, flows spread over "
                    "them by an L4-hashed ECMP route (tunnels=N). datapath_cpu: the tunnel's "
                    "daemons (both sites, all N) in % of one core.")
        if logy:
            cap += " Rates on a log axis: the curves differ by more than 8x."
        yield _save(fig, out, slug("sweep", sw.workload, sw.param, sw.mtu, sw.offloads), title,
                    cap)


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


FIGURES: tuple[Callable[[Campaign, Path, Palette], Iterator[Figure]], ...] = (
    pct_native_figures, series_figures, cpu_figures, percore_figures, mtu_figures, cdf_figures,
    sweep_figures, line_rate_figures, ndr_figures, other_metric_figures)


def render(c: Campaign, out: Path) -> list[Figure]:
    pal = Palette(c.tunnels())
    figs: list[Figure] = []
    for fn in FIGURES:
        figs.extend(fn(c, out, pal))
    return figs
