"""Statistics fit for ratios, and the rule that decides between two methods.

Pure functions over per-round numbers (docs/methodology.md, "Estimator and decision rule"):

- A method's share of native is estimated on the log scale, paired per round against native:
  l_r = ln(method_r / native_r). With n rounds, mean l̄ and sd s, the share is
  exp(l̄) (the geometric mean of the per-round ratios) and its CI is
  exp(l̄ ± t(1-α/2, n-1)·s/√n): asymmetric, and never below 0 for a positive quantity.
  n = 1 is "untested" (no interval).
- Two methods A and B are compared on their paired per-round difference
  d_r = l_A,r - l_B,r = ln(A_r / B_r) (rounds where both ran, each against its own native).
  *different*: the paired t-test of d̄ = 0 rejects after Holm's correction over the
  comparisons made (the CI of d̄ at the Holm level excludes 0); *equivalent*: the two
  one-sided tests (TOST) put d̄ within ±δ, δ = 2·asinh(m / 2g) the log-scale image of a
  margin of m points of native (default 3) at the pair's level g = √(share_A·share_B);
  else *undecided*, with the rounds still needed (`rounds_needed`). For a delay or a cost
  (lower is better) the share is native's share of it, native / method (`share_level`): a round
  trip at 2× native's is a transaction rate at 50 % of native's, netperf TCP_RR's figure.

`decide(pairs)` is what a sequential design calls after each round.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Student's t through the functions scipy.stats.t computes with (its _ppf is stdtrit, its _sf
# stdtr at -x): the same figures, without importing scipy.stats (half a second per command)
from scipy.special import stdtr, stdtrit

ALPHA = 0.05
MARGIN = 0.03          # equivalence margin: 3 points of native (a ratio, native = 1)
MAX_ROUNDS = 1000      # beyond this, rounds_needed says "more than MAX_ROUNDS"
DIFFERENT, EQUIVALENT, UNDECIDED, UNTESTED = "different", "equivalent", "undecided", "untested"


def _t(q: float, df: int) -> float:
    return float(stdtrit(df, q))


def mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def share_level(mean_log: float, higher_is_better: bool = True) -> float:
    """The share of native a mean log-ratio ln(method / native) stands for, on which margins
    in points of native are read: exp(l̄) for a rate (throughput, packets/s); for a delay or a
    cost (lower is better) native's share of it, exp(-l̄), as a rate: a round trip at 2×
    native's is a transaction rate at 50 % of native's (netperf TCP_RR's own figure). So "3
    points of native" means the same on both kinds of figure, and a pair of slow methods
    (5.4× and 6.2× native's p50: 18.5 % and 16.0 %) is as close as their rates are, not 83
    points apart (docs/methodology.md, "Points of native for a delay")."""
    return math.exp(mean_log if higher_is_better else -mean_log)


def log_margin(margin: float, level: float) -> float:
    """δ on the log scale for an equivalence margin of `margin` (ratio units of native) between
    two shares whose geometric mean is `level`: |A - B| < m  ⇔  |ln(A/B)| < 2·asinh(m / 2g)."""
    return 2.0 * math.asinh(margin / (2.0 * level)) if level > 0 else math.inf


# -- one quantity ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """A figure with its confidence, in the unit the reader sees (% of native, × native, or
    a difference such as µs added). `ci_low`/`ci_high` are None when untested (n < 2)."""
    n: int
    mean: float
    ci_low: float | None
    ci_high: float | None
    scale: str = "log"                 # "log": a ratio; "linear": a difference
    decision: str | None = None        # against native (its reference), when judged
    rounds_needed: int | None = None   # more rounds to settle that decision, when undecided

    @property
    def untested(self) -> bool:
        return self.n < 2

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "n": self.n, "decision": self.decision, "rounds_needed": self.rounds_needed,
                "scale": self.scale}


def log_ratios(pairs: Iterable[tuple[float, float]]) -> list[float]:
    """ln(value / reference) per round; rounds with a non-positive side are left out."""
    return [math.log(v / ref) for v, ref in pairs if v > 0 and ref > 0]


def ratio_estimate(logs: Sequence[float], scale: float = 100.0,
                   confidence: float = 1 - ALPHA) -> Estimate:
    """exp(mean of the log-ratios) × scale, with the back-transformed t interval."""
    if not logs:
        raise ValueError("no rounds")
    n = len(logs)
    m, s = mean_sd(logs)
    if n < 2:
        return Estimate(n, scale * math.exp(m), None, None, "log", UNTESTED)
    h = _t((1 + confidence) / 2, n - 1) * s / math.sqrt(n)
    return Estimate(n, scale * math.exp(m), scale * math.exp(m - h), scale * math.exp(m + h))


def share(pairs: Iterable[tuple[float, float]], scale: float = 100.0) -> Estimate | None:
    """A method's share of native from (method_r, native_r) per round; None when no round
    has both sides positive."""
    logs = log_ratios(pairs)
    return ratio_estimate(logs, scale) if logs else None


def diff_estimate(diffs: Sequence[float], confidence: float = 1 - ALPHA) -> Estimate:
    """Mean of per-round differences (latency added) with its t interval (linear scale)."""
    if not diffs:
        raise ValueError("no rounds")
    n = len(diffs)
    m, s = mean_sd(diffs)
    if n < 2:
        return Estimate(n, m, None, None, "linear", UNTESTED)
    h = _t((1 + confidence) / 2, n - 1) * s / math.sqrt(n)
    return Estimate(n, m, m - h, m + h, "linear")


# -- two methods ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    """Two methods' paired per-round differences on the decision scale (log-ratios for
    shares, the figure itself for differences) and the equivalence margin δ on that scale."""
    a: str
    b: str
    diffs: tuple[float, ...]
    margin: float


@dataclass(frozen=True)
class Decision:
    a: str
    b: str
    verdict: str                 # different | equivalent | undecided | untested
    n: int
    mean: float                  # d̄ on the decision scale
    sd: float
    p: float | None              # two-sided paired t-test of d̄ = 0
    p_holm: float | None         # Holm-adjusted over the comparisons decided together
    level: float | None          # the Holm level (α / (m - k)) this comparison is held to
    ci_low: float | None         # the CI of d̄ at that level
    ci_high: float | None
    margin: float
    rounds_needed: int | None    # undecided: more rounds to the nearer boundary; else 0

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "decision": self.verdict, "n": self.n,
                "mean": self.mean, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "p": self.p, "p_holm": self.p_holm, "margin": self.margin,
                "rounds_needed": self.rounds_needed}


def p_value(diffs: Sequence[float]) -> float:
    """Two-sided p of the paired t-test of mean 0 (sd 0: 0 when the mean is not 0)."""
    n = len(diffs)
    m, s = mean_sd(diffs)
    if s == 0:
        return 0.0 if m != 0 else 1.0
    return float(2 * stdtr(n - 1, -abs(m) / (s / math.sqrt(n))))


def holm(ps: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values: p_adj(i) = max over j ≤ i of min(1, (m - j + 1)·p_(j)), in
    ascending order of p, returned in the input's order."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [0.0] * m
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * ps[i]))
        out[i] = running
    return out


def equivalent(diffs: Sequence[float], margin: float, alpha: float = ALPHA) -> bool:
    """TOST: both one-sided tests reject at α, i.e. the (1 - 2α) CI lies inside (-δ, δ)."""
    m, s = mean_sd(diffs)
    return shown_within(m, s, len(diffs), margin, alpha)


def shown_within(mean: float, sd: float, n: int, margin: float, alpha: float = ALPHA) -> bool:
    """The TOST on summary figures: the one-sided (1 - α) bounds of a mean difference of n
    paired rounds with standard deviation `sd` both lie inside (-margin, margin). False when
    n < 2 (nothing shown) or the margin is not finite."""
    if n < 2 or not math.isfinite(margin):
        return False
    h = _t(1 - alpha, n - 1) * sd / math.sqrt(n)
    return -margin < mean - h and mean + h < margin


def rounds_needed(mean: float, sd: float, n: int, margin: float, level: float = ALPHA,
                  alpha: float = ALPHA) -> int | None:
    """More rounds until, at the observed mean and sd, the pair would be decided: the CI at
    `level` excludes 0 (different), or the TOST (1 - 2α) interval fits inside ±margin
    (equivalent); the nearer of the two. None: not estimable (n < 2); MAX_ROUNDS + 1 - n
    when neither is reached within MAX_ROUNDS rounds."""
    import numpy as np
    if n < 2:
        return None
    if sd == 0:
        return 0 if mean != 0 or margin > 0 else MAX_ROUNDS + 1 - n
    k = np.arange(max(n, 2), MAX_ROUNDS + 1)
    se = sd / np.sqrt(k)
    differ = abs(mean) > stdtrit(k - 1, 1 - level / 2) * se
    equal = abs(mean) + stdtrit(k - 1, 1 - alpha) * se < margin
    hit = np.flatnonzero(differ | equal)
    return int(k[hit[0]]) - n if hit.size else MAX_ROUNDS + 1 - n


def _levels(tested: Sequence[Pair], alpha: float) -> tuple[dict[int, float], dict[int, float],
                                                           float]:
    """Per pair (by id): its Holm-adjusted p and the level its CI is drawn at, α·p/p_adj (the
    CI then excludes 0 exactly when p_adj < α); and the level an unrejected pair is held to
    next, α/(m - k) with k pairs rejected."""
    ps = [p_value(p.diffs) for p in tested]
    adj = holm(ps)
    k = sum(1 for v in adj if v < alpha)
    m = max(len(tested), 1)
    ci_level = {id(p): (alpha * raw / a if raw > 0 and a > 0 else alpha / m)
                for p, raw, a in zip(tested, ps, adj, strict=True)}
    return dict(zip((id(p) for p in tested), adj, strict=True)), ci_level, \
        alpha / max(m - k, 1)


def decide(pairs: Sequence[Pair], alpha: float = ALPHA) -> list[Decision]:
    """The decision for each pair, Holm's correction taken over all of them."""
    tested = [p for p in pairs if len(p.diffs) >= 2]
    adjusted, ci_level, next_level = _levels(tested, alpha)
    out = []
    for p in pairs:
        n = len(p.diffs)
        if n < 2:
            out.append(Decision(p.a, p.b, UNTESTED, n, p.diffs[0] if p.diffs else math.nan,
                                0.0, None, None, None, None, None, p.margin, None))
            continue
        m, s = mean_sd(p.diffs)
        p_adj, level = adjusted[id(p)], ci_level[id(p)]
        h = _t(1 - level / 2, n - 1) * s / math.sqrt(n)
        need: int | None
        if p_adj < alpha:
            verdict, need = DIFFERENT, 0
        elif equivalent(p.diffs, p.margin, alpha):
            verdict, need = EQUIVALENT, 0
        else:
            verdict = UNDECIDED
            need = rounds_needed(m, s, n, p.margin, next_level, alpha)
        out.append(Decision(p.a, p.b, verdict, n, m, s, p_value(p.diffs), p_adj, level,
                            m - h, m + h, p.margin, need))
    return out


def pair_level(la: Mapping[Any, float], lb: Mapping[Any, float],
               higher_is_better: bool = True) -> float:
    """The level of a pair: the geometric mean of the two methods' shares of native
    (`share_level`); 1.0 when either has no round."""
    if not la or not lb:
        return 1.0
    return share_level((statistics.fmean(la.values()) + statistics.fmean(lb.values())) / 2,
                       higher_is_better)


def pair_of_shares(a: str, b: str, la: Mapping[Any, float], lb: Mapping[Any, float],
                   margin: float = MARGIN, higher_is_better: bool = True) -> Pair:
    """Two methods' log-ratios to native by round -> their paired Pair, δ from MARGIN at the
    pair's level (the geometric mean of their two shares: `pair_level`)."""
    rounds = [r for r in la if r in lb]
    diffs = tuple(la[r] - lb[r] for r in rounds)
    return Pair(a, b, diffs, log_margin(margin, pair_level(la, lb, higher_is_better)))


def reference_pair(name: str, logs: Sequence[float], margin: float = MARGIN,
                   higher_is_better: bool = True) -> Pair:
    """A method against the reference (native, 0 on the log scale) from its per-round
    log-ratios: δ from MARGIN at the level of the geometric mean of its share and native's."""
    level = share_level(statistics.fmean(logs) / 2, higher_is_better) if logs else 1.0
    return Pair(name, "native", tuple(logs), log_margin(margin, level))


def against_reference(logs: Mapping[str, Sequence[float]], scale: float = 100.0,
                      margin: float = MARGIN, higher_is_better: bool = True
                      ) -> dict[str, Estimate]:
    """Each method's share of the reference (native) from its per-round log-ratios, with its
    decision against the reference, Holm taken over the methods given together (the level:
    the geometric mean of the method's share and native's 1)."""
    pairs = [reference_pair(k, v, margin, higher_is_better) for k, v in logs.items() if v]
    decided = {d.a: d for d in decide(pairs)}
    out = {}
    for k, v in logs.items():
        if not v:
            continue
        est = ratio_estimate(v, scale)
        d = decided[k]
        out[k] = Estimate(est.n, est.mean, est.ci_low, est.ci_high, "log", d.verdict,
                          d.rounds_needed)
    return out
