"""The decision summary and the advice as a reader sees them: a rich table in the terminal,
a section at the top of the HTML report. The figures come from report/advise.py."""

from __future__ import annotations

import html
from typing import Any

from .advise import Advice, Figure, Method, decision_text
from .advise_figures import FIGURES

REF = "reference"


def _ci(fig: Figure, unit: str) -> str:
    """The figure's 95% CI as its two bounds (asymmetric for a share or a multiple)."""
    e = fig.est
    lo, hi = e.ci_low, e.ci_high
    assert lo is not None and hi is not None
    if unit == "%":
        return f"{lo:.1f}–{hi:.1f}%"
    if unit == "×":
        return f"{lo:.2f}–{hi:.2f}×"
    return f"{_num(lo)} to {_num(hi)}"


def _num(v: float) -> str:
    a = abs(v)
    return f"{v:,.0f}" if a >= 100 else f"{v:.3g}" if a >= 1 else f"{v:.2g}"


def cell(fig: Figure | None, unit: str, reference: bool = False,
         signed: bool = False) -> tuple[str, str]:
    """(figure, its confidence) for one table cell: '91.1%', 'n=3, CI 85.0–97.4%' /
    'untested (n=1)'."""
    if reference:
        return ("100%" if unit == "%" else "1.00×" if unit == "×" else "0"), REF
    if fig is None:
        return "–", ""
    v = fig.est.mean
    txt = (f"{v:.1f}%" if unit == "%" else f"{v:.2f}×" if unit == "×" else
           f"{'+' if signed and v >= 0 else ''}{_num(v)} {unit}")
    return txt, ("untested (n=1)" if fig.untested else f"n={fig.n}, CI {_ci(fig, unit)}")


COLUMNS = ("method", "encrypts", "MTU left", "throughput, 1 stream (% of native)",
           "throughput, best stream count (% of native)", "CPU per Gbit/s (× native)",
           "latency added p50", "latency added p99", "NDR packets/s (% of native)",
           "PDR packets/s (% of native)", "RFC 2544 packets/s (% of native)")
SHORT = ("method", "encrypts", "MTU\nleft", "1 stream\n% native", "best streams\n% native",
         "CPU/Gbit\n× native", "latency\nadded p50", "latency\nadded p99", "NDR pps\n% native",
         "PDR pps\n% native", "RFC 2544\npps % native")
LOSS = ("ndr", "pdr", "rfc2544")
RELAY_MTU = "n/a (TCP relay)"


def ordered(a: Advice) -> list[Method]:
    """Native (the reference), the ranked methods in rank order, then the excluded ones."""
    first = [m for m in a.methods if m.reference] + [m for _, m, _ in a.ranked]
    return first + [m for m in a.methods if m not in first]


def rows(a: Advice) -> list[list[tuple[str, str]]]:
    """One row per method, in ordered(a): (text, confidence) per column, as both renderings
    show them."""
    out = []
    for m in ordered(a):
        single, best = m.single(), m.best()
        n = a.streams if a.streams is not None else (single[0] if single else None)
        unit = _latency_unit(a)
        cpu = m.cpu.get(n) if n is not None else None
        loss = [m.loss.get((g, a.frame_size)) if a.frame_size else None for g in LOSS]
        out.append([
            (m.label, REF if m.reference else ""),
            _encrypts(m),
            (RELAY_MTU if m.relay else str(m.mtu_left) if m.mtu_left else "–", ""),
            _with_streams(cell(single[1] if single else None, "%", m.reference and bool(single)),
                          single[0] if single and single[0] != 1 else None),
            _with_streams(cell(best[1] if best else None, "%", m.reference and bool(best)),
                          best[0] if best else None) if len(m.share) > 1 else
            ("–", ""),
            cell(cpu, "×", m.reference and cpu is not None),
            cell(m.latency.get("p50"), unit, m.reference and "p50" in m.latency, signed=True),
            cell(m.latency.get("p99"), unit, m.reference and "p99" in m.latency, signed=True),
            *(_with_size(cell(f, "%", m.reference and any(g == x for x, _ in m.loss)),
                         a.frame_size) for f, g in zip(loss, LOSS, strict=True)),
        ] if not m.failed else [
            (m.label, ""), _encrypts(m), ("–", ""),
            ("failed", m.failed[0][:80]), *([("–", "")] * (len(COLUMNS) - 4))])
    return out


def _encrypts(m: Method) -> tuple[str, str]:
    """'yes', 'no', or 'yes' with 'gateways: ipsec (libipsec)' for a chain whose gateways
    encrypt what the method itself does not."""
    if m.gateways and m.gateway_encrypts:
        return "yes", f"gateways: {m.gateways}"
    return ("yes" if m.encrypts else "no"), ""


def _with_size(c: tuple[str, str], size: str | None) -> tuple[str, str]:
    return c if size is None or c[0] == "–" else (f"{c[0]} @{size}", c[1])


def shown(table: list[list[tuple[str, str]]]) -> list[int]:
    """The columns some row fills: a campaign without latency or with one stream count does
    not show empty columns for them (the notes say what would fill them)."""
    return [i for i in range(len(COLUMNS))
            if i < 3 or any(row[i][0] not in ("–", "") for row in table)]


