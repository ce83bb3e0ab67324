"""`tunbench compare A B`: per tunnel and metric, the change from campaign A to campaign B.

Only like with like. Each campaign's fingerprint (results/fingerprint.py: testbed, underlay
shaping and WAN emulation, durations, kernel, CPU, tool versions, tunnel and workload
parameters) must agree; every difference is named and the comparison refused (exit 2), or,
with --force, made anyway with a warning on every line.

Two views per tunnel and metric:
- absolute: A's values against B's;
- share of native: each value divided by native's value in the same round of its own
  campaign (the same repeat; a round without native is left out), so what moved the whole
  host (a busy neighbour, a warmer CPU) cancels; estimated on the log scale as everywhere in
  the report (report/decide.py: geometric mean, asymmetric 95% CI), and judged on the
  log-shares. A tunnel's verdict rests on this view
  whenever both campaigns measured native for that metric; native's own change is the host's
  drift and is reported, never counted as a regression (the fingerprint pins everything
  that could legitimately change it).

Verdicts: "improved", "regressed", "no significant change", or "untested" (fewer than two
values on a side). Significance: FD.io CSIT's jumpavg (does the bit-counting classifier put a
group boundary exactly between A's and B's samples?) when both sides have at least
JUMPAVG_MIN values; otherwise non-overlap of the 95% confidence intervals of the means.

Exit codes for a CI gate: 0 compared and no significant regression; 1 a significant
regression; 2 nothing comparable (fingerprints differ, no case in common, or untested
entries without --allow-untested) or invalid input.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..results import fingerprint
from ..results.model import log_share, round_reference
from . import data, decide, stats

JUMPAVG_MIN = 5
IMPROVED, REGRESSED, SAME, UNTESTED = ("improved", "regressed", "no significant change",
                                       "untested")
ABSOLUTE, SHARE = "absolute", "share of native"
# counts whose ratio to native's count is no cost or share (a few retransmits against a few
# others): judged on the absolute view only
COUNT_UNITS = ("segments", "hops", "TTL", "iperf3 pairs")
HOST_DRIFT = "native (reference): its change is the host's drift, never a regression"


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
    verdict: str                              # the verdict that counts (see `basis`)
    basis: str = ABSOLUTE                     # which view the verdict rests on
    absolute_verdict: str = UNTESTED
    share_a: float | None = None              # % of native (paired per round, log scale)
    share_b: float | None = None
    share_change_pct: float | None = None     # change of the share, in % of A's share
    share_verdict: str | None = None
    reference: bool = False                   # native itself: reported, never a regression
    warnings: tuple[str, ...] = ()            # --force: what makes this line incomparable
    share_ci_a: tuple[float, float] | None = None   # the shares' 95% CIs (None: one round)
    share_ci_b: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def key(self) -> str:
        return f"{self.tunnel}/{self.workload}/mtu{self.mtu}/{self.metric}"

    @property
    def shown_change(self) -> float | None:
        return self.share_change_pct if self.basis == SHARE else self.change_pct


@dataclass
class Result:
    a: Path
    b: Path
    changes: list[Change]
    only: list[str]
    differences: list[str] = field(default_factory=list)
    forced: bool = False
    campaigns: tuple[data.Campaign, ...] = ()    # A and B as read (for their problems)

    def untested(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == UNTESTED and not c.reference]


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
        return False, "n<2", UNTESTED
    sa, sb = stats.summarize(a), stats.summarize(b)
    if len(a) >= JUMPAVG_MIN and len(b) >= JUMPAVG_MIN:
        significant, method = jumpavg_split(a, b), "jumpavg"
    else:
        significant, method = not data.overlap(sa, sb), "ci95"
    if not significant or sa.mean == sb.mean:
        return False, method, SAME
    better = (sb.mean > sa.mean) == higher_is_better
    return True, method, IMPROVED if better else REGRESSED


def _by_repeat(c: data.Campaign, tun: str, scen: data.Scenario,
               metric: str) -> dict[int, float]:
    runs: dict[int, list[float]] = {}   # native: its runs in the round (plan.spread_natives)
    for r in c.ok:
        if r.tunnel.label == tun and r.scenario == scen:
            v = r.paired(metric)   # the value a round pairs against native's
            if v is not None:
                runs.setdefault(r.repeat if r.repeat is not None else len(runs) + 1,
                                []).append(v)
    return {rep: round_reference(vs) for rep, vs in runs.items()}


def shares(c: data.Campaign, tun: str, scen: data.Scenario, metric: str) -> list[float]:
    """Each round's ln(value / native's value in the same round), or the case's own share
    where it measured native beside it (model.log_share); rounds without either or with a
    non-positive side are left out; empty without native."""
    native = next((t for t in c.tunnels() if c.kind_of(t) == "native"), None)
    if native is None:
        return []
    nat = _by_repeat(c, native, scen, metric)
    own = {r.repeat: s for r in c.ok if r.tunnel.label == tun and r.scenario == scen
           for s in [r.own_share(metric)] if s is not None and r.repeat is not None}
    return [x for rep, v in sorted(_by_repeat(c, tun, scen, metric).items())
            for x in [log_share(v, nat.get(rep), own.get(rep))] if x is not None]


def _ci(e: decide.Estimate) -> tuple[float, float] | None:
    return None if e.ci_low is None or e.ci_high is None else (e.ci_low, e.ci_high)


def _pct(before: float, after: float) -> float | None:
    return 100.0 * (after - before) / abs(before) if before else None


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
        out.append(_change(a, b, ra, rb))
    only += [f"only in B: {k[0]} {k[1]} MTU {k[2]} {k[4]}" for k in rows_b if k not in seen]
    return out, only


def _change(a: data.Campaign, b: data.Campaign, ra: stats.Row, rb: stats.Row) -> Change:
    scen = (ra.workload, ra.mtu, ra.offloads)
    va = data.values_by_tunnel(a, scen, ra.metric).get(ra.tunnel, [])
    vb = data.values_by_tunnel(b, scen, ra.metric).get(ra.tunnel, [])
    significant, method, verdict = judge(va, vb, ra.higher_is_better)
    absolute = verdict
    reference = stats.is_reference(ra)
    share_a = share_b = share_pct = share_verdict = ci_a = ci_b = None
    basis = ABSOLUTE
    if not reference and ra.unit not in COUNT_UNITS:
        sa, sb = shares(a, ra.tunnel, scen, ra.metric), shares(b, ra.tunnel, scen, ra.metric)
        if sa and sb:
            ea, eb = decide.ratio_estimate(sa), decide.ratio_estimate(sb)
            share_a, share_b, ci_a, ci_b = ea.mean, eb.mean, _ci(ea), _ci(eb)
            share_pct = _pct(share_a, share_b)
            # on the log-shares: their CIs overlap exactly when the shares' CIs do
            significant, method, share_verdict = judge(sa, sb, ra.higher_is_better)
            verdict, basis = share_verdict, SHARE
    return Change(ra.tunnel, ra.workload, ra.mtu, ra.offloads, ra.metric, ra.unit,
                  ra.higher_is_better, ra.stats.n, ra.stats.mean,
                  (ra.stats.ci95_low, ra.stats.ci95_high), rb.stats.n, rb.stats.mean,
                  (rb.stats.ci95_low, rb.stats.ci95_high), _pct(ra.stats.mean, rb.stats.mean),
                  significant, method, verdict, basis, absolute, share_a, share_b, share_pct,
                  share_verdict, reference, share_ci_a=ci_a, share_ci_b=ci_b)


def run(a_dir: Path, b_dir: Path, force: bool = False) -> Result:
    """Load both campaigns through the one reader, check their fingerprints, compare.
    Refuses (SpecError, exit 2) when they differ, unless `force`."""
    from ..errors import SpecError
    a, b = data.load(a_dir), data.load(b_dir)
    diffs = fingerprint.differences(fingerprint.of_index(a.index), fingerprint.of_index(b.index))
    if diffs and not force:
        raise SpecError(f"{a_dir} and {b_dir} are not comparable: " + "; ".join(diffs),
                        "compare campaigns recorded with the same settings on the same host "
                        "and tools, or pass --force to compare anyway; every line is then "
                        "marked")
    changes, only = compare(a, b)
    if diffs:
        short = tuple(d.split(":")[0] for d in diffs)
        changes = [dataclasses.replace(c, warnings=short) for c in changes]
    return Result(a_dir, b_dir, changes, only, diffs, force, (a, b))


def regressions(changes: list[Change], threshold_pct: float) -> list[Change]:
    """Significant regressions, in the view the verdict rests on, whose size exceeds the
    threshold (percent of A's figure); native's own change never counts."""
    return [c for c in changes if c.verdict == REGRESSED and not c.reference
            and (c.shown_change is None or abs(c.shown_change) > threshold_pct)]


def exit_code(res: Result, threshold: float, allow_untested: bool = False) -> int:
    if regressions(res.changes, threshold):
        return 1
    if not res.changes or (res.untested() and not allow_untested):
        return 2
    if all(c.reference for c in res.changes):
        return 2          # only native in common: no tunnel was compared
    return 0


def verdict_line(res: Result, threshold: float, allow_untested: bool) -> list[str]:
    """The summary: every regression by name, what was not tested, and why the exit code."""
    reg = regressions(res.changes, threshold)
    lines = []
    if res.differences:
        lines.append("WARNING (--force): A and B are not comparable: "
                     + "; ".join(res.differences))
    if not res.changes:
        lines.append("nothing comparable: A and B have no tunnel, workload, MTU and metric in "
                     "common (exit 2)")
        return lines
    if reg:
        lines.append(f"{len(reg)} significant regression(s) beyond {threshold:g}%:")
        lines += [f"  {c.key}: {c.shown_change:+.1f}% ({c.basis}, {c.method})"
                  if c.shown_change is not None else f"  {c.key} ({c.basis}, {c.method})"
                  for c in reg]
    else:
        lines.append(f"no significant regression beyond {threshold:g}%")
    untested = res.untested()
    if untested:
        tail = ("allowed by --allow-untested" if allow_untested else
                "not a pass (exit 2): re-run with --repeats 2 or more, or pass "
                "--allow-untested")
        lines.append(f"{len(untested)} entr{'y' if len(untested) == 1 else 'ies'} untested "
                     f"(fewer than 2 repeats on a side): {tail}")
    elif not reg and all(c.reference for c in res.changes):
        lines.append("only native is in both campaigns: no tunnel compared (exit 2)")
    return lines


def to_json(res: Result, threshold: float, allow_untested: bool = False) -> dict[str, Any]:
    reg = regressions(res.changes, threshold)
    return {"format": "tunbench-compare", "format_version": 3, "a": str(res.a),
            "b": str(res.b), "threshold_pct": threshold, "jumpavg_min_samples": JUMPAVG_MIN,
            "comparable": not res.differences, "differences": res.differences,
            "forced": res.forced, "allow_untested": allow_untested,
            "exit_code": exit_code(res, threshold, allow_untested),
            "entries": [c.to_dict() for c in res.changes], "unmatched": res.only,
            "regressions": [c.key for c in reg],
            "untested": [c.key for c in res.untested()],
            "summary": verdict_line(res, threshold, allow_untested)}
