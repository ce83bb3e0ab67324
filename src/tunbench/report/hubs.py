"""The hub table of hub-testbed campaigns (hubcase.py records each case's `hub` section): per
tunnel kind and spoke count, the hub's setup time, the kernel memory it added (and tbtun's own
map memory), TCP to one spoke and to all spokes at once, medians over repeats. Campaigns
without a hub show nothing."""

from __future__ import annotations

import html
import statistics

from rich.console import Console
from rich.table import Table

from ..results.records import CaseRecord

HEAD = ("kind", "spokes", "n", "hub setup (s)", "hub memory (kB)", "one spoke (Mbit/s)",
        "all spokes (Mbit/s)")


def hubbed(cases: list[CaseRecord]) -> list[CaseRecord]:
    return [r for r in cases if r.ok and r.hub]


def _median(docs: list[CaseRecord], key: str) -> float | None:
    vals = [float(r.hub[key]) for r in docs if r.hub.get(key) is not None]
    return statistics.median(vals) if vals else None


def rows(cases: list[CaseRecord]) -> list[tuple[str, ...]]:
    """One row per tunnel label and spoke count, in first-seen order (medians of repeats)."""
    groups: dict[tuple[str, int], list[CaseRecord]] = {}
    for r in hubbed(cases):
        groups.setdefault((r.tunnel.display, int(r.hub["spokes"])), []).append(r)
    out: list[tuple[str, ...]] = []
    for (label, spokes), docs in groups.items():
        setup, mem = _median(docs, "setup_s"), _median(docs, "memory_kb")
        maps = _median(docs, "maps_kb")
        one, agg = _median(docs, "one_mbps"), _median(docs, "all_mbps")
        n_all = docs[0].hub.get("all_spokes", spokes)
        out.append((label, str(spokes), str(len(docs)),
                    "–" if setup is None else f"{setup:.3f}",
                    ("–" if mem is None else f"{mem:+,.0f}")
                    + (f" (maps {maps:,.0f})" if maps is not None else ""),
                    "–" if one is None else f"{one:,.0f}",
                    ("–" if agg is None else f"{agg:,.0f}")
                    + (f" ({n_all} of {spokes})" if n_all != spokes else "")))
    return out


def print_table(console: Console, cases: list[CaseRecord]) -> None:
    table_rows = rows(cases)
    if not table_rows:
        return
    table = Table(title="hub and spokes - the hub's side of N tunnels (medians)")
    for i, h in enumerate(HEAD):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in table_rows:
        table.add_row(*r)
    console.print(table)


def section_html(cases: list[CaseRecord]) -> str:
    """The report's hub section ('' for a campaign without a hub testbed)."""
    table_rows = rows(cases)
    if not table_rows:
        return ""
    esc = html.escape
    head = "".join(f"<th{' class=l' if i == 0 else ''}>{esc(h)}</th>"
                   for i, h in enumerate(HEAD))
    body = "".join("<tr>" + "".join(f"<td{' class=l' if i == 0 else ''}>{esc(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in table_rows)
    return ("<h2 id=hub>Hub and spokes</h2><p>One hub site and N spoke sites (spokes run the "
            "kernel's VXLAN device; only the hub differs): the time to build the hub's side of "
            "N tunnels, the kernel memory that added (the whole host's Slab + Percpu + "
            "VmallocUsed, noisy on a shared host; tbtun's own map memory in brackets), one TCP "
            "stream to one spoke and one to every spoke at once (bytes received by all over "
            "the wall time). Medians over repeats (docs/tbtun.md).</p>"
            f"<table><tr>{head}</tr>{body}</table>")
