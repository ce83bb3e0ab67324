"""The take-aways against native: each scenario's share of native (best tunnel, against the
runner-up and against native) and CPU per Gbit/s as a multiple of native's. Both read the
rows' paired per-round estimate (stats.Row.share: the tables' figure, with its CI) and say
"different", "equivalent" or "undecided: about N more rounds" by report/decide.py's rule.
"""

from __future__ import annotations

from typing import Any

from . import data, decide, ranking, stats
from . import metrics as catalogue
from .data import Campaign
from .sentences import Takeaway, metric_name, num, times, unit, where


def _bounds_caveat(base: Any, best: Any, pct: float) -> str:
    """What a ratio means when one or both figures are lower bounds (tool limit reached)."""
    b_base, b_best = base.bound == "lower", best.bound == "lower"
    if b_base and b_best:
        return (" Both figures are lower bounds (each reached its measuring tool's limit on "
                "this host, e.g. the load generator's top rate): the ratio compares how fast "
                "this host can drive traffic through each, not the tunnels' own limits.")
    if b_best:
        return (f" {best.tunnel}'s figure is a lower bound (it reached the measuring tool's "
                f"limit): it keeps at least {pct:.1f}%.")
    if b_base:
        return (" Native's figure is a lower bound (it reached the measuring tool's limit): "
                f"{best.tunnel}'s true share is at most {pct:.1f}%.")
    return ""


def share_text(pct: float, higher_is_better: bool) -> str:
    """A share of native as the tables show it: 93.3% for what a tunnel keeps (throughput),
    2.36× native for a cost or a delay (lower is better), never '236.3% of native'."""
    return f"{pct:.1f}%" if higher_is_better else f"{times(pct)} native"


def _vs_second(best: Any, second: Any, p2: float) -> tuple[str, bool | None]:
    """The clause on the runner-up and whether the two are decided different (True),
    equivalent (False), or neither (None)."""
    d = decide.decide([decide.pair_of_shares(best.tunnel, second.tunnel, dict(best.ratios),
                                             dict(second.ratios),
                                             higher_is_better=best.higher_is_better)])[0]
    p2_txt = share_text(p2, best.higher_is_better)
    if d.verdict == decide.UNTESTED:
        return f", then {second.tunnel} ({p2_txt})", None
    if d.verdict == decide.DIFFERENT:
        return f", ahead of {second.tunnel} ({p2_txt})", True
    if d.verdict == decide.EQUIVALENT:
        return (f", equivalent to {second.tunnel} ({p2_txt}) within "
                f"±{100 * decide.MARGIN:g} points of native"), False
    return (f"; its lead over {second.tunnel} ({p2_txt}) is undecided: "
            f"{ranking.more_rounds(d)}"), None


def _ci_text(e: decide.Estimate, higher_is_better: bool) -> str:
    if e.ci_low is None or e.ci_high is None:
        return ""
    if higher_is_better:
        return f"95% CI {e.ci_low:.1f}–{e.ci_high:.1f}%"
    return f"95% CI {times(e.ci_low)}–{times(e.ci_high)}"


def _vs_native(best: Any) -> tuple[str, bool | None]:
    """The clause on native, from the share's own decision against it."""
    e = _est(best)
    ci = _ci_text(e, best.higher_is_better)
    if e.decision == decide.UNTESTED:
        return "; one run each: no confidence interval, significance not tested.", None
    if e.decision == decide.DIFFERENT:
        return f"; the difference from native is significant ({ci}).", True
    if e.decision == decide.EQUIVALENT:
        return (f"; {best.tunnel} is equivalent to native (within ±{100 * decide.MARGIN:g} "
                f"points; {ci})."), False
    more = ranking.more_rounds_n(e.rounds_needed, e.n)
    return f"; whether it differs from native is undecided ({ci}): {more}.", None


def _est(r: stats.Row) -> decide.Estimate:
    assert r.share is not None
    return r.share


