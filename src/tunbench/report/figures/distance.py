"""Throughput and share of native against RTT and against loss (report/distance.py computes
them), with the Mathis TCP model as a dashed reference line where loss and RTT are above 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt

from .. import distance
from ..data import Campaign
from .base import Figure, Palette, _save, slug

MAX_LINES = 4   # rows per figure: one (figure, share of native) for each value of the other axis


def distance_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    _, fixed_loss = distance.fixed(c)
    for s in distance.sweeps(c):
        for along in ("rtt", "loss"):
            xs_all = s.rtts if along == "rtt" else s.losses
            others = s.losses if along == "rtt" else s.rtts
            if len(xs_all) < 2:
                continue
            others = others[:MAX_LINES]
            # one row per value of the other axis: its figure, then its share of native
            fig, grid = plt.subplots(len(others), 2, figsize=(9.0, 2.9 * len(others) + 0.6),
                                     squeeze=False, layout="constrained")
            axes = [ax for row in grid for ax in row]
            modelled = logy = False
            for i, other in enumerate(others):
                pts = [((x, other) if along == "rtt" else (other, x)) for x in xs_all]
                xv = [s.rtt_ms(p[0]) if along == "rtt" else s.loss_pct(p[1], fixed_loss)
                      for p in pts]
                head, share = axes[2 * i], axes[2 * i + 1]
                for m in s.methods:
                    ys = [m.mean(p) for p in pts]
                    got = [(x, y) for x, y in zip(xv, ys, strict=True) if y is not None]
                    if got:
                        head.plot(*zip(*got, strict=True), marker="o", color=pal(m.tunnel),
                                  label=m.tunnel)
                    sh = [(x, 100 * v[0]) for x, p in zip(xv, pts, strict=True)
                          if (v := s.share(m, p)) is not None and not m.native]
                    if sh:
                        share.plot(*zip(*sh, strict=True), marker="o", color=pal(m.tunnel),
                                   label=m.tunnel)
                model = [(x, y) for x, p in zip(xv, pts, strict=True)
                         if s.methods and (y := s.model(s.methods[0], p, fixed_loss))]
                if model:
                    modelled = True
                    head.plot(*zip(*model, strict=True), ls="--", marker="x", color="0.3",
                              label="Mathis model")
                shown = [y for line in head.get_lines() for y in line.get_ydata() if y > 0]
                if shown and max(shown) > 8 * min(shown):   # loss: rates differ by 10-100x
                    head.set_yscale("log")
                    logy = True
                else:
                    head.set_ylim(bottom=0)
                head.legend(loc="best", fontsize=7)
                unit = c.unit_label(s.metric, s.unit)
                what = ("loss " + other if other else "") if along == "rtt" else \
                    ("RTT " + other if other else "")
                xlabel = "RTT (ms)" if along == "rtt" else "loss (%)"
                head.set_title(f"{c.display(s.metric)}" + (f", {what}" if what else ""))
                head.set_ylabel(unit)
                head.set_xlabel(xlabel)
                share.set_title("% of native" + (f", {what}" if what else ""))
                share.set_xlabel(xlabel)
                share.set_ylim(bottom=0)
                share.axhline(100, color="0.6", lw=0.8)
            over = "RTT" if along == "rtt" else "loss"
            title = (f"{c.display(s.metric)} and share of native vs {over} ({s.workload}"
                     + ("" if s.mtu == 1500 else f", MTU {s.mtu}") + ")")
            fig.suptitle(title)
            cap = ("Each point the mean over rounds; the share of native paired per round at "
                   "the same scenario. netem on both underlay ends (an RTT of X: X/2 on each).")
            if modelled:
                cap += (" Dashed: the Mathis model MSS/RTT × √(3/2)/√p for one TCP flow, a "
                        "reference, not a bound (report section \"Distance and loss\").")
            if logy:
                cap += " Rates on a log axis where they differ by more than 8x."
            yield _save(fig, out, slug("distance", s.workload, over, s.mtu, s.offloads),
                        title, cap)
