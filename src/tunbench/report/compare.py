"""`tunbench compare A B`: per tunnel and metric, the change from campaign A to campaign B.

Verdicts: "improved", "regressed", "no significant change", or "insufficient data" (fewer
than two values on a side). Significance: FD.io CSIT's jumpavg (does the bit-counting
classifier put a group boundary exactly between A's and B's samples?) when both sides have
at least JUMPAVG_MIN values; otherwise non-overlap of the 95% confidence intervals of the
means. higher_is_better of each metric decides whether a change is an improvement.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import data, stats

JUMPAVG_MIN = 5
IMPROVED, REGRESSED, SAME, UNKNOWN = ("improved", "regressed", "no significant change",
                                      "insufficient data")


@dataclass(frozen=True)
class Change:
    tunnel: str
    workload: str
    mtu: int
    offloads: str
    metric: str
    unit: str
    higher_is_better: bool
    n_a: int
    mean_a: float
    ci_a: tuple[float, float]
    n_b: int
    mean_b: float
    ci_b: tuple[float, float]
    change_pct: float | None
    significant: bool
    method: str
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def jumpavg_split(a: list[float], b: list[float]) -> bool:
    """True when jumpavg's classification starts a new group exactly where B begins."""
    import jumpavg
    groups = jumpavg.classify(a + b)
    starts, i = set(), 0
    for g in groups:
        starts.add(i)
        i += len(g)
    return len(a) in starts


def judge(a: list[float], b: list[float], higher_is_better: bool) -> tuple[bool, str, str]:
    """(significant, method, verdict) for samples a (before) and b (after)."""
    if len(a) < 2 or len(b) < 2:
        return False, "n<2", UNKNOWN
    sa, sb = stats.summarize(a), stats.summarize(b)
    if len(a) >= JUMPAVG_MIN and len(b) >= JUMPAVG_MIN:
        significant, method = jumpavg_split(a, b), "jumpavg"
    else:
        significant, method = not data.overlap(sa, sb), "ci95"
    if not significant or sa.mean == sb.mean:
        return False, method, SAME
    better = (sb.mean > sa.mean) == higher_is_better
    return True, method, IMPROVED if better else REGRESSED


def compare(a: data.Campaign, b: data.Campaign) -> tuple[list[Change], list[str]]:
    """Changes for every (tunnel, scenario, metric) in both campaigns; and what is only in one."""
    rows_b = {(r.tunnel, r.workload, r.mtu, r.offloads, r.metric): r for r in b.rows}
    out, only = [], []
    seen = set()
    for ra in a.rows:
        key = (ra.tunnel, ra.workload, ra.mtu, ra.offloads, ra.metric)
        seen.add(key)
        rb = rows_b.get(key)
        if rb is None:
            only.append(f"only in A: {ra.tunnel} {ra.workload} MTU {ra.mtu} {ra.metric}")
            continue
        scen = (ra.workload, ra.mtu, ra.offloads)
        va = data.values_by_tunnel(a, scen, ra.metric).get(ra.tunnel, [])
        vb = data.values_by_tunnel(b, scen, ra.metric).get(ra.tunnel, [])
        significant, method, verdict = judge(va, vb, ra.higher_is_better)
        pct = 100.0 * (rb.stats.mean - ra.stats.mean) / abs(ra.stats.mean) \
            if ra.stats.mean else None
        out.append(Change(ra.tunnel, ra.workload, ra.mtu, ra.offloads, ra.metric, ra.unit,
                          ra.higher_is_better, ra.stats.n, ra.stats.mean,
                          (ra.stats.ci95_low, ra.stats.ci95_high), rb.stats.n, rb.stats.mean,
                          (rb.stats.ci95_low, rb.stats.ci95_high), pct, significant, method,
                          verdict))
    only += [f"only in B: {k[0]} {k[1]} MTU {k[2]} {k[4]}" for k in rows_b if k not in seen]
    return out, only


def regressions(changes: list[Change], threshold_pct: float) -> list[Change]:
    """Significant regressions whose size exceeds the threshold (percent of A's mean)."""
    return [c for c in changes if c.verdict == REGRESSED
            and (c.change_pct is None or abs(c.change_pct) > threshold_pct)]


def to_json(a: Path, b: Path, changes: list[Change], only: list[str],
            threshold: float) -> dict[str, Any]:
    reg = regressions(changes, threshold)
    return {"format": "tunbench-compare", "format_version": 1, "a": str(a), "b": str(b),
            "threshold_pct": threshold, "jumpavg_min_samples": JUMPAVG_MIN,
            "entries": [c.to_dict() for c in changes], "unmatched": only,
            "regressions": [f"{c.tunnel}/{c.workload}/mtu{c.mtu}/{c.metric}" for c in reg]}


def print_table(a: Path, b: Path, changes: list[Change], only: list[str],
                threshold: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from .takeaways import num
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    table = Table(title=f"{a} → {b}")
    for col in ("tunnel", "workload", "MTU", "metric", "A mean ± CI", "B mean ± CI", "change",
                "verdict", "by"):
        table.add_column(col, justify="right" if col in ("MTU", "change") else "left")
    style = {IMPROVED: "green", REGRESSED: "red", SAME: "", UNKNOWN: "dim"}
    for c in changes:
        ha, hb = (c.ci_a[1] - c.mean_a), (c.ci_b[1] - c.mean_b)
        pct = "–" if c.change_pct is None else f"{c.change_pct:+.1f}%"
        table.add_row(c.tunnel, c.workload, str(c.mtu), f"{c.metric} ({c.unit})"
                      + (" ↑" if c.higher_is_better else " ↓"),
                      f"{num(c.mean_a)} ± {num(ha)}", f"{num(c.mean_b)} ± {num(hb)}", pct,
                      f"[{style[c.verdict]}]{c.verdict}[/]" if style[c.verdict] else c.verdict,
                      c.method)
    console.print(table)
    for line in only:
        console.print(line, highlight=False)
    reg = regressions(changes, threshold)
    if reg:
        console.print(f"[red]{len(reg)} significant regression(s) beyond {threshold:g}%[/red]")
    else:
        console.print(f"no significant regression beyond {threshold:g}%")
