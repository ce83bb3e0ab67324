"""What a person sees in the terminal: the summary table (progress: live.py; the kind list:
listing.py). Like all of report/, it reads what the case files say and asks no registry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from ..results import records
from ..results.model import MetricRecord
from ..results.records import CaseRecord
from ..shell import Console
from . import data, hops, hubs, stats
from . import metrics as catalogue

# cpu_busy_a/_b exist when the sites are separate hosts: each end's CPU apart
CPU_METRICS = ("cpu_busy", "cpu_busy_a", "cpu_busy_b", "cpu_per_gbit")
CPU_LABELS = {"cpu_busy": "CPU busy avg (min-max)", "cpu_busy_a": "CPU of site a (client)",
              "cpu_busy_b": "CPU of site b (server)"}


def cpu_label(metric: str, direction: str | None) -> str | None:
    """The console's CPU column label; each site's says what it did when the workload did not
    run from a to b ('CPU of site a (client, receiver)' under iperf3 -R)."""
    label = CPU_LABELS.get(metric)
    if label is None or direction is None or metric == "cpu_busy":
        return label
    site = metric.rsplit("_", 1)[1]
    return label[:-1] + f", {catalogue.role(site, direction)})" if direction != "bidir" \
        else label[:-1] + ", sending and receiving)"
MAX_NOTES = 12   # case notes printed under the tables; the report lists them all


def headline(case: CaseRecord) -> str:
    """A finished case in a few words: its first headline metric and CPU busy."""
    parts = []
    first = next((m for m in case.workload.headline if m in case.metrics), None)
    for name in ([first] if first else []) + list(CPU_METRICS[:1]):
        m = case.metrics.get(name)
        if m and m.value is not None:
            parts.append(f"{name} {'≥' if m.bound else ''}{num(m.value)} {m.unit}")
    return ", ".join(parts)


def num(v: float) -> str:
    """Compact number: 10,583 / 98.4 / 0.123."""
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def _fmt(r: stats.Row) -> str:
    s = r.stats
    txt = f"{num(s.mean)} ± {num(s.std)}" if s.n > 1 else num(s.mean)
    return stats.bound_mark(r) + txt + ("*" if r.noisy else "")


PCT_OF_NATIVE = ("throughput", "cpu_per_gbit")


def _vs_native(r: stats.Row) -> str:
    """Native's own share is the reference of the column, not a measurement; a share is the
    paired per-round estimate with its 95% CI under it."""
    if stats.is_reference(r):
        return "100% (ref.)" if r.higher_is_better else "1.00× (ref.)"
    ci = stats.vs_native_ci(r)
    return stats.vs_native(r) + (f"\n{ci}" if ci else "")


def _cpu_cell(by: dict[tuple[str, str], stats.Row], t: str) -> str:
    """CPU busy as the study reports it: average (min-max) over the measurement."""
    avg, lo, hi = (by.get((t, m)) for m in ("cpu_busy", "cpu_busy_min", "cpu_busy_max"))
    if avg is None:
        return "-"
    txt = f"{num(avg.stats.mean)}"
    if lo is not None and hi is not None:
        txt += f" ({num(lo.stats.mean)}-{num(hi.stats.mean)})"
    return txt


def print_summary(cases: list[dict[str, Any]], out_dir: str,
                  noisy_cv: float = stats.NOISY_CV) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    named = records.named(cases, sweeps=False)   # 'wireguard (go)', 'stream reverse' (-R)
    rows = stats.rows(named, noisy_cv)
    swept: dict[tuple[str, int, str], list[stats.Row]] = {}
    groups: dict[tuple[str, int, str], list[stats.Row]] = {}
    for r in rows:
        if r.sweep is not None:
            swept.setdefault((r.workload, r.mtu, r.offloads), []).append(r)
        else:
            groups.setdefault((r.label or r.workload, r.mtu, r.offloads), []).append(r)
    declared = {r.workload.name: r.workload for r in named}
    recs = {k: m for r in reversed(named) for k, m in r.metrics.items()}
    for (wl_label, mtu, off), grp in groups.items():
        w = declared.get(grp[0].workload)
        _print_group(console, wl_label, mtu, off, grp, w.headline if w else (), recs,
                     w.direction if w else None)
    for (wl_name, mtu, off), grp in swept.items():
        w = declared.get(wl_name)
        key = (w.sweep_param if w else None) or "value"
        head = w.headline if w else ()
        _print_sweep(console, wl_name, mtu, off, grp, key, head[0] if head else "throughput")
    as_recorded = [CaseRecord.from_doc(d) for d in cases]   # labels not renamed
    hops.print_chain(console, as_recorded)   # chain campaigns only: diagram, chain vs direct
    hops.print_table(console, as_recorded)
    hubs.print_table(console, as_recorded)   # hub campaigns only
    # matplotlib's colours behind it: imported once a summary is printed (not by --json)
    from . import mesh

    if any(mesh.pair_of(r) for r in as_recorded):   # mesh campaigns only: the grids
        mesh.print_grids(console, data.Campaign(Path(out_dir), {}, as_recorded,
                                                stats.rows(as_recorded)))
    failed = [c for c in as_recorded if c.status == "failed"]
    skipped = [c for c in as_recorded if c.status == "skipped"]
    for case in failed:
        console.print(f"[red]failed[/red] {case.id}: {case.error}", highlight=False)
    for case in skipped:
        console.print(f"[yellow]skipped[/yellow] {case.id}: {case.error}", highlight=False)
    notes = data.case_notes(as_recorded)
    for wl, note, tuns in notes[:MAX_NOTES]:
        console.print(f"[cyan]note[/cyan] {', '.join(tuns)} ({wl}): {note}", highlight=False)
    if len(notes) > MAX_NOTES:
        console.print(f"... {len(notes) - MAX_NOTES} more notes in the report", highlight=False)
    if any(r.noisy for r in rows):
        console.print(f"* noisy: coefficient of variation above {noisy_cv:.0%}")
    if any(r.bound for r in rows):
        console.print(stats.BOUND_NOTE)
    sources = sorted({r.line_rate_source for r in rows if r.line_rate_source})
    for src in sources:
        console.print(f"line rate: {src}")
    shared = any(c.shares_cpus for c in as_recorded)
    if shared:
        console.print("CPU: % of all cores, both sites together (they share this host's CPUs), "
                      "average (min-max) over the measurement, warm-up excluded; CPU per "
                      "Gbit/s in % of one core per Gbit/s.")
    ok = len(cases) - len(failed) - len(skipped)
    console.print(f"results: {out_dir}  ({ok} ok, {len(failed)} failed"
                  + (f", {len(skipped)} skipped" if skipped else "") + ")")


def _print_group(console: Console, wl_label: str, mtu: int, off: str,
                 grp: list[stats.Row], headline: tuple[str, ...],
                 recs: dict[str, MetricRecord], direction: str | None = None) -> None:
    """`headline`: the metrics the workload declared first, as its cases recorded them;
    `direction`: how it ran (its per-site CPU columns say which end sent)."""
    metrics = [m for m in headline + CPU_METRICS if any(r.metric == m for r in grp)]
    if not metrics:
        metrics = sorted({r.metric for r in grp})
    title = f"{wl_label} - underlay MTU {mtu}" + ("" if off == "default" else f" - offloads {off}")
    pct_cols = {m for m in metrics if m in PCT_OF_NATIVE or m in headline[:1]}
    line_rate = any(r.pct_of_line_rate is not None for r in grp)
    table = Table(title=title)
    table.add_column("tunnel")
    table.add_column("n", justify="right")
    by: dict[tuple[str, str], stats.Row] = {(r.tunnel, r.metric): r for r in grp}
    for m in metrics:
        unit = catalogue.unit_label(m, next(r.unit for r in grp if r.metric == m), recs.get(m))
        label = cpu_label(m, direction) or catalogue.display_name(m, recs.get(m), direction)
        table.add_column(f"{label}\n({unit})", justify="right")
        if m in pct_cols:
            hib = next(r.higher_is_better for r in grp if r.metric == m)
            table.add_column("% of\nnative" if hib else "× native", justify="right")
        if m == "throughput" and line_rate:
            table.add_column("% of\nline rate", justify="right")
    for t in dict.fromkeys(r.tunnel for r in grp):
        cells = [t, str(max((by[(t, m)].stats.n for m in metrics if (t, m) in by), default=0))]
        for m in metrics:
            r = by.get((t, m))
            cells.append(_cpu_cell(by, t) if m == "cpu_busy" else (_fmt(r) if r else "-"))
            if m in pct_cols:
                cells.append(_vs_native(r) if r else "-")
            if m == "throughput" and line_rate:
                cells.append(f"{r.pct_of_line_rate:.1f}%" if r and r.pct_of_line_rate
                             is not None else "-")
        table.add_row(*cells)
    console.print(table)


def _print_sweep(console: Console, wl_name: str, mtu: int, off: str,
                 grp: list[stats.Row], key: str, first: str = "throughput") -> None:
    """A sweep (e.g. 1..512 streams): one row per tunnel, one column per swept value; first
    the workload's first headline metric (throughput for streams, transactions/s for rpc) with
    % of native below it, then CPU, so ten tunnels still fit a terminal.
    `key`: the swept parameter, as the cases recorded it."""
    where = f"underlay MTU {mtu}" + ("" if off == "default" else f", offloads {off}")
    tunnels = list(dict.fromkeys(r.tunnel for r in grp))
    values = sorted({r.sweep for r in grp}, key=lambda v: (str(type(v)), v))
    by = {(r.tunnel, r.metric, r.sweep): r for r in grp}
    unit = next((r.unit for r in grp if r.metric == first), "")
    title_first = ("aggregate throughput, Mbit/s" if first == "throughput"
                   else f"{first}, {unit}")
    for title, cell in (
        (f"{title_first} (% of native)",
         lambda by, t, v: _sweep_first(by, t, v, first)),
        ("CPU busy, % of all cores (average; min-max in the report)", _sweep_cpu),
    ):
        table = Table(title=f"{wl_name} - {title} - {where}")
        table.add_column(f"tunnel \\ {key}")
        for v in values:
            table.add_column(str(v), justify="right")
        for t in tunnels:
            table.add_row(t, *[cell(by, t, v) for v in values])
        console.print(table)


def _sweep_first(by: dict[tuple[str, str, Any], stats.Row], t: str, v: Any,
                 metric: str) -> str:
    tp = by.get((t, metric, v))
    if tp is None:
        return "-"
    pct = f"\n({tp.pct_of_native:.0f}%)" if tp.pct_of_native is not None else ""
    return num(tp.stats.mean) + ("*" if tp.noisy else "") + pct


def _sweep_cpu(by: dict[tuple[str, str, Any], stats.Row], t: str, v: Any) -> str:
    cpu = by.get((t, "cpu_busy", v))
    return num(cpu.stats.mean) if cpu else "-"


def print_folder_problems(folder: Any, file: Any = None) -> None:
    """Missing case files and an incomplete campaign, one line each on stderr, with the
    pending cases and the exact command that resumes it (`folder`: a reader.CampaignFolder)."""
    out = file or sys.stderr
    for line in folder.problems():
        print(f"tunbench: warning: {line}", file=out)
    if folder.incomplete and folder.pending:
        print(f"tunbench: pending: {', '.join(folder.pending)}", file=out)