def _latency_unit(a: Advice) -> str:
    return next((m.latency_unit for m in a.methods if m.latency_unit), "µs")


def _with_streams(c: tuple[str, str], streams: int | None) -> tuple[str, str]:
    if streams is None or c[0] == "–":
        return c
    return f"{c[0]} @{streams}", c[1]


def _rank_line(rank: int, m: Method, fig: Figure, tied: bool, a: Advice,
               against: str) -> str:
    spec = FIGURES[str(a.constraints.prefer)]
    unit = _latency_unit(a) if spec.unit == "latency" else spec.unit
    value, conf = cell(fig, unit, signed=spec.unit == "latency")
    return (f"{rank}{'=' if tied else '.'} {m.label}: {value} ({conf})"
            + (" (encrypts)" if m.encrypts else "") + (f"; {against}" if against else ""))


def rank_lines(a: Advice) -> list[str]:
    """One line per ranked method, with its decision against the one above it."""
    out = []
    for i, ((r, m, f), d) in enumerate(zip(a.ranked, a.decisions, strict=True)):
        tied = (i > 0 and a.ranked[i - 1][0] == r) or (
            i + 1 < len(a.ranked) and a.ranked[i + 1][0] == r)
        out.append(_rank_line(r, m, f, tied, a, decision_text(d)))
    return out


def excluded_lines(a: Advice) -> list[str]:
    return [f"{m.label}: {'; '.join(why)}" for m, why in a.excluded]


# -- terminal -------------------------------------------------------------------------------

def print_advice(a: Advice, console: Any = None, ranking: bool = True) -> None:
    """The decision summary table, then (with `ranking`) the constraints, the ranking, the
    excluded methods and why, and the verdict."""
    from rich.markup import escape
    from rich.table import Table

    from ..shell import Console
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
    table = Table(title="decision summary (vs native in the same round; 95% CI, n rounds)")
    body = rows(a)
    cols = shown(body)
    for i in cols:
        table.add_column(SHORT[i], justify="left" if i == 0 else "right")
    for row in body:
        table.add_row(*[escape(t) if not conf else f"{escape(t)}\n[dim]{escape(conf)}[/dim]"
                        for t, conf in (row[i] for i in cols)])
    console.print(table)
    for note in a.notes:
        console.print(f"[dim]note: {escape(note)}[/dim]", highlight=False)
    if not ranking:
        return
    console.print(escape(f"constraints: {a.constraints.describe()}; ranked by {a.basis}"),
                  highlight=False)
    for line in rank_lines(a):
        console.print(f"  {escape(line)}", highlight=False)
    for line in excluded_lines(a):
        console.print(f"  [yellow]excluded[/yellow] {escape(line)}", highlight=False)
    console.print(f"[bold]{escape(a.verdict)}[/bold]", highlight=False)


# -- HTML -----------------------------------------------------------------------------------

def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


STYLE = """
.decision{background:#f3f6fb;border-left:4px solid #1b7f3b;padding:6px 18px 10px}
.decision .verdict{font-weight:600;font-size:1.05em}
.decision small{color:#5b6475}
"""


def section_html(a: Advice) -> str:
    """The report's first screen: the verdict, the summary table, the ranking and the
    excluded methods (id=decision)."""
    table = rows(a)
    cols = shown(table)
    head = "".join(f"<th{' class=l' if i == 0 else ''}>{esc(COLUMNS[i])}</th>" for i in cols)
    body = []
    for row, m in zip(table, ordered(a), strict=True):
        cells = "".join(
            f"<td{' class=l' if i == 0 else ''} data-label=\"{esc(COLUMNS[i])}\">"
            f"{esc(row[i][0])}" + (f" <small>{esc(row[i][1])}</small>" if row[i][1] else "")
            + "</td>" for i in cols)
        body.append(f"<tr{' class=native' if m.reference else ''}>{cells}</tr>")
    ranks = "".join(f"<li>{esc(line)}</li>" for line in rank_lines(a))
    excl = "".join(f"<li>{esc(line)}</li>" for line in excluded_lines(a))
    notes = "".join(f"<li>{esc(n)}</li>" for n in a.notes)
    return (f"<section class=decision id=decision><h2>Decision summary</h2>"
            f"<p class=verdict>{esc(a.verdict)}</p>"
            f"<p class=meta>Constraints: {esc(a.constraints.describe())}; ranked by "
            f"{esc(a.basis)}. Same options as <code>tunbench advise</code>.</p>"
            f"<table class=cards><thead><tr>{head}</tr></thead><tbody>{''.join(body)}"
            "</tbody></table>"
            + (f"<p><b>Ranking</b></p><ul class=ranking>{ranks}</ul>" if ranks else "")
            + (f"<p><b>Excluded</b></p><ul class=excluded>{excl}</ul>" if excl else "")
            + "<p class=meta>Every share and multiple is taken round by round against native "
            "measured in the same round (a stream case that measured native beside it: against "
            "those bursts), on the log scale: the geometric mean of the rounds' "
            "ratios and its 95% confidence interval (asymmetric; docs/methodology.md); n the "
            "number of rounds; untested: a single run, no interval. A rank is shared unless "
            "the two neighbours are decided different.</p>"
            + (f"<ul class=meta>{notes}</ul>" if notes else "") + "</section>")
