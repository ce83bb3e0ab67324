"""A table (and its figure's data) per scenario axis: each method's figure at each value of an
axis and its share of a reference at the same value, paired per round.

The report's axis sections (site size in cores: sitesize.py; RTT and loss: distance.py; the
underlay rate: `rate_*` below) share what is here: the paired share (the geometric mean of
each round's ratio, lowest-highest round, n), how it reads, where a table is (workload, MTU,
offloads) and the table itself. The rate axis (testbed/wanaxis.py) is one axis with nothing
else to model, so it is wholly here: per (base workload, MTU, offloads) measured at two or
more rates, each method's headline figure (mean over rounds) and its share of native at each
rate, as the case recorded it (`case.rate`).

Pure over the typed case records.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..rates import rate_mbps
from ..results.records import CaseRecord
from .data import Campaign, headline_metric

Share = tuple[float, float, float, int]   # geometric mean, lowest, highest, n rounds


def paired_share(pairs: Iterable[tuple[float, float]]) -> Share | None:
    """(geometric mean, lowest, highest, n) of value / reference over the rounds given as
    (value, reference); rounds where either is not above 0 are left out; None without one."""
    ratios = [v / ref for v, ref in pairs if v > 0 and ref > 0]
    if not ratios:
        return None
    gm = math.exp(statistics.fmean(math.log(x) for x in ratios))
    return gm, min(ratios), max(ratios), len(ratios)


def share_text(sh: Share | None) -> str:
    return (f"{100 * sh[0]:.1f}% ({100 * sh[1]:.1f}-{100 * sh[2]:.1f}; n={sh[3]})"
            if sh else "-")


def where(workload: str, mtu: int, offloads: str) -> str:
    """How a table's scenario reads ('stream', 'stream, MTU 9000, offloads gro-off')."""
    return workload + ("" if mtu == 1500 else f", MTU {mtu}") + \
        ("" if offloads in ("default", "None") else f", offloads {offloads}")


def table_html(heading: str, cells: list[list[str]]) -> str:
    """One table under its heading; cells: rows of text, the header first."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>"
                   for r in cells[1:])
    return f"<h3>{html.escape(heading)}</h3><table><tr>{th}</tr>{body}</table>"


def axis_section(intro: str, tables: Iterable[tuple[str, list[list[str]]]]) -> str:
    """An axis section: its heading and text (HTML), then each (heading, cells) as a
    table_html; '' without a table (a campaign off the axis)."""
    body = "".join(table_html(heading, cells) for heading, cells in tables)
    return intro + body if body else ""


def num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


@dataclass
class Group:
    """The ok cases of one (base workload, MTU, offloads) on an axis, and their headline."""
    workload: str
    mtu: int
    offloads: str
    cases: list[CaseRecord]
    metric: str
    unit: str


def groups(c: Campaign, on_axis: Callable[[CaseRecord], bool]) -> list[Group]:
    """The ok cases `on_axis` accepts, by (base workload, MTU, offloads) in first-seen order,
    each with its workload's headline metric and that metric's unit."""
    by: dict[tuple[str, int, str], list[CaseRecord]] = {}
    for r in c.ok:
        if on_axis(r):
            by.setdefault((r.workload.base, r.mtu, r.offloads), []).append(r)
    out = []
    for (base, mtu, off), cases in by.items():
        metric = headline_metric(c, cases[0].workload.name) or "throughput"
        unit = next((r.metrics[metric].unit for r in cases if metric in r.metrics), "")
        out.append(Group(base, mtu, off, cases, metric, unit))
    return out


X = TypeVar("X", str, int, tuple[str, str])   # an axis value: '100mbit', 2 cores, (rtt, loss)


def by_method(c: Campaign, value_of: Callable[[CaseRecord], X | None],
              order: Callable[[X], Any] | None = None
              ) -> list[tuple[Group, list[X], dict[str, list[tuple[X, CaseRecord]]]]]:
    """The ok cases on the axis `value_of` reads from a case (None: off it), per (base
    workload, MTU, offloads) measured at two or more of its values: the group, its values
    (in `order`, else as first seen) and its cases per method (tunnel label, first seen
    first), each with its value."""
    out = []
    for g in groups(c, lambda r: value_of(r) is not None):
        at = [(x, r) for r in g.cases if (x := value_of(r)) is not None]
        values = list(dict.fromkeys(x for x, _ in at))
        if order is not None:
            values.sort(key=order)
        if len(values) < 2:
            continue
        methods: dict[str, list[tuple[X, CaseRecord]]] = {}
        for x, r in at:
            methods.setdefault(r.tunnel.label, []).append((x, r))
        out.append((g, values, methods))
    return out


@dataclass
class Method:
    tunnel: str
    native: bool
    values: dict[str, list[float]] = field(default_factory=dict)   # axis value -> rounds
    by_round: dict[Any, dict[str, float]] = field(default_factory=dict)

    def mean(self, x: str) -> float | None:
        v = self.values.get(x)
        return statistics.fmean(v) if v else None


@dataclass
class Along:
    """One method table along one axis: its values in order, each method's figures."""
    workload: str
    mtu: int
    offloads: str
    metric: str
    unit: str
    values: list[str]
    methods: list[Method]

    def share(self, m: Method, x: str) -> Share | None:
        """The method / native of the same round at value x."""
        nat = next((n for n in self.methods if n.native), None)
        if nat is None:
            return None
        return paired_share((r[x], nat.by_round[k][x]) for k, r in m.by_round.items()
                            if x in r and x in nat.by_round.get(k, {}))

    def rows(self, name: Callable[[str], str] = str) -> list[list[str]]:
        head = (["method"] + [f"{self.metric} at {name(x)} ({self.unit})" for x in self.values]
                + [f"% of native at {name(x)}" for x in self.values])
        return [head] + [[m.tunnel] + [num(m.mean(x)) for x in self.values]
                         + [("100% (reference)" if m.native else share_text(self.share(m, x)))
                            for x in self.values] for m in self.methods]


