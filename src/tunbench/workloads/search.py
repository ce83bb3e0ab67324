"""Throughput searches, independent of how a trial is measured.

`rfc2544_search` is the RFC 2544 section 26.1 binary search as the study ran it: offer the
maximum rate first; if its loss exceeds the threshold, bisect between the highest passing and
the lowest failing rate until they are closer than the resolution. `mlr_search` runs FD.io
CSIT's MLRsearch (RFC 9971) for several goals in one pass. Both take a `measure(rate_pps,
duration) -> Trial` function, so the logic is unit-tested with a deterministic link model and
driven by the real generator in a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Trial(Protocol):
    intended_pps: float | None
    offered: int
    lost: int
    loss_ratio: float
    sender_limited: bool
    duration_s: float


Measure = Callable[[float, float], Trial]   # (rate_pps, duration_s) -> Trial


def trial_passes(t: Trial, threshold: float) -> bool:
    """A trial passes when the load was really offered and the loss ratio is within the
    threshold (0.001 = 0.1%)."""
    return not t.sender_limited and t.loss_ratio <= threshold


# A rate within 2% of what the generator can offer cannot be told from the generator's own limit
# (the generator calls a trial sender-limited below 98% of its target, loadgen/src/send.rs).
GENERATOR_MARGIN = 0.02


@dataclass
class SearchResult:
    method: str
    rate_pps: float | None            # highest passing rate found (None: even min failed)
    lower_pps: float | None
    upper_pps: float | None           # lowest failing rate (None: max passed)
    trials: list[Any] = field(default_factory=list)
    trial_seconds: float = 0.0        # sum of intended trial durations
    max_pps: float | None = None      # the upper bound the search was given
    threshold: float = 0.0            # loss ratio this search's trials had to stay within

    @property
    def at_upper_bound(self) -> bool:
        """The rate found is (within the generator's own margin) the upper bound the search was
        given: no loss threshold was found below what the generator can offer, so the figure
        is a lower bound of the tunnel's, not its loss threshold."""
        if self.rate_pps is None:
            return False
        if self.upper_pps is None:
            return True
        return self.max_pps is not None and self.rate_pps >= (1 - GENERATOR_MARGIN) * self.max_pps

    @property
    def sender_bound(self) -> bool:
        """No trial lost more than the threshold: every trial that failed, failed because the
        sender could not offer the load. The rate found is where the sending host stopped
        keeping up (on one host that includes encapsulation done in the sender's context), a
        lower bound of the loss threshold rather than the threshold."""
        if self.rate_pps is None:
            return False
        failed = [t for t in self.trials if not trial_passes(t, self.threshold)]
        return bool(failed) and all(t.sender_limited and t.loss_ratio <= self.threshold
                                    for t in failed)

    @property
    def lower_bound(self) -> bool:
        """Its figure is a lower bound (at the upper bound, or limited by the sender)."""
        return self.at_upper_bound or self.sender_bound

    @property
    def width_pps(self) -> float | None:
        if self.lower_pps is None or self.upper_pps is None:
            return None
        return self.upper_pps - self.lower_pps


def rfc2544_search(measure: Measure, max_pps: float, *, threshold: float, resolution_pps: float,
                   duration: float, min_pps: float = 0.0, max_trials: int = 64) -> SearchResult:
    """Binary search for the highest rate whose loss ratio is <= threshold.

    The interval [lower (passed or min), upper (failed)] halves each trial until
    upper - lower <= resolution_pps; the answer is the last passing rate.
    """
    if not 0 <= min_pps < max_pps or resolution_pps <= 0:
        raise ValueError("need 0 <= min_pps < max_pps and resolution_pps > 0")
    res = SearchResult("rfc2544", None, None, None, max_pps=max_pps, threshold=threshold)

    def run(rate: float) -> bool:
        t = measure(rate, duration)
        res.trials.append(t)
        res.trial_seconds += duration
        return trial_passes(t, threshold)

    if run(max_pps):
        res.rate_pps = res.lower_pps = max_pps
        return res
    lo, hi = min_pps, max_pps
    res.upper_pps = hi
    while hi - lo > resolution_pps and len(res.trials) < max_trials:
        mid = (lo + hi) / 2.0
        if run(mid):
            lo = mid
            res.rate_pps = res.lower_pps = mid
        else:
            hi = res.upper_pps = mid
    if res.lower_pps is None and min_pps > 0 and run(min_pps):
        res.rate_pps = res.lower_pps = min_pps
    return res


def mlr_search(measure: Measure, max_pps: float, *, goals: dict[str, float],
               relative_width: float, duration: float, min_pps: float,
               search_duration_max: float = 3600.0) -> dict[str, SearchResult]:
    """MLRsearch with several goals (name -> loss ratio) in one pass; one result per goal.

    Each goal is conservative like RFC 2544: one trial of `duration` decides (exceed ratio 0,
    duration sum = final trial duration); shorter preceding targets (initial trials of
    min(1 s, duration)) narrow the interval cheaply first.
    """
    from MLRsearch import (  # type: ignore[import-untyped]
        AbstractMeasurer,
        Config,
        MeasurementResult,
        MultipleLossRatioSearch,
        SearchGoal,
    )

    trials: list[Any] = []
    seconds = [0.0]

    class Measurer(AbstractMeasurer):  # type: ignore[misc]
        def measure(self, intended_duration: float, intended_load: float) -> Any:
            t = measure(float(intended_load), float(intended_duration))
            trials.append(t)
            seconds[0] += intended_duration
            # sender-limited: what the intended load would have sent in the time the sender
            # took counts as intended, so MLRsearch counts the shortfall as bad packets. This
            # covers a sender that stopped short and one that sent everything but late (its
            # real rate was lower): RFC 2544 fails both too, so the methods agree.
            due = round(intended_load * max(intended_duration, t.duration_s))
            return MeasurementResult(
                intended_duration=intended_duration, intended_load=intended_load,
                offered_count=t.offered, loss_count=t.lost,
                offered_duration=t.duration_s,
                intended_count=max(due, t.offered) if t.sender_limited else t.offered)

    sgoals = {name: SearchGoal(loss_ratio=ratio, exceed_ratio=0.0, relative_width=relative_width,
                               initial_trial_duration=min(1.0, duration),
                               final_trial_duration=duration, duration_sum=duration,
                               preceding_targets=2, fail_fast=False)
              for name, ratio in goals.items()}
    config = Config()
    config.goals = list(sgoals.values())
    config.min_load = min_pps
    config.max_load = max_pps
    config.search_duration_max = search_duration_max
    config.warmup_duration = None
    found = MultipleLossRatioSearch(config=config).search(measurer=Measurer(),
                                                          debug=lambda _msg: None)
    out = {}
    for name, goal in sgoals.items():
        gr = found[goal]
        lower = gr.relevant_lower_bound
        upper = gr.relevant_upper_bound
        lo = float(lower) if lower is not None else None
        hi = float(upper) if upper is not None else None
        out[name] = SearchResult("mlrsearch", lo, lo, hi, trials, seconds[0], max_pps,
                                 goals[name])
    return out