def share_of_native(c: Campaign) -> list[Takeaway]:
    out = []
    for scen in c.scenarios():
        metric = data.headline_metric(c, scen[0])
        base = c.native_row(scen, metric) if metric else None
        if metric is None or base is None or not base.stats.mean:
            continue
        others = [r for r in (c.row(t, scen, metric) for t in c.tunnels())
                  if r is not None and r.kind != "native" and r.share is not None]
        if not others:
            continue
        sign = 1 if base.higher_is_better else -1
        others.sort(key=lambda r: -sign * _est(r).mean)
        best = others[0]
        pct = _est(best).mean
        facts = {"scenario": scen, "metric": metric, "best": best.tunnel, "pct": pct,
                 "higher_is_better": best.higher_is_better,
                 "ci": (_est(best).ci_low, _est(best).ci_high),
                 "best_mean": best.stats.mean, "native_mean": base.stats.mean}
        name = metric_name(c, metric)
        if best.higher_is_better:
            head = (f"keeps the highest share of native {name}: {pct:.1f}%"
                    if len(others) > 1 else f"keeps {pct:.1f}% of native {name}")
        else:  # lower is better (latency): the best is the one closest to native, as ×
            head = (f"comes closest to native {name}: {times(pct)} native"
                    if len(others) > 1 else f"is at {times(pct)} native {name}")
        text = (f"In {where(c, scen)}, {best.tunnel} {head} (paired round by round; "
                f"means {num(best.stats.mean)} vs {num(base.stats.mean)} "
                f"{unit(c, metric, best.unit)})")
        if len(others) > 1:
            second = others[1]
            p2 = _est(second).mean
            facts.update(second=second.tunnel, second_pct=p2)
            clause, facts["distinct_from_second"] = _vs_second(best, second, p2)
            text += clause
        clause, facts["distinct_from_native"] = _vs_native(best)
        text += clause
        facts["single"] = _est(best).n < 2 or base.stats.n < 2 or (
            len(others) > 1 and _est(others[1]).n < 2)
        text += _bounds_caveat(base, best, pct)
        facts["lower_bounds"] = [r.tunnel for r in (base, best) if r.bound == "lower"]
        out.append(Takeaway("share-of-native", text, facts))
    return out


# sites on separate hosts: each end's own cost, named by what it did in the scenario's
# direction (metrics.end: 'the sender (site a)', 'the receiver (site a)' under iperf3 -R)
CPU_ENDS = (("cpu_per_gbit_a", "a"), ("cpu_per_gbit_b", "b"))


def cpu_per_gbit(c: Campaign) -> list[Takeaway]:
    """One sentence per scenario: each tunnel's CPU per Gbit/s as a multiple of native's,
    most expensive first; those whose 95% CIs overlap native's are named together. Sites on
    separate hosts: one sentence per end, the sender's and the receiver's CPU apart."""
    out = []
    ends = [e for e in CPU_ENDS if any(r.metric == e[0] for r in c.rows)]
    for metric, site in ends or [("cpu_per_gbit", "")]:
        out += _cpu_per_gbit(c, metric, site)
    return out


def _cpu_per_gbit(c: Campaign, metric: str, site: str) -> list[Takeaway]:
    out = []
    for scen in c.scenarios():
        end = f"the {catalogue.end(site, c.direction(scen[0]))}" if site else ""
        base = c.native_row(scen, metric)
        if base is None or not base.stats.mean:
            continue
        rows = [r for r in (c.row(t, scen, metric) for t in c.tunnels())
                if r is not None and r.kind != "native"]
        rows = [r for r in rows if r.share is not None]
        if not rows:
            continue
        rows.sort(key=lambda r: -_est(r).mean)
        differ, same, single = [], [], False
        facts: dict[str, Any] = {"scenario": scen, "native_mean": base.stats.mean, "ratios": {},
                                 "metric": metric, "end": end}
        for r in rows:
            e = _est(r)
            ratio = e.mean / 100
            facts["ratios"][r.tunnel] = ratio
            if e.decision == decide.UNTESTED:
                single = True
                differ.append(f"{r.tunnel} needs {ratio:.2f}× native's CPU")
            elif e.decision == decide.EQUIVALENT:
                same.append(r.tunnel)
            elif e.decision == decide.DIFFERENT:
                differ.append(f"{r.tunnel} needs {ratio:.2f}× native's CPU "
                              f"({stats.vs_native_ci(r)})")
            else:
                same_or_not = ranking.more_rounds_n(e.rounds_needed, e.n)
                differ.append(f"{r.tunnel} needs {ratio:.2f}× native's CPU (undecided against "
                              f"native: {same_or_not})")
        parts = []
        if differ:
            parts.append(", ".join(differ))
        if same:
            parts.append(f"{' and '.join(same)} {'is' if len(same) == 1 else 'are'} "
                         f"equivalent to native's (within ±{100 * decide.MARGIN:g} points)")
        on = f", on {end}" if end else ""
        text = (f"In {where(c, scen)}{on}, per Gbit/s (native: {num(base.stats.mean)} "
                f"{unit(c, metric, base.unit)}; paired round by round): "
                + "; ".join(parts) + ".")
        if single:
            text += " One run each: no confidence interval, significance not tested."
        facts["significant"] = [t for t in facts["ratios"] if t not in same]
        facts["single"] = single
        out.append(Takeaway("cpu-per-gbit", text, facts))
    return out
