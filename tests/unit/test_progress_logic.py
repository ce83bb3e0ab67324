"""The campaign estimate and the phase events (pure logic; times given explicitly), the
loss-search trial count, and the plain-line reporter driven through a campaign's calls."""

from __future__ import annotations

import io
import math
import re

import pytest
from rich.console import Console

from tunbench import spec
from tunbench.plan import plan
from tunbench.progress import (
    DEFAULT_OVERHEAD_S,
    CasePlan,
    Estimate,
    PhaseEvent,
    clock,
    moved_much,
    rate_text,
)
from tunbench.report.live import ProgressReporter, span
from tunbench.workloads.loss_search import LossSearchParams, TrialCount, expected_trials


def test_phase_label_site_host_warmup_and_trial() -> None:
    ev = PhaseEvent("measuring", "iperf3, 1 TCP stream", warmup_s=2.0, at=100.0)
    assert ev.label(now=101.0) == "warm-up: iperf3, 1 TCP stream"
    assert ev.label(now=102.5) == "measuring: iperf3, 1 TCP stream"
    assert PhaseEvent("server start", "iperf3", site="b").label() == \
        "server start: iperf3 on site b"
    assert PhaseEvent("server start", "iperf3", site="b", host="lab-2").label() == \
        "server start: iperf3 on site b (lab-2)"
    t = PhaseEvent("trial", "rfc2544, 361 B, " + rate_text(12000, 361), trial=3,
                   trials_about=25)
    assert t.label() == "trial 3 of about 25: rfc2544, 361 B, 12,000 pps (34.7 Mbit/s)"
    assert rate_text(None) == "the generator's top rate (unpaced)"
    assert [PhaseEvent(n).stage for n in ("bring-up", "trial", "teardown")] == \
        ["setup", "workload", "teardown"]


def test_clock_and_span() -> None:
    assert [clock(x) for x in (0, 7.4, 59.6, 750, 3723)] == \
        ["0:00", "0:07", "1:00", "12:30", "1:02:03"]
    assert [span(x) for x in (45, 90, 600, 7200)] == ["45 s", "1.5 min", "10.0 min", "2.0 h"]


def run_case(est: Estimate, i: int, t: float, bring_up: float, work: float,
             teardown: float) -> float:
    """Feed the estimate one case's events at the given times; returns the end time."""
    est.case_start(i, now=t)
    est.phase(PhaseEvent("bring-up", at=t))
    est.phase(PhaseEvent("measuring", at=t + bring_up))
    est.phase(PhaseEvent("teardown", at=t + bring_up + work))
    end = t + bring_up + work + teardown
    est.case_end(i, now=end)
    return end


def test_estimate_learns_bring_up_per_kind_and_workload_ratio() -> None:
    plans = [CasePlan("native", "stream", 10.0), CasePlan("ipsec", "stream", 10.0),
             CasePlan("native", "stream", 10.0), CasePlan("ipsec", "stream", 10.0)]
    est = Estimate(plans, now=0.0)
    assert est.remaining(now=0.0) == pytest.approx(4 * (10 + DEFAULT_OVERHEAD_S))
    t = run_case(est, 0, 0.0, bring_up=1.0, work=12.0, teardown=0.5)   # 1.2x its 10 s
    # every later stream case takes 1.2x, and unseen kinds are charged native's overhead
    assert est.ratio("stream") == pytest.approx(1.2)
    assert est.overhead_s("ipsec") == pytest.approx(1.5)
    assert est.remaining(now=t) == pytest.approx(3 * (12 + 1.5))
    t = run_case(est, 1, t, bring_up=8.0, work=12.0, teardown=2.0)     # ipsec: slow bring-up
    assert est.overhead_s("ipsec") == pytest.approx(10.0)
    assert est.overhead_s("native") == pytest.approx(1.5)
    assert est.remaining(now=t) == pytest.approx((12 + 1.5) + (12 + 10))
    assert est.learned() == "ipsec bring-up 8.0 s, native bring-up 1.0 s, stream runs 1.2x " \
        "its expected time"


