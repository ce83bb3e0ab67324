"""Each method's figure and share of native against one scenario axis (report/axes.py computes
them): today the underlay rate (tbf per case, testbed/wanaxis.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt

from .. import axes
from ..data import Campaign
from .base import Figure, Palette, _save, slug


def rate_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    for s in axes.rate_alongs(c):
        xs = [axes.rate_key(x) for x in s.values]   # Mbit/s
        fig, (head, share) = plt.subplots(1, 2, figsize=(9.0, 3.5), layout="constrained")
        for m in s.methods:
            got = [(x, y) for x, v in zip(xs, s.values, strict=True)
                   if (y := m.mean(v)) is not None]
            if got:
                head.plot(*zip(*got, strict=True), marker="o", color=pal(m.tunnel),
                          label=m.tunnel)
            sh = [(x, 100 * v[0]) for x, r in zip(xs, s.values, strict=True)
                  if not m.native and (v := s.share(m, r)) is not None]
            if sh:
                share.plot(*zip(*sh, strict=True), marker="o", color=pal(m.tunnel),
                           label=m.tunnel)
        if max(xs) > 8 * min(xs):   # rates a decade apart: a log axis keeps both readable
            for ax in (head, share):
                ax.set_xscale("log")
        for ax in (head, share):
            ax.set_xticks(xs, s.values)
            ax.minorticks_off()
            ax.set_xlabel("underlay rate (tbf)")
        head.set_ylim(bottom=0)
        head.set_ylabel(c.unit_label(s.metric, s.unit))
        head.set_title(c.display(s.metric))
        head.legend(loc="best", fontsize=7)
        share.set_title("% of native")
        share.axhline(100, color="0.6", lw=0.8)   # native itself
        share.set_ylim(0, max(105.0, share.get_ylim()[1]))
        if share.get_lines()[:-1]:
            share.legend(loc="best", fontsize=7)
        title = (f"{c.display(s.metric)} and share of native vs underlay rate ({s.workload}"
                 + ("" if s.mtu == 1500 else f", MTU {s.mtu}") + ")")
        fig.suptitle(title)
        cap = ("Each point the mean over rounds; the share of native paired per round at the "
               "same rate. tbf on both underlay ends (report section \"Underlay rate\").")
        yield _save(fig, out, slug("rate", s.workload, s.mtu, s.offloads), title, cap)
