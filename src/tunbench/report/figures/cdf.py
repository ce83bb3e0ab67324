"""Latency CDF per tunnel from the stored distribution."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt

from .. import data
from ..data import Campaign
from .base import Figure, Palette, _save, scen_text, slug

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