def test_running_case_uses_what_the_workload_says() -> None:
    est = Estimate([CasePlan("native", "loss-search", 40.0), CasePlan("native", "ping", 5.0)],
                   now=0.0)
    est.case_start(0, now=0.0)
    est.phase(PhaseEvent("bring-up", at=0.0))
    assert est.case_left(now=1.0) == pytest.approx(40 + DEFAULT_OVERHEAD_S - 1)
    # trial 10 of about 12, 2 s each: 3 trials (6 s) to go, plus the teardown
    est.phase(PhaseEvent("trial", trial=10, trials_about=12, expected_s=2.0,
                         remaining_s=6.0, at=30.0))
    teardown = DEFAULT_OVERHEAD_S / 2      # nothing measured yet: half the default guess
    assert est.case_left(now=31.0) == pytest.approx(5.0 + teardown)
    # a phase that says nothing of the rest: the workload's expectation, less its time so far
    est.phase(PhaseEvent("capture probe", expected_s=1.0, at=32.0))
    assert est.case_left(now=32.0) == pytest.approx(40 - 2.0 + teardown)
    assert est.remaining(now=32.0) == pytest.approx(38 + teardown + 5 + DEFAULT_OVERHEAD_S)


def test_failed_bring_up_teaches_nothing() -> None:
    est = Estimate([CasePlan("vxlan", "stream", 10.0)], now=0.0)
    est.case_start(0, now=0.0)
    est.phase(PhaseEvent("bring-up", at=0.0))
    est.phase(PhaseEvent("teardown", at=3.0))
    est.case_end(0, now=4.0)
    assert est.overhead == {} and est.ratio("stream") == 1.0 and est.remaining(now=4) == 0


def test_moved_much_needs_both_20pct_and_30s() -> None:
    assert moved_much(200, 100) and moved_much(60, 120)
    assert not moved_much(125, 100)      # +25 %, but 25 s
    assert not moved_much(1100, 1000)    # 100 s, but 10 %


def test_trial_count_follows_the_trials_sizes_took() -> None:
    p = LossSearchParams(method="rfc2544", sizes=("361", "imix"), resolution_pct=1,
                         latency_at_pct=(50,))
    per = expected_trials(p)
    assert per == 1 + 1 + (1 + math.ceil(math.log2(100)))       # max, latency, bisection
    c = TrialCount(2, per)
    assert c.about == 2 * per
    for _ in range(3):                 # a search that passed at once: 3 trials
        c.next()
    c.size_done()
    assert c.about == 3 + 3            # the next size is expected to take as many
    for _ in range(5):                 # ... it takes more: "about" never falls below k
        c.next()
    assert c.done == 8 and c.about == 8
    c = TrialCount(1, 10)
    assert c.trial_s(3.0) == 3.0                       # a guess until trials were timed
    for k in range(5):
        c.next(now=100.0 + 1.5 * k)
    assert c.trial_s(3.0, now=106.0) == pytest.approx(1.5)
    assert c.left_s(3.0, now=106.0) == pytest.approx(5 * 1.5)


def campaign_lines() -> list[str]:
    exp = spec.build({"experiment": {"repeats": 1, "duration": 2, "warmup": 0},
                      "tunnel": [{"kind": "native"}], "workload": [{"name": "stream"}]},
                     "test")
    cases = plan(exp)
    buf = io.StringIO()
    rep = ProgressReporter(console=Console(file=buf, force_terminal=False))
    plans = [CasePlan("native", "stream", 3.0)]
    rep.campaign_start(cases, plans)
    rep.case_start(cases[0])
    rep.phase(PhaseEvent("bring-up", "testbed and native tunnel"))
    rep.phase(PhaseEvent("measuring", "iperf3", expected_s=2.0))
    # the case turns out to take minutes longer than estimated: the estimate is reprinted
    rep.phase(PhaseEvent("measuring", "iperf3", expected_s=300.0, remaining_s=300.0))
    rep.phase(PhaseEvent("teardown"))
    rep.case_end(cases[0], {"status": "failed", "error": "example failure",
                            "case": {"workload": {"name": "stream"}}, "metrics": {}})
    rep.campaign_end(None)  # type: ignore[arg-type]
    return buf.getvalue().splitlines()


