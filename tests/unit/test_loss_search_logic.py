"""Search logic on a deterministic link model; loadgen JSON parsers on captured real output."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tunbench.workloads import loadgen
from tunbench.workloads.search import mlr_search, rfc2544_search, trial_passes

DATA = Path(__file__).parents[1] / "data" / "loadgen"


@dataclass
class FakeTrial:
    intended_pps: float | None
    offered: int
    lost: int
    loss_ratio: float
    sender_limited: bool
    duration_s: float


def link(capacity_pps: float, sender_max: float = 1e9):
    """A policer: everything above capacity is lost; the sender cannot exceed sender_max."""
    def measure(rate: float, duration: float) -> FakeTrial:
        offered_rate = min(rate, sender_max)
        offered = int(offered_rate * duration)
        lost = max(0, offered - int(capacity_pps * duration))
        return FakeTrial(rate, offered, lost, lost / offered if offered else 0.0,
                         offered_rate < 0.98 * rate, duration)
    return measure


def test_rfc2544_converges_within_resolution() -> None:
    res = rfc2544_search(link(6667), 10000, threshold=0.001, resolution_pps=1.0, duration=1.0)
    assert res.rate_pps is not None and res.upper_pps is not None
    assert res.upper_pps - res.rate_pps <= 1.0
    assert 6667 - 1 <= res.rate_pps <= 6667 * 1.001
    # first trial at max, then bisection: log2(10000 / 1) ~ 14 trials
    assert res.trials[0].intended_pps == 10000 and len(res.trials) <= 15
    assert res.trial_seconds == len(res.trials)


def test_rfc2544_max_passes_and_sender_limited_fails() -> None:
    res = rfc2544_search(link(1e6), 5000, threshold=0.0, resolution_pps=10, duration=2.0)
    assert res.rate_pps == 5000 and len(res.trials) == 1 and res.upper_pps is None
    # lossless link but the sender cannot offer more than 3000: those trials fail
    res = rfc2544_search(link(1e6, sender_max=3000), 5000, threshold=0.0, resolution_pps=10,
                         duration=1.0)
    assert res.rate_pps is not None and 2900 <= res.rate_pps <= 3000 / 0.98
    assert not trial_passes(FakeTrial(1, 10, 0, 0.0, True, 1), 0.5)


def test_rfc2544_nothing_passes() -> None:
    res = rfc2544_search(link(0), 1000, threshold=0.0, resolution_pps=100, duration=1.0,
                         min_pps=100)
    assert res.rate_pps is None and res.upper_pps is not None


def test_mlrsearch_two_goals_one_pass() -> None:
    out = mlr_search(link(6667), 10000, goals={"ndr": 0.0, "pdr": 0.005},
                     relative_width=0.005, duration=1.0, min_pps=100)
    ndr, pdr = out["ndr"].rate_pps, out["pdr"].rate_pps
    assert ndr is not None and pdr is not None
    assert 6667 * 0.99 <= ndr <= 6667
    assert ndr <= pdr <= 6667 / 0.995 * 1.001
    assert out["ndr"].trials is out["pdr"].trials   # one pass, shared trials


def test_a_rate_at_the_generators_limit_is_a_lower_bound_not_a_threshold() -> None:
    """Passing at max, or failing only within the generator's 2% margin below it, finds the
    generator's limit; a link that drops packets well below max gives a real threshold."""
    res = rfc2544_search(link(1e6), 5000, threshold=0.0, resolution_pps=10, duration=1.0)
    assert res.upper_pps is None and res.at_upper_bound
    # MLRsearch on a lossless link whose sender tops out 2.4% below the max it was given: its
    # answer sits just under max with a failing (sender-limited) rate above it
    out = mlr_search(link(1e6, sender_max=4880), 5000, goals={"ndr": 0.0},
                     relative_width=0.001, duration=1.0, min_pps=100)
    ndr = out["ndr"]
    assert ndr.rate_pps is not None and ndr.rate_pps >= 0.98 * 5000 and ndr.upper_pps is not None
    assert ndr.at_upper_bound
    for res in (rfc2544_search(link(3000), 5000, threshold=0.0, resolution_pps=10,
                               duration=1.0),
                mlr_search(link(3000), 5000, goals={"ndr": 0.0}, relative_width=0.005,
                           duration=1.0, min_pps=100)["ndr"]):
        assert res.rate_pps is not None and res.rate_pps <= 3000
        assert res.upper_pps is not None and not res.at_upper_bound
    nothing = rfc2544_search(link(0), 1000, threshold=0.0, resolution_pps=100, duration=1.0,
                             min_pps=100)
    assert not nothing.at_upper_bound


def test_parse_real_loadgen_output() -> None:
    send = loadgen.parse_send((DATA / "send-imix-paced-loopback.json").read_text())
    recv = loadgen.parse_recv((DATA / "recv-imix-paced-loopback.json").read_text())
    t = loadgen.trial_result(send, recv, 20000.0)
    assert t.offered == 100000 and t.received == 100000 and t.lost == 0
    assert t.loss_ratio == 0.0 and not t.sender_limited and t.socket_drops == 0
    assert t.latency_us["p50"] == pytest.approx(5.0715)
    assert t.per_size_sent == {"1500": 8333, "40": 58334, "576": 33333}
    assert t.mean_size_l3 == pytest.approx(4084 / 12)
    # END packets (3 rounds x 100 flows) are counted apart from the data
    assert (t.end_sent, t.end_received, t.end_lost) == (300, 300, 0)
    # a path that drops some of them right after an overload (a full tbf queue): not loss
    short = loadgen.trial_result(send, {**recv, "end_packets": 289}, 20000.0)
    assert short.lost == 0 and short.end_lost == 11


