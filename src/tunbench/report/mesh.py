"""The mesh grids of a mesh campaign (testbed/meshspec.py; each case records its pair as
`mesh.pair` = [sender, receiver]): one N x N grid per workload, MTU and tunnel, each cell the
share of native of that pair on the workload's headline figure, native measured for the same
pair in the same round (the geometric mean of the rounds' ratios, as the summary tables do),
with the tunnel's own value under it, a colour scale, links to the cell's cases, and the worst
pair named. Rows are the sending site, columns the receiving one; a pair measured one way
fills one cell. Campaigns without a mesh show nothing."""

from __future__ import annotations

import html
import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from matplotlib import colormaps
from matplotlib.colors import Normalize, to_hex
from rich.table import Table

from ..results.model import round_reference
from ..results.records import CaseRecord
from . import advise, stats
from .data import Campaign, headline_metric

CMAP = "RdYlGn"
SCALE = (0.0, 100.0)     # % of native: red at 0, green at 100 and above


@dataclass
class Cell:
    share: float | None = None       # % of native (geometric mean over rounds)
    value: float | None = None       # the tunnel's mean headline value
    rounds: int = 0                  # rounds with both the tunnel and native ok
    # (label, case file path) of its cases: the tunnel's and native's of each round
    cases: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)   # ids of its failed or skipped cases


@dataclass
class Grid:
    workload: str
    mtu: int
    tunnel: str
    metric: str
    unit: str
    higher_is_better: bool
    sites: list[str]
    cells: dict[tuple[str, str], Cell]

    @property
    def worst(self) -> tuple[tuple[str, str], Cell] | None:
        """The measured pair with the lowest share of native (None: no share)."""
        got = [(p, c) for p, c in self.cells.items() if c.share is not None]
        return min(got, key=lambda pc: pc[1].share or 0.0) if got else None


def pair_of(r: CaseRecord) -> tuple[str, str] | None:
    pair = (r.doc.get("mesh") or {}).get("pair") or (r.doc.get("case") or {}).get("pair")
    return (str(pair[0]), str(pair[1])) if pair and len(pair) == 2 else None


def meshed(c: Campaign) -> list[tuple[CaseRecord, tuple[str, str]]]:
    return [(r, p) for r in c.cases if (p := pair_of(r)) is not None]


def _site_order(name: str) -> tuple[int, str]:
    return (int(name[1:]), name) if name[1:].isdigit() else (10**6, name)


def grids(c: Campaign) -> list[Grid]:
    cases = meshed(c)
    if not cases:
        return []
    sites = sorted({s for _, p in cases for s in p}, key=_site_order)
    n_sites = int((cases[0][0].doc.get("mesh") or {}).get("sites") or 0)
    if n_sites > len(sites):
        sites = [f"s{i}" for i in range(1, n_sites + 1)]
    out: list[Grid] = []
    scen = list(dict.fromkeys((r.workload.name, r.mtu) for r, _ in cases))
    tuns = list(dict.fromkeys(r.tunnel.label for r, _ in cases if r.tunnel.kind != "native"))
    for wl, mtu in scen:
        metric = headline_metric(c, wl)
        if metric is None:
            continue
        mine = [(r, p) for r, p in cases if r.workload.name == wl and r.mtu == mtu]
        native: dict[tuple[Any, Any], list[CaseRecord]] = {}   # a round's native runs
        for r, p in mine:
            if r.tunnel.kind == "native":
                native.setdefault((p, r.repeat), []).append(r)
        unit, hib = "", True
        for r, _ in mine:
            if metric in r.metrics:
                unit, hib = r.metrics[metric].unit, r.metrics[metric].higher_is_better
                break
        for tun in tuns:
            cells: dict[tuple[str, str], Cell] = {}
            ratios: dict[tuple[str, str], list[float]] = {}
            values: dict[tuple[str, str], list[float]] = {}
            for r, p in mine:
                if r.tunnel.label != tun:
                    continue
                cell = cells.setdefault(p, Cell())
                cell.cases.append((f"{tun} r{r.repeat}", r.path))
                if r.status != "ok":
                    cell.failed.append(r.id)
                    continue
                v = r.value(metric)
                bases = native.get((p, r.repeat), [])
                cell.cases += [(f"native r{r.repeat}", b.path) for b in bases]
                if v is None:
                    continue
                values.setdefault(p, []).append(v)
                paired = [x for b in bases if b.status == "ok"
                          for x in [b.paired(metric)] if x is not None]
                nv = round_reference(paired) if paired else None
                pv = r.paired(metric)   # None: slowed by the host throughout, not paired
                if nv and pv:
                    ratios.setdefault(p, []).append(pv / nv if hib else nv / pv)
            for p, cell in cells.items():
                if values.get(p):
                    cell.value = statistics.fmean(values[p])
                if ratios.get(p):
                    cell.rounds = len(ratios[p])
                    cell.share = 100 * math.exp(statistics.fmean(math.log(x)
                                                                 for x in ratios[p]))
            if cells:
                out.append(Grid(wl, mtu, tun, metric, unit, hib, sites, cells))
    return out


