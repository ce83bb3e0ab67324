"""line-rate-processes growth rule (pure): the steps tried, when growth stops, which K is chosen."""

from __future__ import annotations

import pytest

from tunbench.workloads import line_rate_processes as lr


@pytest.mark.parametrize("cap,steps", [(1, [1]), (2, [1, 2]), (6, [1, 2, 4, 6]),
                                       (16, [1, 2, 4, 8, 16]), (64, [1, 2, 4, 8, 16, 32, 64])])
def test_step_counts_double_up_to_the_cap(cap: int, steps: list[int]) -> None:
    assert lr.step_counts(cap) == steps


def test_growth_stops_at_the_first_step_under_the_threshold() -> None:
    assert lr.keeps_rising([(1, 100.0)], 5.0)
    assert lr.keeps_rising([(1, 100.0), (2, 105.0)], 5.0)         # exactly 5 %: go on
    assert not lr.keeps_rising([(1, 100.0), (2, 104.9)], 5.0)
    assert not lr.keeps_rising([(1, 100.0), (2, 90.0)], 5.0)      # a drop stops it too
    assert lr.keeps_rising([(1, 0.0), (2, 1.0)], 5.0)             # from nothing: rising


def test_chosen_k_is_the_fewest_within_the_threshold_of_the_plateau() -> None:
    # a shaped link: one process already fills it
    assert lr.choose([(1, 190.0), (2, 191.0)], 5.0) == (1, 191.0)
    # rising, then flat: the plateau is the best step, K the first within 5 % of it
    assert lr.choose([(1, 100.0), (2, 180.0), (4, 200.0), (8, 203.0)], 5.0) == (4, 203.0)
    # the last step fell back: the plateau is still the best step measured
    assert lr.choose([(1, 100.0), (2, 150.0), (4, 120.0)], 5.0) == (2, 150.0)


def test_fixed_k_and_growth_params() -> None:
    grow = lr.LineRateParams()
    assert grow.grows and grow.most == 16
    fixed = lr.LineRateParams(processes=4)
    assert not fixed.grows and fixed.most == 4
    assert lr.LineRateParams(max_processes=0).validate() == [
        "max_processes 0 out of range (1..64)"]