def test_reporter_plain_lines_and_reprinted_estimate() -> None:
    lines = campaign_lines()
    assert not any("\x1b" in line for line in lines)
    assert re.fullmatch(r"tunbench: 1 case\(s\), about \d s \(estimated; refined as cases "
                        r"run\)", lines[0])
    # the clock is the real one: a stalled host may let a second or two pass between lines
    assert re.search(r": measuring: iperf3; case 0:0\d, about 0:0\d", lines[3])
    assert re.match(r"tunbench: \[1/1\] 0000-native-stream-mtu1500-r1: measuring: "
                    r"iperf3; case 0:0\d, about (5:0\d|4:5\d)", lines[4])
    assert lines[5].startswith("tunbench: estimate now about 5.0 min in all, was ")
    # (no time passed here, so the teardown brings the whole estimate back down: said again)
    assert re.fullmatch(r"tunbench: estimate now about \d+ s in all, was 5\.0 min", lines[7])
    assert lines[-1] == "[1/1] 0000-native-stream-mtu1500-r1: failed - example failure"
    assert len(lines) == 9


def test_quiet_reporter_prints_nothing() -> None:
    buf = io.StringIO()
    rep = ProgressReporter(quiet=True, console=Console(file=buf, force_terminal=False))
    exp = spec.build({"experiment": {"repeats": 1}, "tunnel": [{"kind": "native"}],
                      "workload": [{"name": "ping"}]}, "test")
    cases = plan(exp)
    rep.campaign_start(cases, [CasePlan("native", "ping", 3.0)])
    rep.case_start(cases[0])
    rep.phase(PhaseEvent("bring-up"))
    rep.case_end(cases[0], {"status": "ok", "error": None,
                            "case": {"workload": {"name": "ping"}}, "metrics": {}})
    rep.close()
    assert buf.getvalue() == ""


def test_reporter_says_each_round_and_its_open_pairs() -> None:
    """A sequential campaign: after a round, which pairs are open; an added round joins the
    count and the estimate; the live display shows the round and the open pairs."""
    from tunbench.plan import next_round
    exp = spec.build({"experiment": {"duration": 2, "warmup": 0},
                      "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                      "workload": [{"name": "stream"}]}, "test")
    cases = plan(exp)
    buf = io.StringIO()
    rep = ProgressReporter(console=Console(file=buf, force_terminal=False))
    rep.campaign_start(cases, [CasePlan(c.tunnel.kind, "stream", 2.0) for c in cases])
    rep.round_end(2, "1 pair(s) open: native~vxlan (stream)", None)
    more = next_round(exp, 3, len(cases), lambda c: True)
    rep.round_start(3, more, [CasePlan(c.tunnel.kind, "stream", 2.0) for c in more])
    assert rep.n == 6 and rep.est is not None and len(rep.est.cases) == 6
    assert rep.pos[more[-1].case_id] == 5
    rep.case_start(more[0])
    shown = Console(file=io.StringIO(), width=200)
    shown.print(rep._compose())
    text = shown.file.getvalue()  # type: ignore[attr-defined]
    assert "round 3 [1/6] 0004-native-stream-mtu1500-r3" in text   # (no case_end here)
    assert "native~vxlan (stream)" in text
    rep.round_end(3, "all pairs settled", "settled")
    rep.close()
    lines = buf.getvalue().splitlines()
    assert "tunbench: round 2 done: 1 pair(s) open: native~vxlan (stream)" in lines
    assert "tunbench: round 3: 2 case(s) for the open pairs" in lines
    assert ("tunbench: round 3 done: all pairs settled; stopping: every neighbouring pair of "
            "every ranking settled") in lines