def title(g: Grid, c: Campaign) -> str:
    mtu = f", MTU {g.mtu}" if len({r.mtu for r in c.cases}) > 1 or g.mtu != 1500 else ""
    return f"mesh: {g.tunnel}, {g.workload}{mtu} - % of native {g.metric} per pair"


def colour(share: float) -> str:
    """The cell's background: the figure's colour mixed half with white (dark text stays
    readable on it)."""
    r, g, b, _ = colormaps[CMAP](Normalize(*SCALE, clip=True)(share))
    return to_hex((0.5 + r / 2, 0.5 + g / 2, 0.5 + b / 2))


def worst_text(g: Grid) -> str:
    w = g.worst
    if w is None:
        return "no pair has a share of native yet"
    (a, b), cell = w
    return (f"worst pair {a} -> {b}: {cell.share:.1f}% of native "
            f"({cell.value:,.0f} {g.unit}; {cell.rounds} round(s))")


def _cell_html(g: Grid, a: str, b: str) -> str:
    esc = html.escape
    if a == b:
        return "<td class=meshself>–</td>"
    cell = g.cells.get((a, b))
    if cell is None:
        return "<td class=meshnone title='not measured'></td>"
    links = ", ".join(f'<a href="../{esc(p)}">{esc(label)}</a>' for label, p in cell.cases)
    if cell.share is None:
        why = f"failed: {', '.join(cell.failed)}" if cell.failed else "no native to compare"
        return (f"<td class='meshcell bad' title='{esc(why)}'>{'failed' if cell.failed else '–'}"
                f"<br><small>{links}</small></td>")
    val = f"{cell.value:,.0f} {g.unit}" if cell.value is not None else ""
    fail = f" ({len(cell.failed)} failed)" if cell.failed else ""
    return (f"<td class=meshcell style='background:{colour(cell.share)}' "
            f"data-pair='{esc(a)}-{esc(b)}'><b>{cell.share:.1f}%</b><br>"
            f"<small>{esc(val)}{esc(fail)}</small><br><small>{links}</small></td>")


def grid_html(g: Grid, c: Campaign) -> str:
    esc = html.escape
    head = "<th class=l>from \\ to</th>" + "".join(f"<th>{esc(s)}</th>" for s in g.sites)
    rows = "".join(f"<tr><th class=l>{esc(a)}</th>"
                   + "".join(_cell_html(g, a, b) for b in g.sites) + "</tr>"
                   for a in g.sites)
    return (f"<h3 id='mesh-{esc(g.tunnel)}-{esc(g.workload)}-{g.mtu}'>{esc(title(g, c))}</h3>"
            f"<p class=meta>{esc(worst_text(g))}.</p>"
            f"<table class=meshgrid><tr>{head}</tr>{rows}</table>")


def section_html(c: Campaign) -> str:
    """The report's mesh section ('' for a campaign without a mesh)."""
    gs = grids(c)
    if not gs:
        return ""
    sched = ""
    slots = (c.index.get("experiment") or {}).get("testbed") or {}
    on_hosts = (c.index.get("experiment") or {}).get("sites") or {}
    where = "on this host"
    if on_hosts:
        here = [n for n, s in on_hosts.items() if isinstance(s, dict)
                and s.get("target") == "local"]
        where = (f"with site {here[0]} on this host (its own network stack) and each other "
                 "site on a host of its own" if here else "with each site on a host of its own")
    # recorded by meshspec.to_dict: a colour's disjoint pairs at once on hosts (lanes.py)
    how = ("The pairs of a colour (no site in two of them) ran at the same time, each site "
           "in one measurement at a time," if slots.get("parallel") else
           "Pairs ran one after another, one measurement at a time")
    if slots.get("kind") == "mesh":
        sched = (f" {slots.get('sites')} sites, pairs {esc_pairs(slots.get('pairs'))}, "
                 f"directions {slots.get('directions')}.")
    if on_hosts:
        sched += " Sites: " + ", ".join(
            f"{n} {'local (this host)' if t == 'local' else t}"
            for n, s in on_hosts.items() if isinstance(s, dict)
            for t in [str(s.get("target", "?"))]) + "."
    return ("<h2 id=mesh>Mesh: every pair</h2><p>Each cell is the share of native of that "
            "pair (rows send, columns receive) on the workload's headline figure: the "
            "geometric mean over rounds of the tunnel's value against native's for the same "
            "pair in the same round (native / tunnel where lower is better), the tunnel's mean "
            "value under it; red 0 %, green 100 % and above. The numbers link to the cell's "
            f"cases (tunnel and native). {html.escape(how)} {html.escape(where)}."
            f"{html.escape(sched)}</p>"
            "<style>table.meshgrid td.meshcell{text-align:center;min-width:6em}"
            "table.meshgrid td.meshself{background:#eee;text-align:center}</style>"
            + "".join(grid_html(g, c) for g in gs))