def along(c: Campaign, value_of: Callable[[CaseRecord], str | None],
          order: Callable[[str], float]) -> list[Along]:
    """One Along per (base workload, MTU, offloads) measured at two or more values of the
    axis `value_of` reads from a case (None: off the axis)."""
    out = []
    for g, values, cases in by_method(c, value_of, order):
        methods = []
        for label, at in cases.items():
            m = Method(label, c.is_reference(label))
            for x, r in at:
                v = r.value(g.metric)
                if v is not None:
                    m.values.setdefault(x, []).append(v)
                    m.by_round.setdefault(r.repeat, {})[x] = v
            methods.append(m)
        out.append(Along(g.workload, g.mtu, g.offloads, g.metric, g.unit, values,
                         sorted(methods, key=lambda m: not m.native)))
    return out


def rate_of(r: CaseRecord) -> str | None:
    """The value of the rate axis a case recorded ('100mbit'; None: not on that axis)."""
    v = r.doc.get("case", {}).get("rate") if r.doc else None
    return v if isinstance(v, str) and v else None


def rate_key(v: str) -> float:
    try:
        return rate_mbps(v)
    except ValueError:
        return 0.0


def rate_alongs(c: Campaign) -> list[Along]:
    return along(c, rate_of, rate_key)


def rate_section_html(c: Campaign) -> str:
    """The report's underlay-rate section ('' for a campaign off the rate axis)."""
    return axis_section(
        "<h2 id=rate>Underlay rate</h2><p>Each scenario is the underlay shaped by tbf "
        "on both ends to that rate (docs/methodology.md, \"The rate axis\"), every method "
        "measured at each in the same round, native first. Figures are means over "
        "rounds; the share of native is the geometric mean of each round's ratio to "
        "native at the same rate (lowest-highest round; n rounds). A method near 100 % "
        "at a low rate and below it at a high one is bound by its own datapath only "
        "there.</p>",
        ((f"{where(s.workload, s.mtu, s.offloads)}: against rate", s.rows())
         for s in rate_alongs(c)))
