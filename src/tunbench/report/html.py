"""One self-contained HTML file per campaign: DIR/report/index.html.

It opens offline: figures are embedded as data: URIs (SVG), styles are inline, there is no
script, and a Content-Security-Policy forbids every fetch, so a browser neither loads nor
tries to load anything else. Links to each case's raw JSON are relative (../cases/X.json).
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from pathlib import Path
from typing import Any

from ..results.fingerprint import show
from . import axes, data, distance, hops, hubs, mesh, sitesize, stats, tradeoff
from .data import Campaign, Scenario
from .figures import Figure
from .takeaways import Takeaway, num

WIDE_TABLE = 12  # more metrics than this: one row per metric instead of one column
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
OFFLOAD_KEYS = ("tcp-segmentation-offload", "generic-segmentation-offload",
                "generic-receive-offload", "rx-gro-list", "rx-udp-gro-forwarding",
                "tx-checksumming", "rx-checksumming", "tx-udp_tnl-segmentation",
                "large-receive-offload")

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;
 color:#1d2330;background:#fff;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:18px 28px 60px}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.25em;margin-top:1.8em;border-bottom:2px solid
 #e3e7ef;padding-bottom:4px}h3{font-size:1.05em;margin:1.2em 0 .4em}
.meta{color:#5b6475;font-size:.92em}
.takeaways{background:#f3f6fb;border-left:4px solid #3b6fd8;padding:10px 18px 10px 34px}
.takeaways li{margin:.35em 0}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.88em}
th,td{border:1px solid #d9dee8;padding:3px 8px;text-align:right;vertical-align:top}
td{white-space:nowrap}td.bad{white-space:normal}
th{background:#eef1f7}td.l,th.l{text-align:left}
tr.native td{background:#fafbfd}
.noisy{color:#a15c00;font-weight:600}.bad{color:#b3261e;font-weight:600}
.ok{color:#1b7f3b}
figure{margin:18px 0 26px;padding:0;display:inline-block;vertical-align:top;max-width:100%;margin-right:18px}figure img{max-width:100%;height:auto;
 border:1px solid #eceff5}
figcaption{font-size:.86em;color:#4a5263;margin-top:4px}
pre{background:#f6f7f9;padding:8px;overflow-x:auto;font-size:.82em;text-align:left}
nav a{margin-right:14px}
.warn{background:#fff4e5;border-left:4px solid #c77700;padding:4px 14px;margin:10px 0}
code{font-size:.92em;word-break:break-all}
h1,h2,h3,p,li,figcaption{overflow-wrap:anywhere}
.tw{overflow-x:auto;max-width:100%}
nav{display:flex;flex-wrap:wrap;gap:4px 0}
details{margin:.2em 0 1em}summary{cursor:pointer;color:#3b4a6b;font-size:.9em}
@media (max-width:640px){
 main{padding:10px 12px 40px}
 table.cards thead{display:none}
 table.cards,table.cards tbody,table.cards tr,table.cards td{display:block}
 table.cards tr{border:1px solid #d9dee8;margin:0 0 10px}
 table.cards td{border:none;border-top:1px solid #eef1f7;white-space:normal;text-align:right}
 table.cards td[data-label]::before{content:attr(data-label);float:left;text-align:left;
  color:#4a5263;font-weight:600;margin-right:10px;max-width:62%}
 table.cards td.t{font-weight:700;text-align:left;background:#eef1f7;border-top:none}
 table.cards td::after{content:"";display:block;clear:both}
 .tw table:not(.cards) tr>:first-child{position:sticky;left:0;background:#fff;z-index:1;
  min-width:10em;max-width:45vw;white-space:normal}
 .tw table:not(.cards) tr>th:first-child{background:#eef1f7}
}
@media (max-width:700px){
 figure{display:block;margin-right:0;overflow-x:auto}
 figure img{max-width:none;width:auto}}
"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _when(ts: float | None) -> str:
    if not ts:
        return "?"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _ci(r: stats.Row) -> str:
    s = r.stats
    if s.n < 2:
        return f"{stats.bound_mark(r)}{num(s.mean)} (n=1)"
    return f"{stats.bound_mark(r)}{num(s.mean)} ± {num(s.ci95_high - s.mean)}"


def _value_cell(r: stats.Row, extra: str = "") -> str:
    """A table cell: mean ± CI (≥ for a lower bound), flagged ⚠ when noisy; `extra` is HTML
    appended inside the cell."""
    flag = (f' class=noisy title="noisy: CV {100 * (r.stats.cv or 0):.0f}%"'
            if r.noisy else "")
    return f"<td{flag}>{esc(_ci(r))}{' ⚠' if r.noisy else ''}{extra}</td>"


def scenario_title(scen: Scenario) -> str:
    wl, mtu, off = scen
    return f"{wl} — underlay MTU {mtu}" + ("" if off == "default" else f" — offloads {off}")


KEY_METRICS = ("cpu_busy", "cpu_per_gbit")   # beside the headline in a scenario's main table
CPU_RANGE = ("cpu_busy_min", "cpu_busy_max")  # shown inside the CPU busy cell


def _head(c: Campaign, metric: str, unit: str, hib: bool, workload: str) -> str:
    arrow = "↑" if hib else "↓"
    return (f'<span title="{esc(metric)}">{esc(c.display(metric, workload))}</span> '
            f"{arrow}<br><small>{esc(c.unit_label(metric, unit))}</small>")


def summary_tables(c: Campaign) -> str:
    """Per scenario: a main table a reader can take in at a glance (the headline metric with
    its share of native, CPU busy with its min-max, CPU per Gbit/s), every further metric in a
    folded table with one row per metric. On a phone the main table becomes one card per
    tunnel (each cell labelled), and every table scrolls inside its own box, never the page."""
    parts = []
    for scen in c.scenarios():
        head = data.headline_metric(c, scen[0])
        rows = [r for r in c.rows if (r.workload, r.mtu, r.offloads) == scen]
        metrics = list(dict.fromkeys(r.metric for r in rows))
        metrics.sort(key=lambda m: (m != head, m != "cpu_busy", m != "cpu_per_gbit"))
        pct_cols = {m for m in metrics if m in (head, "cpu_per_gbit")}
        parts.append(f"<h3>{esc(scenario_title(scen))}</h3>")
        if len(metrics) > WIDE_TABLE:
            parts.append(_metric_rows_table(c, rows, metrics, pct_cols))
            continue
        key = [m for m in metrics if m == head or m in KEY_METRICS]
        rest = [m for m in metrics if m not in key and m not in CPU_RANGE]
        parts.append(_main_table(c, rows, key, pct_cols))
        if rest:
            parts.append(f"<details><summary>{len(rest)} more metric(s): "
                         f"{esc(', '.join(c.display(m, scen[0]) for m in rest))}</summary>"
                         + _metric_rows_table(c, rows, rest, set()) + "</details>")
    if any(r.noisy for r in c.rows):
        parts.append(f"<p class=meta>⚠ noisy: coefficient of variation above "
                     f"{stats.NOISY_CV:.0%} over the repeats. ↑ higher is better, ↓ lower is "
                     "better.</p>")
    if any(r.bound for r in c.rows):
        parts.append(f"<p class=meta>{esc(stats.BOUND_NOTE)}.</p>")
    if any(r.kind == "native" for r in c.rows):
        parts.append("<p class=meta>Native is the reference of every share: its own row shows "
                     "100% (ref.), not a measurement. A share (or multiple) of native is paired "
                     "round by round: the geometric mean of each round's value over native's "
                     "in that round (or of the case's own share, where it measured native "
                     "beside it in turn within seconds), with its 95% CI below it "
                     "(asymmetric; docs/methodology.md).</p>")
    return "\n".join(parts)


def _cpu_cell(trs: dict[str, stats.Row], label: str) -> str:
    r = trs["cpu_busy"]
    lo, hi = trs.get("cpu_busy_min"), trs.get("cpu_busy_max")
    rng = (f"<br><small>min–max {num(max(lo.stats.mean, 0.0))}–"
           f"{num(min(hi.stats.mean, 100.0))}</small>" if lo and hi else "")
    return _value_cell(r, rng).replace("<td", f'<td data-label="{esc(label)}"', 1)


def _vs_native_cell(r: stats.Row, label: str) -> str:
    """The paired per-round share (or multiple) with its asymmetric 95% CI below it."""
    ref = stats.is_reference(r)
    text = "100% (ref.)" if ref and r.higher_is_better else \
        "1.00× (ref.)" if ref else stats.vs_native(r)
    ci = "" if ref else stats.vs_native_ci(r)
    small = f"<br><small>{esc(ci)}</small>" if ci else ""
    return f'<td data-label="{esc(label)}">{esc(text)}{small}</td>'


def _main_table(c: Campaign, rows: list[stats.Row], metrics: list[str],
                pct_cols: set[str]) -> str:
    first = {m: next(r for r in rows if r.metric == m) for m in metrics}
    wl = rows[0].workload   # one scenario: its per-site metrics named by its direction
    heads = ["<thead><tr><th class=l>tunnel</th><th>n</th>"]
    labels: dict[str, str] = {}
    for m in metrics:
        f = first[m]
        labels[m] = f"{c.display(m, wl)} ({c.unit_label(m, f.unit)})"
        heads.append(f"<th>{_head(c, m, f.unit, f.higher_is_better, wl)}</th>")
        if m in pct_cols:
            heads.append("<th>% of<br>native</th>" if f.higher_is_better else
                         "<th>×<br>native</th>")
    heads.append("</tr></thead>")
    out = ["<table class=cards>", *heads, "<tbody>"]
    for tun in c.tunnels():
        trs = {x.metric: x for x in rows if x.tunnel == tun}
        if not trs:
            continue
        cls = " class=native" if c.is_reference(tun) else ""
        n = max(x.stats.n for x in trs.values())
        out.append(f'<tr{cls}><td class="l t">{esc(tun)}</td><td data-label="n">{n}</td>')
        for m in metrics:
            r = trs.get(m)
            nat = ("% of native" if first[m].higher_is_better else "× native") + \
                f" ({c.display(m, wl)})"
            if r is None:
                out.append(f'<td data-label="{esc(labels[m])}">–</td>'
                           + (f'<td data-label="{esc(nat)}">–</td>' if m in pct_cols else ""))
                continue
            out.append(_cpu_cell(trs, labels[m]) if m == "cpu_busy" else
                       _value_cell(r).replace("<td", f'<td data-label="{esc(labels[m])}"', 1))
            if m in pct_cols:
                out.append(_vs_native_cell(r, nat))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _metric_rows_table(c: Campaign, rows: list[stats.Row], metrics: list[str],
                       pct_cols: set[str]) -> str:
    """One row per metric and one column per tunnel (loss-search has dozens of metrics, and
    the further metrics of any scenario), so the table grows downwards."""
    tuns = [t for t in c.tunnels() if any(r.tunnel == t for r in rows)]
    by = {(r.tunnel, r.metric): r for r in rows}
    out = ["<table><thead><tr><th class=l>metric</th><th class=l>unit</th>"]
    out += [f"<th>{esc(t)}<br><small>n={max(r.stats.n for r in rows if r.tunnel == t)}"
            "</small></th>" for t in tuns]
    out.append("</tr></thead><tbody>")
    for m in metrics:
        first = next(r for r in rows if r.metric == m)
        arrow = "↑" if first.higher_is_better else "↓"
        out.append(f'<tr><td class=l title="{esc(m)}">{esc(c.display(m, first.workload))} '
                   f"{arrow}</td><td class=l>{esc(c.unit_label(m, first.unit))}</td>")
        for t in tuns:
            r = by.get((t, m))
            if r is None:
                out.append("<td>–</td>")
                continue
            rel = "100% (ref.)" if stats.is_reference(r) else stats.vs_native(r)
            ci = stats.vs_native_ci(r)
            pct = (f"<br><small>{esc(rel)} {'of ' if rel.endswith('%') else ''}native"
                   + (f" ({esc(ci)})" if ci else "") + "</small>"
                   if m in pct_cols and r.pct_of_native is not None
                   and not stats.is_reference(r)
                   else "<br><small>reference</small>" if m in pct_cols
                   and stats.is_reference(r) else "")
            out.append(_value_cell(r, pct))
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def figure_html(f: Figure) -> str:
    b64 = base64.b64encode(f.svg.read_bytes()).decode("ascii")
    return (f'<figure id="{esc(f.name)}"><img alt="{esc(f.title)}" '
            f'src="data:image/svg+xml;base64,{b64}"><figcaption><b>{esc(f.title)}.</b> '
            f'{esc(f.caption)} Files: <a href="{esc(f.png.name)}">PNG</a>, '
            f'<a href="{esc(f.svg.name)}">SVG</a>.</figcaption></figure>')


def notes_html(c: Campaign) -> str:
    notes = data.case_notes(c.cases)
    if not notes:
        return "<p>No case carries a note.</p>"
    items = "".join(f"<li><b>{esc(', '.join(tuns))}</b> ({esc(wl)}): {esc(note)}</li>"
                    for wl, note, tuns in notes)
    return f"<ul class=notes>{items}</ul>"


def failed_html(c: Campaign) -> str:
    if not c.failed:
        return "<p class=ok>No case failed.</p>"
    out = ["<table><tr><th class=l>case</th><th class=l>error</th></tr>"]
    for r in c.failed:
        log = (f"<details><summary>log tail</summary><pre>{esc(r.error_log)}</pre>"
               "</details>" if r.error_log else "")
        out.append(f'<tr><td class=l><a href="../{esc(r.path)}">{esc(r.id)}</a></td>'
                   f"<td class='l bad'>{esc(r.error or r.status)}{log}</td></tr>")
    out.append("</table>")
    return "".join(out)


def cases_html(c: Campaign) -> str:
    out = ["<table><tr><th class=l>case (raw JSON)</th><th class=l>tunnel</th>"
           "<th class=l>workload</th><th>MTU</th><th class=l>offloads</th><th>repeat</th>"
           "<th class=l>status</th><th>headline</th><th>CPU busy</th></tr>"]
    for r in c.cases:
        head = data.headline_metric(c, r.workload.name)
        v = r.value(head) if head else None
        m = r.metrics.get(head or "")
        unit = m.unit if m else ""
        cpu = r.value("cpu_busy")
        st = r.status
        out.append(
            f'<tr><td class=l><a href="../{esc(r.path)}">{esc(r.id)}</a></td>'
            f"<td class=l>{esc(r.tunnel.label)}</td>"
            f"<td class=l>{esc(r.workload.name)}</td><td>{esc(r.mtu)}</td>"
            f"<td class=l>{esc(r.offloads)}</td><td>{esc(r.repeat)}</td>"
            f"<td class='l {'ok' if st == 'ok' else 'bad'}'>{esc(st)}</td>"
            f"<td>{esc(f'{num(v)} {unit}') if v is not None else '–'}</td>"
            f"<td>{esc(f'{cpu:.0f}%') if cpu is not None else '–'}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _offload_rows(c: Campaign) -> list[tuple[str, str, dict[str, str]]]:
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for r in c.ok:
        before = r.offload_state.get("before") or {}
        sites = r.testbed.get("sites") or {}
        for key, feats in before.items():
            ns, _, ifn = key.partition("/")
            site = next((s for s, v in sites.items() if v.get("netns") == ns), ns)
            role = "underlay" if any(v.get("underlay_if") == ifn for v in sites.values()) \
                else f"{r.tunnel.label} device"
            seen.setdefault((f"site {site}", role), feats)
    return [(s, r, f) for (s, r), f in seen.items()]


def env_html(c: Campaign) -> str:
    env, exp = c.env, c.index.get("experiment") or {}
    items = [("kernel", f"{env.get('kernel', '?')} {env.get('kernel_version', '')}"),
             ("CPU", f"{env.get('cpu_model', '?')} × {env.get('cpus', '?')}"),
             ("machine", env.get("machine")), ("host", env.get("hostname")),
             ("python", env.get("python")), ("tunbench", env.get("tunbench")),
             ("duration / warm-up", f"{exp.get('duration')} s / {exp.get('warmup')} s"),
             ("repeats", exp.get("repeats") if exp.get("repeats") is not None else
              f"sequential: rounds until decided, at most {exp.get('max_rounds')} and "
              f"{float(exp.get('budget') or 0) / 60:g} min"),
             ("underlay MTUs", show(exp.get("mtus"))),
             ("rate (tbf shaping)", show(exp.get("rate"))), ("order", exp.get("order")),
             ("inner address family", f"IPv{exp.get('family', 4)}")]
    shared = any(r.shares_cpus for r in c.ok)
    if shared:
        items.append(("CPU note", "both sites share this host's CPUs: CPU figures are the "
                      "cost of both ends together"))
    out = ["<table>"] + [f"<tr><th class=l>{esc(k)}</th><td class=l>{esc(v)}</td></tr>"
                         for k, v in items]
    for tool, ver in sorted((env.get("tools") or {}).items()):
        if ver:
            out.append(f"<tr><th class=l>{esc(tool)}</th><td class=l>{esc(ver)}</td></tr>")
    out.append("</table>")
    offl = _offload_rows(c)
    if offl:
        keys = [k for k in OFFLOAD_KEYS if any(k in f for _, _, f in offl)]
        out.append("<h3>Offloads (ethtool -k, before each workload)</h3><table><tr>"
                   "<th class=l>site</th><th class=l>interface</th>"
                   + "".join(f"<th>{esc(k)}</th>" for k in keys) + "</tr>")
        for site, role, feats in offl:
            out.append(f"<tr><td class=l>{esc(site)}</td><td class=l>{esc(role)}</td>"
                       + "".join(f"<td>{esc(feats.get(k, '–'))}</td>" for k in keys) + "</tr>")
        out.append("</table>")
    return "".join(out)


def incomplete_html(c: Campaign) -> str:
    """A campaign cut short or with case files gone says so above everything else: which
    cases are pending or missing, and the command that resumes it."""
    f = c.folder
    if not f.incomplete and not f.missing:
        return ""
    out = ["<div class=warn>"]
    if f.incomplete:
        out.append(f"<p><b>Incomplete campaign</b> (state {esc(f.state)}): "
                   f"{len(f.pending)} case(s) pending; figures cover only what was recorded. "
                   f"Continue it with <code>{esc(f.resume_command)}</code>.</p>")
        if f.pending:
            out.append("<p>Pending: " + ", ".join(f"<code>{esc(p)}</code>" for p in f.pending)
                       + "</p>")
    if f.missing:
        out.append(f"<p><b>{len(f.missing)} case file(s) missing</b> (listed in index.json, "
                   "not in cases/): " + ", ".join(f"<code>{esc(m)}</code>" for m in f.missing)
                   + "</p>")
    out.append("</div>")
    return "".join(out)


def render(c: Campaign, figs: list[Figure], takes: list[Takeaway], out: Path,
           decision: str = "") -> Path:
    """The page; `decision` is the decision summary's section (report/advise_view.py), shown
    first, and the take-aways are the selected few with the full list folded
    (report/headlines.py)."""
    from .advise_view import STYLE as DECISION_STYLE
    from .headlines import html_section
    exp = c.index.get("experiment") or {}
    ok, failed = len(c.ok), len(c.failed)
    tuns, wls = c.planned()
    title = f"tunbench report — {c.root.name}" + (" (incomplete)" if c.folder.incomplete
                                                  else "")
    body = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title><style>{STYLE}{DECISION_STYLE}</style></head>
<body><main>
<h1>{esc(title)}</h1>
<p class=meta>{esc(exp.get('name', 'campaign'))}: {ok} case(s) ok, {failed} failed or skipped;
state {esc(c.folder.state)}; started {esc(_when(c.index.get('created')))},
finished {esc(_when(c.index.get('finished')))}. Tunnels: {esc(', '.join(tuns) or 'none')}.
Workloads: {esc(', '.join(wls) or 'none')}.</p>
{incomplete_html(c)}
{decision}
<nav>{'<a href="#decision">Decision</a>' if decision else ''}<a href="#takeaways">Take-aways</a><a href="#tables">Tables</a><a href="#figures">Figures</a>
<a href="#notes">Notes</a><a href="#failed">Failed cases</a><a href="#cases">All cases</a><a href="#env">Environment</a>
<a href="results.csv">results.csv</a></nav>
<h2 id=takeaways>Take-aways</h2>{html_section(takes)}
<h2 id=tables>Results (mean ± 95% confidence interval over repeats)</h2>
{summary_tables(c)}
{hops.chain_html(c.cases)}{hops.section_html(c.cases)}
{hubs.section_html(c.cases)}{mesh.section_html(c)}{sitesize.section_html(c)}{distance.section_html(c)}{axes.rate_section_html(c)}
{tradeoff.section_html(c)}
<h2 id=figures>Figures</h2>
{''.join(figure_html(f) for f in figs) or '<p>No figure: no ok case.</p>'}
<h2 id=notes>Notes on cases ({len(data.case_notes(c.cases))})</h2>
{notes_html(c)}
<h2 id=failed>Failed or skipped cases ({failed})</h2>
{failed_html(c)}
<h2 id=cases>All cases</h2>
{cases_html(c)}
<h2 id=env>Environment</h2>
{env_html(c)}
</main></body></html>
"""
    # every table scrolls inside its own box: the page itself never scrolls sideways
    body = body.replace("<table", "<div class=tw><table").replace("</table>", "</table></div>")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(body, encoding="utf-8")
    return path
