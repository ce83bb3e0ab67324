"""Trend figures (matplotlib, like report/figures.py): per workload and metric, mean ± std by
hour of day and by weekday (one line per tunnel), and the per-campaign time series with the
change points marked."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .analysis import SHARE, WEEKDAYS, Change, Trend, by_slot, series  # noqa: E402


def _ylabel(t: Trend, key: tuple[str, str, str]) -> str:
    return f"{key[2]} (% of native)" if t.views[key] == SHARE else f"{key[2]} ({t.units[key]})"


def write(t: Trend, changes: list[Change], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    hours, days, ser = by_slot(t, "hour"), by_slot(t, "weekday"), series(t)
    written = []
    for wl, metric in dict.fromkeys((k[1], k[2]) for k in t.tracked()):
        keys = [k for k in t.tracked() if k[1] == wl and k[2] == metric]
        fig, (ax_h, ax_d, ax_s) = plt.subplots(1, 3, figsize=(16, 4.2))
        for k in keys:
            label = f"{k[0]} ({t.views[k]})"
            h = hours.get(k, {})
            ax_h.errorbar(list(h), [c.mean for c in h.values()],
                          yerr=[c.std for c in h.values()], marker="o", capsize=3, label=label)
            d = days.get(k, {})
            ax_d.errorbar(list(d), [c.mean for c in d.values()],
                          yerr=[c.std for c in d.values()], marker="o", capsize=3, label=label)
            s = ser.get(k, [])
            ax_s.plot([datetime.fromtimestamp(x[0]) for x in s], [x[2] for x in s],
                      marker=".", label=label)
        for c in changes:
            if (c.workload, c.metric) == (wl, metric):
                ax_s.axvline(datetime.fromtimestamp(c.at), linestyle="--",
                             color="tab:red" if c.verdict == "regression" else "tab:green")
                ax_s.annotate(f"{c.tunnel} {c.change_pct:+.1f}%",
                              (datetime.fromtimestamp(c.at), c.after), fontsize=8)
        ax_h.set(xlabel="hour of day", xlim=(-0.5, 23.5), xticks=range(0, 24, 3),
                 ylabel=_ylabel(t, keys[0]), title=f"{wl}: by hour (mean ± std)")
        ax_d.set(xlabel="weekday", xlim=(-0.5, 6.5), xticks=range(7),
                 title=f"{wl}: by weekday (mean ± std)")
        ax_d.set_xticklabels(WEEKDAYS)
        ax_s.set(xlabel="campaign start", title=f"{wl}: per campaign, change points dashed")
        ax_s.tick_params(axis="x", labelrotation=30)
        ax_h.legend(fontsize=8)
        fig.tight_layout()
        stem = out / f"trend-{wl.replace(' ', '_')}-{metric}"
        for ext in ("png", "svg"):
            fig.savefig(f"{stem}.{ext}")
            written.append(Path(f"{stem}.{ext}"))
        plt.close(fig)
    return written
