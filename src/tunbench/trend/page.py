"""The trend as one self-contained HTML page (figures embedded, no fetches), like the
campaign report: the view of each tunnel and metric, the change points, the figures."""

from __future__ import annotations

import base64
import html
from datetime import datetime
from pathlib import Path

from .analysis import Change, Trend


def write(t: Trend, changes: list[Change], figures: list[Path], out: Path) -> Path:
    e = html.escape
    rows = "".join(
        f"<tr class='{c.verdict}'><td>{e(c.tunnel)}</td><td>{e(c.workload)}</td>"
        f"<td>{e(c.metric)}</td><td>{e(c.view)}</td><td>{c.before:.4g}</td>"
        f"<td>{c.after:.4g}</td><td>{c.change_pct:+.1f}%</td><td>{c.verdict}</td>"
        f"<td>{datetime.fromtimestamp(c.at):%Y-%m-%d %H:%M}</td><td>{e(c.campaign)}</td></tr>"
        for c in changes) or "<tr><td colspan=10>no change points</td></tr>"
    views = "".join(f"<li>{e(k[0])} {e(k[1])} {e(k[2])}: {e(v)}</li>"
                    for k, v in t.views.items())
    imgs = "".join(
        f"<figure><img alt='{e(p.stem)}' src='data:image/png;base64,"
        f"{base64.b64encode(p.read_bytes()).decode()}'><figcaption>{e(p.stem)}</figcaption>"
        "</figure>" for p in figures if p.suffix == ".png")
    n = len({p.campaign for p in t.points})
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>tunbench trend</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px}}.regression{{background:#fdd}}
.progression{{background:#dfd}}img{{max-width:100%}}</style></head><body>
<h1>tunbench trend: {n} campaigns, {len(t.points)} case values</h1>
<p>Hour of day and weekday: mean ± standard deviation of every case in that slot. Time
series: one point per campaign; change points found by jumpavg. "% of native": each value as
a share of its own campaign's native mean (host drift cancels); "absolute" where no native
was measured, and for native itself.</p>
<h2>Change points</h2><table><tr><th>tunnel</th><th>workload</th><th>metric</th><th>view</th>
<th>before</th><th>after</th><th>change</th><th>verdict</th><th>from</th><th>campaign</th></tr>
{rows}</table><h2>Views</h2><ul>{views}</ul><h2>Figures</h2>{imgs}</body></html>
"""
    path = out / "index.html"
    path.write_text(doc)
    return path
