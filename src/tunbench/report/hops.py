"""Per-hop figures of chain campaigns (chain/hops.py records them in each case's `chain`
section): the path with each hop's namespace, the routers the TTL counted, the latency each
hop adds, and a per-hop drop table naming the hop where packets were lost. Campaigns without
a chain show nothing."""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console
from rich.table import Table


def chained(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in cases if d.get("status") == "ok" and (d.get("chain") or {}).get("drops")]


def _label(d: dict[str, Any]) -> str:
    cs = d["case"]
    return f"{cs['tunnel']['label']} / {cs['workload'].get('label') or cs['workload']['name']}" \
        f" r{cs['repeat']}"


def loss_cell(row: dict[str, Any]) -> str:
    """'1,234 (qdisc 1,234)': what a place lost, and which counters say where."""
    from ..chain.hops import loss_of
    n = loss_of(row)
    parts = [f"{k} {row[f'{k}_drops']:,}" for k in ("qdisc", "policy", "if")
             if row.get(f"{k}_drops")]
    return f"{n:,}" + (f" ({', '.join(parts)})" if parts else "")


def print_table(console: Console, cases: list[dict[str, Any]]) -> None:
    """One row per chain case: the places in path order, what each lost, the bottleneck."""
    docs = chained(cases)
    if not docs:
        return
    places = [r["place"] for r in docs[0]["chain"]["drops"]]
    table = Table(title=f"per-hop drops - {docs[0]['chain'].get('path')}")
    table.add_column("case")
    for p in places:
        table.add_column(p, justify="right")
    table.add_column("routers (TTL)", justify="right")
    table.add_column("loss starts at")
    for d in docs:
        ch = d["chain"]
        by = {r["place"]: r for r in ch["drops"]}
        probe = ch.get("probe") or {}
        table.add_row(_label(d), *[loss_cell(by[p]) if p in by else "–" for p in places],
                      str(probe.get("routers", "–")), ch.get("bottleneck") or "no hop")
    console.print(table)


def section_html(cases: list[dict[str, Any]]) -> str:
    """The report's chain section ('' for a campaign without a chain)."""
    docs = chained(cases)
    if not docs:
        return ""
    first = docs[0]["chain"]
    esc = html.escape
    diagram = " → ".join(
        ["site a"] + [f"{h['name']} ({h['kind']}, netns {h['netns']})" for h in first["hops"]]
        + ["site b"])
    places = [r["place"] for r in first["drops"]]
    head = "".join(f"<th>{esc(p)}</th>" for p in places)
    rows = []
    for d in docs:
        ch = d["chain"]
        by = {r["place"]: r for r in ch["drops"]}
        cells = "".join(f"<td>{esc(loss_cell(by[p]))}</td>" if p in by else "<td>–</td>"
                        for p in places)
        probe = ch.get("probe") or {}
        rows.append(f"<tr><td class=l>{esc(_label(d))}</td>{cells}"
                    f"<td>{esc(str(probe.get('routers', '–')))}</td>"
                    f"<td class=l>{esc(ch.get('bottleneck') or 'no hop')}</td></tr>")
    added = first.get("probe", {}).get("added_us") or {}
    lat = ", ".join(f"{esc(k)} {v:g} µs" for k, v in added.items() if v is not None)
    return (f"<h2 id=chain>Chain: per-hop figures</h2><p>{esc(diagram)}</p>"
            "<p>Packets each place lost during the workload (a hop: what entered and did not "
            "leave, or its explicit drop counters if more; sites: their own drops), the "
            "routers the TTL counted, and where loss starts (docs/chains.md).</p>"
            f"<table><tr><th class=l>case</th>{head}<th>routers (TTL)</th>"
            f"<th class=l>loss starts at</th></tr>{''.join(rows)}</table>"
            f"<p>Latency added per hop (idle, median of 20 pings, first case): "
            f"{lat or '–'}.</p>")
