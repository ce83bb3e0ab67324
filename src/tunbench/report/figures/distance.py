"""Throughput and share of native against RTT and against loss (report/distance.py computes
them), with the Mathis TCP model as a dashed reference line where loss and RTT are above 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .. import distance
from ..data import Campaign
from .base import Figure, Palette, _grid, _save, slug

MAX_LINES = 4   # panels per figure: one pair (metric, share) for each value of the other axis


def distance_figures(c: Campaign, out: Path, pal: Palette) -> Iterator[Figure]:
    _, fixed_loss = distance.fixed(c)
    for s in distance.sweeps(c):
        for along in ("rtt", "loss"):
            xs_all = s.rtts if along == "rtt" else s.losses
            others = s.losses if along == "rtt" else s.rtts
            if len(xs_all) < 2:
                continue
            others = others[:MAX_LINES]
            fig, axes = _grid(2 * len(others), 3.8, 2.8)
            modelled = False
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
                    top = max((y for m in s.methods for p in pts
                               if (y := m.mean(p)) is not None), default=0.0)
                    head.plot(*zip(*model, strict=True), ls="--", color="0.3",
                              label="Mathis model")
                    head.set_ylim(0, top * 1.15 or None)
                else:
                    head.set_ylim(bottom=0)
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
            axes[0].legend(loc="best", fontsize=8)
            if len(axes) > 1 and axes[1].get_legend_handles_labels()[0]:
                axes[1].legend(loc="best", fontsize=8)
            over = "RTT" if along == "rtt" else "loss"
            title = (f"{c.display(s.metric)} and share of native vs {over} ({s.workload}"
                     + ("" if s.mtu == 1500 else f", MTU {s.mtu}") + ")")
            fig.suptitle(title)
            cap = ("Each point the mean over rounds; the share of native paired per round at "
                   "the same scenario. netem on both underlay ends (an RTT of X: X/2 on each).")
            if modelled:
                cap += (" Dashed: the Mathis model MSS/RTT × √(3/2)/√p for one TCP flow, a "
                        "reference, not a bound (report section \"Distance and loss\").")
            yield _save(fig, out, slug("distance", s.workload, over, s.mtu, s.offloads),
                        title, cap)