def test_parse_sender_limited_and_no_end() -> None:
    send = loadgen.parse_send(
        (DATA / "send-imix-paced-loopback-sender-limited.json").read_text())
    recv = loadgen.parse_recv(
        (DATA / "recv-imix-paced-loopback-sender-limited.json").read_text())
    t = loadgen.trial_result(send, recv, send["target_pps"])
    assert t.sender_limited is True
    assert t.offered_pps < 0.98 * send["target_pps"]
    noend = loadgen.parse_recv((DATA / "recv-noend-idle-perflow.json").read_text())
    assert noend["lost"] is None and noend["end_received"] is False
    t2 = loadgen.trial_result(loadgen.parse_send(
        (DATA / "send-genome-noend.json").read_text()), noend, None)
    assert t2.lost == t2.offered - t2.received
    assert (t2.end_sent, t2.end_received, t2.end_lost) == (0, 0, 0)


def test_parse_garbage_is_one_clear_error() -> None:
    from tunbench.errors import CommandFailed
    with pytest.raises(CommandFailed, match="printed no JSON"):
        loadgen.parse_send("tunbench-loadgen: --rate-pps: bad value (use e.g. 100k)\n")


def test_loss_by_size_names_the_sizes_a_tunnel_drops() -> None:
    from tunbench.workloads.loss_search import loss_by_size
    # an IMIX trial over SRv6 encap: every 1500 B packet lost (measured in test_capture.py)
    sent = {"40": 7000, "576": 4000, "1500": 1000}
    assert loss_by_size(sent, {"40": 7000, "576": 4000}) == (
        "its last trial lost 100.0% of the 1500 B packets; 40 B: 0.0%, 576 B: 0.0%")
    assert loss_by_size(sent, {"40": 6930, "576": 3960, "1500": 990}) == (
        "its last trial lost 1.0% of the 40 B and 576 B and 1500 B packets")
    assert loss_by_size({"361": 100}, {"361": 90}) == "its last trial lost 10.0% of the packets"
    assert loss_by_size({}, {}) == "its last trial sent nothing"


def test_eta_follows_resolution_and_method() -> None:
    from tunbench.workloads.loss_search import LossSearch, LossSearchParams
    def eta(**kw: object) -> float:
        return LossSearch.expected_seconds(LossSearchParams(**kw), 1.0, 0.0)  # type: ignore[arg-type]
    fine, coarse = eta(resolution_pct=0.01), eta(resolution_pct=1.0)
    assert coarse < fine
    # one size, MLRsearch only, 1% width, no latency trials: 1 max-rate trial + 8 + 4 trials of
    # 1 s (+1 s start/stop each) and the probe. Measured on this host: 7-17 trials per search.
    assert eta(method="mlrsearch", sizes=("imix",), resolution_pct=1.0,
               latency_at_pct=()) == 2 * (1 + 8 + 4) + 1.5
    assert eta(method="both") > eta(method="rfc2544") > 0


def test_a_search_stopped_by_the_sender_is_a_lower_bound() -> None:
    """Lossless link, sender that tops out at 60% of the max it was given (as over SRv6 here,
    where the encapsulation runs in the sender's context): both searches end near 3000 pps,
    far below the max, yet nothing was lost: the figure is the sender's limit, a lower bound.
    A link that loses packets below the sender's limit gives a real threshold."""
    searches = [rfc2544_search(link(1e6, sender_max=3000), 5000, threshold=0.001,
                               resolution_pps=10, duration=1.0, min_pps=100),
                mlr_search(link(1e6, sender_max=3000), 5000, goals={"ndr": 0.0},
                           relative_width=0.005, duration=1.0, min_pps=100)["ndr"]]
    for res in searches:
        assert res.rate_pps is not None and 2900 <= res.rate_pps <= 3000 / 0.98
        assert not res.at_upper_bound and res.sender_bound and res.lower_bound
    lossy = [rfc2544_search(link(2000, sender_max=3000), 5000, threshold=0.001,
                            resolution_pps=10, duration=1.0, min_pps=100),
             mlr_search(link(2000, sender_max=3000), 5000, goals={"ndr": 0.0},
                        relative_width=0.005, duration=1.0, min_pps=100)["ndr"]]
    for res in lossy:
        assert res.rate_pps is not None and res.rate_pps <= 2000
        assert not res.sender_bound and not res.lower_bound


def test_a_late_but_complete_trial_fails_in_both_searches() -> None:
    """A sender that sends every packet of the schedule but takes 5% longer offered 5% less
    than intended: RFC 2544 fails the trial (sender-limited), and MLRsearch counts the
    shortfall as bad packets, so both put the rate below where the sender runs late."""
    def late_above(limit: float):
        def measure(rate: float, duration: float) -> FakeTrial:
            late = rate > limit
            return FakeTrial(rate, int(rate * duration), 0, 0.0, late,
                             duration * (1.05 if late else 1.0))
        return measure
    r = rfc2544_search(late_above(3000), 5000, threshold=0.0, resolution_pps=10, duration=1.0,
                       min_pps=100)
    m = mlr_search(late_above(3000), 5000, goals={"ndr": 0.0}, relative_width=0.005,
                   duration=1.0, min_pps=100)["ndr"]
    for res in (r, m):
        assert res.rate_pps is not None and 2950 <= res.rate_pps <= 3000, res.rate_pps
        assert res.sender_bound
