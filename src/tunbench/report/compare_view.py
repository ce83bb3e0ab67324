"""What `tunbench compare` shows (report/compare.py computes it): a table per scenario that
fits 80-100 columns, headline metrics first (what the workload declared it is judged by, then
CPU), the other metrics folded unless they changed significantly; Markdown for a CI comment;
an HTML page with an overlay figure of the two campaigns' per-second series (flent's
`-p totals` style: one colour per tunnel, A dashed, B solid). `--wide` is print_table.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass, field
from typing import Any

from . import data, metrics
from .compare import (
    HOST_DRIFT,
    IMPROVED,
    REGRESSED,
    SAME,
    SHARE,
    UNTESTED,
    Change,
    Result,
    regressions,
    verdict_line,
)
from .sentences import num

MAIN_AFTER_HEADLINE = ("cpu_busy", "cpu_per_gbit")   # beside the headline in the main table
SHORT = {IMPROVED: "improved", REGRESSED: "REGRESSED", SAME: "no sig. change",
         UNTESTED: "untested"}
NARROW_DEFAULT = 100   # piped without COLUMNS: what a CI log shows without wrapping
LEGEND = ("A → B: native in its unit; a tunnel as its share of native in the same round "
          "(its means below), which its verdict rests on; × native for costs (lower is "
          "better). --wide: CIs, test methods and every metric.")


@dataclass
class Section:
    scenario: data.Scenario
    main: list[Change] = field(default_factory=list)
    details: list[Change] = field(default_factory=list)     # changed significantly: shown
    folded: list[Change] = field(default_factory=list)      # the rest: counted, named


def _declared(c: data.Campaign, workload: str) -> list[str]:
    """The metrics the workload declared it is judged by, as its cases recorded them."""
    w = c.declared(workload)
    return list(w.headline) if w else []


def sections(res: Result) -> list[Section]:
    """One section per scenario in campaign A's order (stats sorts sweeps numerically);
    metrics headline first, then CPU, then the rest by name; tunnels in campaign order."""
    a = res.campaigns[0] if res.campaigns else None
    order = a.scenarios() if a else []
    tunnels = a.tunnels() if a else []
    by: dict[data.Scenario, list[Change]] = {}
    for ch in res.changes:
        by.setdefault((ch.workload, ch.mtu, ch.offloads), []).append(ch)
    out = []
    for scen in sorted(by, key=lambda s: order.index(s) if s in order else len(order)):
        head = (_declared(a, scen[0]) if a else []) + list(MAIN_AFTER_HEADLINE)
        sec = Section(scen)
        for ch in sorted(by[scen], key=lambda ch: _rank(ch, head, tunnels, a)):
            if ch.metric in head:
                sec.main.append(ch)
            elif ch.verdict in (IMPROVED, REGRESSED) or ch.warnings:
                sec.details.append(ch)
            else:
                sec.folded.append(ch)
        out.append(sec)
    return out


def _rank(ch: Change, head: list[str], tunnels: list[str],
          a: data.Campaign | None) -> tuple[int, str, int]:
    """Headline metrics in their declared order, then the rest by name; tunnels in campaign
    order."""
    pos = head.index(ch.metric) if ch.metric in head else len(head)
    tun = tunnels.index(ch.tunnel) if ch.tunnel in tunnels else len(tunnels)
    return pos, (a.display(ch.metric, ch.workload) if a else ch.metric).lower(), tun


def scen_title(scen: data.Scenario) -> str:
    wl, mtu, off = scen
    return f"{wl}, MTU {mtu}" + ("" if off == "default" else f", offloads {off}")


def _share(v: float | None, higher_is_better: bool) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}%" if higher_is_better else f"{v / 100:.2f}×"


def cells(res: Result, ch: Change) -> dict[str, str]:
    """The narrow view of one change: metric (name, unit, ↑/↓), A → B, change, verdict."""
    rec = res.campaigns[0].metric(ch.metric) if res.campaigns else None
    way = res.campaigns[0].direction(ch.workload) if res.campaigns else None
    unit = metrics.unit_label(ch.metric, ch.unit, rec)
    absolute = f"{num(ch.mean_a)} → {num(ch.mean_b)}"
    if ch.basis == SHARE:
        values = (f"{_share(ch.share_a, ch.higher_is_better)} → "
                  f"{_share(ch.share_b, ch.higher_is_better)}")
    else:
        values = absolute
    pct = ch.shown_change
    verdict = "host drift (ref.)" if ch.reference else SHORT.get(ch.verdict, ch.verdict)
    return {"metric": f"{metrics.display_name(ch.metric, rec, way)} ({unit}) "
                      + ("↑" if ch.higher_is_better else "↓"),
            "tunnel": ch.tunnel, "values": values,
            "absolute": absolute if ch.basis == SHARE else "",
            "change": "–" if pct is None else f"{pct:+.1f}%",
            "verdict": verdict + (" ⚠" if ch.warnings else "")}


def _folded_line(sec: Section, res: Result) -> str:
    names = list(dict.fromkeys(cells(res, c)["metric"].rsplit(" (", 1)[0] for c in sec.folded))
    return (f"{len(names)} more metric(s) with no significant change folded: "
            + "; ".join(names) + " (--wide shows them)")


WIDE = 190   # --wide: every column, wider than a terminal (as `ps ww`)


def console_width(wide: bool) -> Any:
    """The console compare prints to: the terminal's width, else COLUMNS, else 100 columns
    piped; --wide: at least WIDE columns whatever the terminal."""
    from ..shell import Console
    console = Console()
    if wide and console.width < WIDE:
        console = Console(width=WIDE)
    elif not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console = Console(width=NARROW_DEFAULT)
    return console


def print_narrow(res: Result, threshold: float, allow_untested: bool = False) -> None:
    from rich import box
    from rich.table import Table
    console = console_width(wide=False)
    console.print(f"A: {res.a}\nB: {res.b}", highlight=False, overflow="fold")
    style = {IMPROVED: "green", REGRESSED: "bold red", UNTESTED: "dim"}
    for sec in sections(res):
        table = Table(title=scen_title(sec.scenario), title_justify="left", box=box.SIMPLE_HEAD,
                      pad_edge=False, expand=False)
        for col in ("metric", "tunnel", "A → B", "change", "verdict"):   # never "tunn…"
            table.add_column(col, overflow="fold",
                             justify="right" if col in ("A → B", "change") else "left")
        last = None
        for ch in sec.main + sec.details:
            c = cells(res, ch)
            values = c["values"] + (f"\n[dim]({c['absolute']})[/dim]" if c["absolute"] else "")
            verdict = c["verdict"]
            if ch.verdict in style and not ch.reference:
                verdict = f"[{style[ch.verdict]}]{verdict}[/]"
            table.add_row(c["metric"] if c["metric"] != last else "", c["tunnel"], values,
                          c["change"], verdict, end_section=False)
            last = c["metric"]
        console.print(table)
        if sec.folded:
            console.print(f"[dim]{_folded_line(sec, res)}[/dim]", highlight=False)
    for line in res.only[:5]:
        console.print(line, highlight=False)
    if len(res.only) > 5:
        console.print(f"... {len(res.only) - 5} more only in one campaign (--wide)",
                      highlight=False)
    console.print(f"[dim]{LEGEND}[/dim]", highlight=False)
    reg = regressions(res.changes, threshold)
    for line in verdict_line(res, threshold, allow_untested):
        console.print(f"[red]{line}[/red]" if reg or line.startswith("WARNING") else line,
                      highlight=False)


# -- Markdown (a CI comment) -----------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def _md_table(res: Result, changes: list[Change]) -> list[str]:
    rows = ["| metric | tunnel | A → B | change | verdict |", "|---|---|--:|--:|---|"]
    for ch in changes:
        c = cells(res, ch)
        values = c["values"] + (f"<br><sub>{c['absolute']}</sub>" if c["absolute"] else "")
        verdict = f"**{c['verdict']}**" if ch.verdict == REGRESSED and not ch.reference \
            else c["verdict"]
        rows.append("| " + " | ".join(_md_cell(x) for x in (
            c["metric"], c["tunnel"])) + f" | {values} | {c['change']} | {verdict} |")
    return rows


def markdown(res: Result, threshold: float, allow_untested: bool = False) -> str:
    """The comparison as GitHub-flavoured Markdown: the verdict first, a table per scenario,
    the folded metrics in a <details> block."""
    reg = regressions(res.changes, threshold)
    head = "❌" if reg else "✅"
    lines = [f"### {head} tunbench compare", "", f"A: `{res.a}`  ", f"B: `{res.b}`", ""]
    lines += [f"> {ln}" for ln in verdict_line(res, threshold, allow_untested)] + [""]
    for sec in sections(res):
        lines += [f"#### {scen_title(sec.scenario)}", ""]
        lines += _md_table(res, sec.main + sec.details) + [""]
        if sec.folded:
            lines += ["<details><summary>" + _folded_line(sec, res).split(" (--wide")[0]
                      + "</summary>", ""] + _md_table(res, sec.folded) + ["", "</details>", ""]
    if res.only:
        lines += ["<details><summary>only in one campaign</summary>", ""]
        lines += [f"- {ln}" for ln in res.only] + ["", "</details>", ""]
    lines += [f"<sub>{LEGEND.replace(' --wide: CIs, test methods and every metric.', '')}"
              "</sub>", ""]
    return "\n".join(lines)


# -- HTML with the overlay figure ------------------------------------------------------------

def _runs(c: data.Campaign, scen: data.Scenario, name: str) -> dict[str, list[list[float]]]:
    per: dict[str, list[list[float]]] = {}
    for r in c.ok:
        vals = r.series.get(name)
        if r.scenario == scen and vals:
            per.setdefault(r.tunnel.label, []).append([float(v) for v in vals])
    return per


def _mean(runs: list[list[float]]) -> list[float]:
    n = max(len(r) for r in runs)
    return [sum(r[k] for r in runs if k < len(r)) / sum(1 for r in runs if k < len(r))
            for k in range(n)]


def overlay_svg(res: Result, max_panels: int = 4) -> str | None:
    """flent's `-p totals` for two campaigns: per scenario and series both campaigns hold, the
    per-second mean over rounds per tunnel, A dashed and B solid in the tunnel's colour, with
    the rounds' range shaded. None when the campaigns share no series."""
    if len(res.campaigns) < 2:
        return None
    a, b = res.campaigns
    panels = []
    for sec in sections(res):
        for wl, name in data.series_names(a):
            if wl == sec.scenario[0] and (wl, name) in data.series_names(b):
                ra, rb = _runs(a, sec.scenario, name), _runs(b, sec.scenario, name)
                if set(ra) & set(rb):
                    panels.append((sec.scenario, name, ra, rb))
    if not panels:
        return None
    import matplotlib.pyplot as plt

    from .figures.base import Palette
    panels = panels[:max_panels]
    pal = Palette(a.tunnels() + [t for t in b.tunnels() if t not in a.tunnels()])
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.8 * len(panels) + 0.6),
                             squeeze=False, layout="constrained")
    for ax, (scen, name, ra, rb) in zip([row[0] for row in axes], panels):
        for tun in [t for t in pal.colors if t in ra or t in rb]:
            for runs, style, side in ((ra.get(tun), "--", "A"), (rb.get(tun), "-", "B")):
                if not runs:
                    continue
                mean = _mean(runs)
                xs = list(range(1, len(mean) + 1))
                ax.plot(xs, mean, style, color=pal(tun), lw=1.6, label=f"{tun} ({side})")
                if len(runs) > 1:
                    n = len(mean)
                    lo = [min(r[k] for r in runs if k < len(r)) for k in range(n)]
                    hi = [max(r[k] for r in runs if k < len(r)) for k in range(n)]
                    ax.fill_between(xs, lo, hi, color=pal(tun), alpha=0.12, lw=0)
        unit = a.unit_label(name, data.metric_unit(a.cases, name))
        ax.set_title(f"{a.display(name)}, {scen_title(scen)}")
        ax.set_ylabel(unit)
        ax.set_xlabel("time (s, after warm-up)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.suptitle("A (dashed) against B (solid): per-second mean over rounds, range shaded")
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def html_page(res: Result, threshold: float, allow_untested: bool = False) -> str:
    from .html import STYLE, esc
    svg = overlay_svg(res)
    parts = [f"<h1>tunbench compare</h1><p>A: <code>{esc(res.a)}</code><br>B: "
             f"<code>{esc(res.b)}</code></p>"]
    parts += [f"<p><b>{esc(ln)}</b></p>" for ln in verdict_line(res, threshold,
                                                                 allow_untested)]
    if svg is not None:
        b64 = base64.b64encode(svg.encode()).decode("ascii")
        parts.append('<figure id="overlay"><img alt="A against B over time" '
                     f'src="data:image/svg+xml;base64,{b64}"><figcaption>Per-second series '
                     "of both campaigns on the same axes (as flent's totals plot): A dashed, "
                     "B solid, one colour per tunnel.</figcaption></figure>")
    for sec in sections(res):
        parts.append(f"<h2>{esc(scen_title(sec.scenario))}</h2>")
        parts.append(_html_table(res, sec.main + sec.details))
        if sec.folded:
            parts.append(f"<details><summary>{esc(_folded_line(sec, res).split(' (--wide')[0])}"
                         f"</summary>{_html_table(res, sec.folded)}</details>")
    if res.only:
        parts.append("<details><summary>only in one campaign</summary><ul>"
                     + "".join(f"<li>{esc(x)}</li>" for x in res.only) + "</ul></details>")
    parts.append(f"<p><small>{esc(LEGEND)}</small></p>")
    return ("<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport "
            'content="width=device-width,initial-scale=1"><title>tunbench compare</title>'
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")


def _html_table(res: Result, changes: list[Change]) -> str:
    from .html import esc
    rows = ["<table><tr><th>metric</th><th>tunnel</th><th>A → B</th><th>change</th>"
            "<th>verdict</th></tr>"]
    for ch in changes:
        c = cells(res, ch)
        small = f"<br><small>{esc(c['absolute'])}</small>" if c["absolute"] else ""
        cls = ' class="bad"' if ch.verdict == REGRESSED and not ch.reference else ""
        rows.append(f"<tr{cls}><td class=l>{esc(c['metric'])}</td><td class=l>"
                    f"{esc(c['tunnel'])}</td><td>{esc(c['values'])}{small}</td><td>"
                    f"{esc(c['change'])}</td><td class=l>{esc(c['verdict'])}</td></tr>")
    return "".join(rows) + "</table>"


def _share_cell(share: float | None, ci: tuple[float, float] | None) -> str:
    if share is None:
        return "–"
    return f"{share:.1f}%" + (f"\n{ci[0]:.1f}–{ci[1]:.1f}%" if ci else "\nn=1")


def print_table(res: Result, threshold: float, allow_untested: bool = False) -> None:
    """--wide: every metric and every column (CIs, shares, methods), headline metrics first;
    the default view is print_narrow."""
    from rich.table import Table

    console = console_width(wide=True)
    table = Table(title=f"{res.a} → {res.b}")
    for col in ("tunnel", "workload", "MTU", "metric", "A mean ± CI", "B mean ± CI", "change",
                "A % of native", "B % of native", "change of share", "verdict", "rests on"):
        table.add_column(col, justify="right" if col in ("MTU", "change", "change of share")
                         else "left")
    style = {IMPROVED: "green", REGRESSED: "red", SAME: "", UNTESTED: "dim"}
    ordered = [c for sec in sections(res)
               for c in sec.main + sec.details + sec.folded]
    for c in ordered:
        ha, hb = (c.ci_a[1] - c.mean_a), (c.ci_b[1] - c.mean_b)
        pct = "–" if c.change_pct is None else f"{c.change_pct:+.1f}%"
        spct = "–" if c.share_change_pct is None else f"{c.share_change_pct:+.1f}%"
        rec = res.campaigns[0].metric(c.metric) if res.campaigns else None
        way = res.campaigns[0].direction(c.workload) if res.campaigns else None
        unit = metrics.unit_label(c.metric, c.unit, rec)
        verdict = f"[{style[c.verdict]}]{c.verdict}[/]" if style[c.verdict] else c.verdict
        if c.warnings:
            verdict += f"\n[yellow]⚠ not comparable: {', '.join(c.warnings)}[/]"
        basis = "native (reference)" if c.reference else f"{c.basis}, {c.method}"
        table.add_row(c.tunnel, c.workload, str(c.mtu),
                      f"{metrics.display_name(c.metric, rec, way)} ({unit})"
                      + (" ↑" if c.higher_is_better else " ↓"),
                      f"{num(c.mean_a)} ± {num(ha)}", f"{num(c.mean_b)} ± {num(hb)}", pct,
                      _share_cell(c.share_a, c.share_ci_a), _share_cell(c.share_b, c.share_ci_b),
                      spct, verdict, basis)
    console.print(table)
    for line in res.only:
        console.print(line, highlight=False)
    if any(c.reference for c in res.changes):
        console.print(f"[dim]{HOST_DRIFT}; tunnels' verdicts rest on their share of native "
                      "where both campaigns measured it[/dim]", highlight=False)
    reg = regressions(res.changes, threshold)
    for line in verdict_line(res, threshold, allow_untested):
        console.print(f"[red]{line}[/red]" if reg or line.startswith("WARNING") else line,
                      highlight=False)
