"""report/decide.py: shares on the log scale, and the different / equivalent / undecided rule
on synthetic per-round data with known answers; references computed independently (scipy's
one-sample and paired t-tests, Holm by hand)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from scipy import stats as sps

from tunbench.report import decide as D


def _logs(pairs: list[tuple[float, float]]) -> list[float]:
    return [math.log(a / b) for a, b in pairs]


def test_share_is_the_back_transformed_log_interval() -> None:
    pairs = [(6750.3, 10121.4), (8442.0, 7302.5), (7001.0, 8100.0), (6100.0, 7900.0)]
    est = D.share(pairs)
    assert est is not None and est.n == 4 and est.scale == "log"
    logs = _logs(pairs)
    ref = sps.ttest_1samp(logs, 0.0).confidence_interval(0.95)
    assert est.mean == pytest.approx(100 * math.exp(statistics.fmean(logs)))
    assert est.ci_low == pytest.approx(100 * math.exp(ref.low))
    assert est.ci_high == pytest.approx(100 * math.exp(ref.high))
    # asymmetric around the estimate, as a ratio's interval is
    assert est.ci_high - est.mean > est.mean - est.ci_low


def test_geometric_mean_of_the_per_round_ratios() -> None:
    est = D.share([(50.0, 100.0), (200.0, 100.0)])
    assert est is not None and est.mean == pytest.approx(100.0)   # half and double: even


def test_positive_quantities_never_get_negative_bounds() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 6)
        pairs = [(rng.uniform(0.01, 1000), rng.uniform(1, 1000)) for _ in range(n)]
        est = D.share(pairs)
        assert est is not None and est.ci_low is not None and est.ci_high is not None
        assert 0 < est.ci_low <= est.mean <= est.ci_high


def test_one_round_is_untested() -> None:
    est = D.share([(90.0, 100.0)])
    assert est is not None
    assert est.untested and (est.ci_low, est.ci_high) == (None, None)
    assert est.decision == D.UNTESTED and est.mean == pytest.approx(90.0)
    [d] = D.decide([D.Pair("a", "b", (0.1,), 0.03)])
    assert d.verdict == D.UNTESTED and d.rounds_needed is None and d.p is None


def test_no_positive_round_no_share() -> None:
    assert D.share([(0.0, 100.0), (5.0, 0.0)]) is None


def test_p_value_is_the_paired_t_test() -> None:
    a = [math.log(x) for x in (90.0, 85.0, 93.0, 88.0)]
    b = [math.log(x) for x in (80.0, 82.0, 79.0, 84.0)]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    assert D.p_value(diffs) == pytest.approx(sps.ttest_rel(a, b).pvalue)


def test_holm_against_a_hand_computation() -> None:
    # sorted: 0.005·4 = 0.02; 0.01·3 = 0.03; 0.03·2 = 0.06; 0.04·1 = 0.04 -> max so far 0.06
    assert D.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert D.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])   # capped at 1, never falls
    assert D.holm([]) == []


def test_holm_makes_a_borderline_pair_undecided() -> None:
    """A pair significant on its own (p < 0.05) but not once three comparisons are made."""
    borderline = (0.05, 0.02, 0.08, 0.05)           # p ≈ 0.027 alone
    p = D.p_value(borderline)
    assert 0.0167 < p < 0.05
    alone = D.decide([D.Pair("a", "b", borderline, 0.001)])[0]
    assert alone.verdict == D.DIFFERENT and alone.ci_low is not None and alone.ci_low > 0
    clear = (1.0, 1.1, 0.9, 1.05)
    again = (0.08, 0.05, 0.02, 0.05)                # the same p, another pair
    got = D.decide([D.Pair("a", "b", borderline, 0.001), D.Pair("c", "d", clear, 0.001),
                    D.Pair("e", "f", again, 0.001), D.Pair("g", "h", again, 0.001)])
    assert [d.verdict for d in got] == [D.UNDECIDED, D.DIFFERENT, D.UNDECIDED, D.UNDECIDED]
    # by hand: sorted p's clear < p = p = p; steps ×4, ×3, ×2, ×1 with the max so far
    pc = D.p_value(clear)
    assert got[1].p_holm == pytest.approx(4 * pc)
    assert [d.p_holm for d in (got[0], got[2], got[3])] == pytest.approx([3 * p] * 3)
    # the CI at its Holm level contains 0 for the undecided ones, excludes it for the other
    assert got[0].ci_low is not None and got[0].ci_high is not None
    assert got[0].ci_low < 0 < got[0].ci_high
    assert got[1].ci_low is not None and got[1].ci_low > 0


def _rounds(share: float, sd: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [math.log(share) + rng.gauss(0, sd) for _ in range(n)]


def test_clearly_different_methods() -> None:
    """vxlan at ~91% of native against IPsec at ~1.7%: a 50× gap, different in 3 rounds."""
    vx = dict(enumerate(_rounds(0.91, 0.15, 3, 1)))
    ip = dict(enumerate(_rounds(0.017, 0.15, 3, 2)))
    [d] = D.decide([D.pair_of_shares("vxlan", "ipsec", vx, ip)])
    assert d.verdict == D.DIFFERENT and d.rounds_needed == 0
    assert d.mean == pytest.approx(math.log(0.91 / 0.017), abs=0.5)


def test_equivalent_methods_within_the_margin() -> None:
    """Two methods within a point of each other, many quiet rounds: TOST shows equivalence."""
    a = dict(enumerate(_rounds(0.90, 0.004, 12, 3)))
    b = {r: v + 0.002 * (1 if r % 2 else -1) for r, v in a.items()}
    pair = D.pair_of_shares("a", "b", a, b)
    assert pair.margin == pytest.approx(2 * math.asinh(0.03 / (2 * 0.90)), rel=0.02)
    [d] = D.decide([pair])
    assert d.verdict == D.EQUIVALENT and d.rounds_needed == 0
    # by hand: both one-sided tests reject at 5%
    n, m, s = len(pair.diffs), statistics.fmean(pair.diffs), statistics.stdev(pair.diffs)
    se = s / math.sqrt(n)
    assert sps.t.sf((m + pair.margin) / se, n - 1) < 0.05
    assert sps.t.cdf((m - pair.margin) / se, n - 1) < 0.05


def test_undecided_says_how_many_rounds_it_needs() -> None:
    """5 points apart with 6 points of round-to-round noise and 3 rounds: undecided; at the
    same mean and sd, the rounds it names are enough and one fewer is not."""
    diffs = (0.11, -0.01, 0.05)
    [d] = D.decide([D.Pair("a", "b", diffs, D.log_margin(0.03, 0.9))])
    assert d.verdict == D.UNDECIDED
    need = d.rounds_needed
    assert need is not None and need > 0
    m, s = statistics.fmean(diffs), statistics.stdev(diffs)

    def decided(k: int) -> bool:
        se = s / math.sqrt(k)
        return abs(m) > sps.t.ppf(0.975, k - 1) * se or \
            abs(m) + sps.t.ppf(0.95, k - 1) * se < d.margin
    assert decided(3 + need) and not decided(3 + need - 1)


def test_rounds_needed_edges() -> None:
    assert D.rounds_needed(0.1, 0.05, 1, 0.03) is None
    assert D.rounds_needed(0.1, 0.0, 2, 0.03) == 0
    assert D.rounds_needed(0.03, 10.0, 2, 0.03) == D.MAX_ROUNDS + 1 - 2   # hopeless


def test_against_reference_holds_every_method_to_holm() -> None:
    logs = {"vxlan": _rounds(0.91, 0.2, 3, 5), "ipsec": _rounds(0.017, 0.2, 3, 6),
            "once": [math.log(0.5)]}
    got = D.against_reference(logs)
    assert got["ipsec"].decision == D.DIFFERENT
    assert got["once"].decision == D.UNTESTED and got["once"].ci_low is None
    assert got["vxlan"].decision in (D.UNDECIDED, D.DIFFERENT)
    js = got["ipsec"].to_json()
    assert set(js) >= {"mean", "ci_low", "ci_high", "n", "decision"}
    assert all(isinstance(js[k], (int, float)) for k in ("mean", "ci_low", "ci_high", "n"))


def test_a_delay_is_judged_on_natives_share_of_it() -> None:
    """Two slow methods at 5.4× and 5.5× native's p50 are 18.5 % and 18.2 % of native's
    transaction rate: the ±3-point margin is read there (δ = 2·asinh(0.03 / 2g) at g the
    geometric mean of 1/5.4 and 1/5.5), not on the multiples, where it would be 0.5 % of the
    figure. The paired differences themselves do not change."""
    a = dict(enumerate(_rounds(5.4, 0.03, 6, 7)))
    b = dict(enumerate(_rounds(5.5, 0.03, 6, 8)))
    delay = D.pair_of_shares("a", "b", a, b, higher_is_better=False)
    g = 1 / math.exp((statistics.fmean(a.values()) + statistics.fmean(b.values())) / 2)
    assert delay.margin == pytest.approx(2 * math.asinh(0.03 / (2 * g)))
    assert 0.16 < delay.margin < 0.17
    as_rate = D.pair_of_shares("a", "b", {r: -v for r, v in a.items()},
                               {r: -v for r, v in b.items()})
    assert as_rate.margin == pytest.approx(delay.margin)
    assert as_rate.diffs == pytest.approx([-d for d in delay.diffs])
    assert D.pair_of_shares("a", "b", a, b).margin < 0.006       # read on the multiple
    assert D.share_level(math.log(2.0), higher_is_better=False) == pytest.approx(0.5)
    assert D.share_level(math.log(0.5)) == pytest.approx(0.5)


def test_against_reference_reads_a_delay_on_the_rate() -> None:
    """A method at 1.005× native's p50, ±1 % round to round: equivalent to native within 3
    points of its transaction rate; the same decision as its rate (0.995 of native's) gets."""
    logs = {"vxlan": [math.log(1.005) + (0.01 if r % 2 else -0.01) for r in range(8)]}
    delay = D.against_reference(logs, scale=1.0, higher_is_better=False)["vxlan"]
    rate = D.against_reference({"vxlan": [-v for v in logs["vxlan"]]})["vxlan"]
    assert delay.decision == rate.decision == D.EQUIVALENT