def esc_pairs(pairs: object) -> str:
    if isinstance(pairs, str):
        return pairs
    return ", ".join(str(p) for p in pairs) if isinstance(pairs, list) else ""


# ---- advise per pair and for every pair -------------------------------------------------

def by_pair(c: Campaign) -> dict[tuple[str, str], Campaign]:
    """A mesh campaign as one campaign per measured pair (its cases only), in schedule
    order; {} for a campaign without a mesh."""
    groups: dict[tuple[str, str], list[CaseRecord]] = {}
    for r, p in meshed(c):
        groups.setdefault(p, []).append(r)
    return {p: Campaign(c.root, c.index, rs, stats.rows(rs)) for p, rs in groups.items()}


@dataclass
class PairAdvice:
    per_pair: dict[tuple[str, str], Any]             # pair -> advise.Advice
    # methods meeting the constraints on every pair: (label, worst share, its pair), by the
    # worst pair's share, best first; None share: the ranked figure is not a share
    every: list[tuple[str, float | None, tuple[str, str] | None]]
    # methods failing the constraints (or unmeasured) on some pair: label -> those pairs
    not_every: dict[str, list[tuple[str, str]]]


def advise_pairs(c: Campaign, constraints: Any = None) -> PairAdvice | None:
    """`advise` per pair of a mesh campaign, and the methods that meet the constraints on
    all of them, ranked by their worst pair (None: not a mesh campaign)."""
    pairs = by_pair(c)
    if not pairs:
        return None
    per = {p: advise.build([sub], constraints) for p, sub in pairs.items()}
    labels = list(dict.fromkeys(m.label for a in per.values() for m in a.methods
                                if not m.reference))
    every: list[tuple[str, float | None, tuple[str, str] | None]] = []
    missing: dict[str, list[tuple[str, str]]] = {}
    for label in labels:
        worst: tuple[float, tuple[str, str]] | None = None
        for p, a in per.items():
            fig = next((f for _, m, f in a.ranked if m.label == label), None)
            if fig is None:
                missing.setdefault(label, []).append(p)
                continue
            v = fig.est.mean if fig.scale == 100.0 else None
            if v is not None and (worst is None or v < worst[0]):
                worst = (v, p)
        if label not in missing:
            every.append((label, worst[0] if worst else None, worst[1] if worst else None))
    every.sort(key=lambda e: -(e[1] if e[1] is not None else -1e9))
    return PairAdvice(per, every, missing)


def pair_advice_lines(pa: PairAdvice) -> list[str]:
    """The console's per-pair ranking and the 'for every pair' line."""
    out = ["per pair (each against its own native):"]
    for (a, b), adv in pa.per_pair.items():
        ranked = "; ".join(f"{rank}. {m.label} {f.est.mean:.1f}%" if f.scale == 100.0
                           else f"{rank}. {m.label}" for rank, m, f in adv.ranked)
        out.append(f"  {a}->{b}: {ranked or 'no method meets the constraints'}")
    if pa.every:
        items = ", ".join(f"{label} (worst {a}->{b}: {v:.1f}%)" if v is not None and p
                          else label for label, v, p in pa.every
                          for a, b in [p or ("", "")])
        out.append(f"for every pair: {items}")
    else:
        out.append("for every pair: no method meets the constraints on all pairs")
    for label, ps in pa.not_every.items():
        out.append(f"  not on every pair: {label} (not ranked on "
                   + ", ".join(f"{a}->{b}" for a, b in ps) + ")")
    return out


def pair_advice_json(pa: PairAdvice) -> dict[str, Any]:
    return {"per_pair": {f"{a}-{b}": advise.to_json(adv)
                         for (a, b), adv in pa.per_pair.items()},
            "every_pair": [{"method": label, "worst_share": v,
                            "worst_pair": list(p) if p else None}
                           for label, v, p in pa.every],
            "not_every_pair": {label: [list(p) for p in ps]
                               for label, ps in pa.not_every.items()}}


def print_grids(console: Any, c: Campaign) -> None:
    """The grids on the console (`tunbench run` / `report`): share of native per pair, rows
    sending, the worst pair under each; nothing for a campaign without a mesh."""
    for g in grids(c):
        table = Table(title=title(g, c))
        table.add_column("from \\ to", justify="left")
        for s in g.sites:
            table.add_column(s, justify="right")
        for a in g.sites:
            row = []
            for b in g.sites:
                cell = g.cells.get((a, b))
                row.append("–" if a == b or cell is None else
                           f"{cell.share:.1f}%" if cell.share is not None else
                           "failed" if cell.failed else "?")
            table.add_row(a, *row)
        console.print(table)
        console.print(worst_text(g), highlight=False)
