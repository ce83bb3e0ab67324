"""Trend figures (matplotlib, like report/figures/): per workload and metric, mean ± std by
hour of day and by weekday (one line per tunnel), and the per-campaign time series with the
change points marked."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .analysis import SHARE, WEEKDAYS, Change, Trend, by_slot, series  # noqa: E402


def _ylabel(t: Trend, key: tuple[str, str, str]) -> str:
    return f"{key[2]} (% of native)" if t.views[key] == SHARE else f"{key[2]} ({t.units[key]})"


def write(t: Trend, changes: list[Change], out: Path) -> list[Path]:
    out.mkdir(exist_ok=True)   # its parent was checked (shell.check_dir); never created
    hours, days, ser = by_slot(t, "hour"), by_slot(t, "weekday"), series(t)
    written = []
    for wl, metric in dict.fromkeys((k[1], k[2]) for k in t.tracked()):
        keys = [k for k in t.tracked() if k[1] == wl and k[2] == metric]
        views = list(dict.fromkeys(t.views[k] for k in keys))   # one row of axes per view
        fig, axes = plt.subplots(len(views), 3, figsize=(16, 4.2 * len(views)), squeeze=False)
        for row, view in zip(axes, views, strict=True):
            _row(t, [k for k in keys if t.views[k] == view], changes, row,
                 (hours, days, ser), f"{wl} [{view}]")
        fig.tight_layout()
        stem = out / re.sub(r"[^A-Za-z0-9._-]", "_", f"trend-{wl}-{metric}")
        for ext in ("png", "svg"):
            fig.savefig(f"{stem}.{ext}")
            written.append(Path(f"{stem}.{ext}"))
        plt.close(fig)
    return written


def _row(t: Trend, keys: list[tuple[str, str, str]], changes: list[Change], row: Any,
         data: tuple[Any, Any, Any], title: str) -> None:
    hours, days, ser = data
    ax_h, ax_d, ax_s = row
    for k in keys:
        h = hours.get(k, {})
        ax_h.errorbar(list(h), [c.mean for c in h.values()],
                      yerr=[c.std for c in h.values()], marker="o", capsize=3, label=k[0])
        d = days.get(k, {})
        ax_d.errorbar(list(d), [c.mean for c in d.values()],
                      yerr=[c.std for c in d.values()], marker="o", capsize=3, label=k[0])
        several = sum(1 for sk in ser if sk[:3] == k) > 1
        for sk, s in ser.items():   # one line per setup: never joined across setups
            if sk[:3] == k:
                ax_s.plot([datetime.fromtimestamp(x[0]) for x in s], [x[2] for x in s],
                          marker=".", label=f"{k[0]} [{sk[3]}]" if several else k[0])
    for c in changes:
        if (c.tunnel, c.workload, c.metric) in keys:
            ax_s.axvline(datetime.fromtimestamp(c.at), linestyle="--",
                         color="tab:red" if c.verdict == "regression" else "tab:green")
            ax_s.annotate(f"{c.tunnel} {c.change_pct:+.1f}%",
                          (datetime.fromtimestamp(c.at), c.after), fontsize=8)
    ax_h.set(xlabel="hour of day", xlim=(-0.5, 23.5), xticks=range(0, 24, 3),
             ylabel=_ylabel(t, keys[0]), title=f"{title}: by hour (mean ± std)")
    ax_d.set(xlabel="weekday", xlim=(-0.5, 6.5), xticks=range(7),
             title=f"{title}: by weekday (mean ± std)")
    ax_d.set_xticklabels(WEEKDAYS)
    ax_s.set(xlabel="campaign start", title=f"{title}: per campaign, change points dashed")
    ax_s.tick_params(axis="x", labelrotation=30)
    ax_h.legend(fontsize=8)
