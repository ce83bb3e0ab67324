"""The sequential stopping rule (sequential.py) on synthetic per-round data with known answers:
methods far apart stop at the minimum, an equivalent pair stops as "equivalent", a noisy close
pair runs to the budget and is reported undecided with the rounds it needs. The simulated
campaign below is the runner's loop without the measurements: after each round it ranks,
asks `next_step`, and measures the next round only for what it keeps (native with them)."""

from __future__ import annotations

import math
import random

import pytest

from tunbench import plan, sequential, spec
from tunbench.errors import SpecError
from tunbench.report import decide

SCEN = ("stream", 1500, "default")

# a method's value in round r: its true share of native x native's value, with noise
Truth = dict[str, tuple[float, float]]   # label -> (share of native, CV of its ratio)


def simulate(truth: Truth, *, seed: int = 1, case_s: float = 10.0,
             max_rounds: int = sequential.DEFAULT_MAX_ROUNDS,
             budget_s: float = sequential.DEFAULT_BUDGET_S,
             min_rounds: int = sequential.MIN_ROUNDS,
             ) -> tuple[sequential.Step, list[sequential.Ranking], dict[str, int]]:
    """Run the rule on synthetic rounds; returns the final step, rankings and how many
    rounds each method (and native) was measured in."""
    rng = random.Random(seed)
    native: dict[int, float] = {}
    methods: dict[str, dict[int, float]] = {k: {} for k in truth}
    measured = {k: 0 for k in [*truth, "native"]}
    keep: frozenset[sequential.Key] | None = None
    spent, rnd = 0.0, 0
    while True:
        rnd += 1
        host = 1000.0 * rng.uniform(0.8, 1.2)   # the host drifts: both sides alike
        kept = [k for k in ["native", *truth] if keep is None or (k, SCEN) in keep]
        for k in kept:
            measured[k] += 1
            spent += case_s
            if k == "native":
                native[rnd] = host * math.exp(rng.gauss(0, 0.01))
            else:
                share, cv = truth[k]
                methods[k][rnd] = host * share * math.exp(rng.gauss(0, cv))
        ranking = sequential.rank(sequential.Series(SCEN, "throughput", True, native, methods))
        durations = {(k, SCEN): case_s for k in ["native", *truth]}
        step = sequential.next_step([ranking], rnd, spent, durations, min_rounds=min_rounds,
                                    max_rounds=max_rounds, budget_s=budget_s)
        if step.stop is not None:
            return step, [ranking], measured
        keep = step.keep   # None: every case (before the minimum)
        assert keep is None or ("native", SCEN) in keep   # native always alongside


def verdicts(r: sequential.Ranking) -> dict[frozenset[str], str]:
    return {frozenset((d.a, d.b)): d.verdict for d in r.decisions}


def test_far_apart_stops_at_the_minimum() -> None:
    step, (r,), measured = simulate({"vxlan": (0.45, 0.005), "wireguard": (0.02, 0.005)})
    assert step.stop == sequential.SETTLED
    assert step.rounds == sequential.MIN_ROUNDS
    assert r.order == ("native", "vxlan", "wireguard")
    assert set(verdicts(r).values()) == {decide.DIFFERENT}
    assert set(measured.values()) == {sequential.MIN_ROUNDS}
    assert sequential.unsettled([r]) == []


def test_equivalent_pair_stops_as_equivalent_and_only_it_goes_on() -> None:
    truth = {"vxlan": (0.80, 0.02), "geneve": (0.80, 0.02), "wireguard": (0.02, 0.02)}
    step, (r,), measured = simulate(truth, seed=3)
    assert step.stop == sequential.SETTLED
    v = verdicts(r)
    assert v[frozenset(("vxlan", "geneve"))] == decide.EQUIVALENT
    assert step.rounds > sequential.MIN_ROUNDS   # it took more than the minimum to show
    # the far one stopped at the minimum while the pair around it went on
    assert measured["wireguard"] == sequential.MIN_ROUNDS
    assert measured["vxlan"] == measured["geneve"] == measured["native"] == step.rounds


def test_noisy_close_pair_out_of_reach_stops_and_says_what_it_needs() -> None:
    """Two methods 2 points apart with a 10 % CV cannot be told apart in the 10 rounds a
    300 s budget buys: from the third round the pair is out of reach, the campaign stops
    there instead of spending the budget, and names the rounds the pair would need. (Both
    are far below native, so nothing else is open: at 90 and 88 % of native, native against
    the 88 % one would be a far pair worth the rounds, Ranking.far.)"""
    truth = {"vxlan": (0.60, 0.10), "ebpf-vxlan": (0.58, 0.10)}
    step, (r,), measured = simulate(truth, seed=5, case_s=10.0, budget_s=300.0)
    assert step.stop == sequential.OUT_OF_REACH
    assert step.rounds == sequential.REACH_FROM
    open_ = sequential.unsettled([r], step)
    pair = next(p for p in open_ if {p["a"], p["b"]} == {"vxlan", "ebpf-vxlan"})
    assert pair["decision"] == decide.UNDECIDED and pair["n"] == step.rounds
    # more rounds than what is left buys: (300 s - spent) / 30 s a round of the pair
    spent = 10.0 * sum(measured.values())
    assert isinstance(pair["rounds_needed"], int)
    assert pair["rounds_needed"] > (300.0 - spent) // 30.0
    assert pair["out_of_reach"] is True
    text = sequential.pair_text(pair)
    assert "undecided" in text and f"about {pair['rounds_needed']} more round" in text
    assert text.endswith(f"out of reach of the budget after round {step.rounds}")
    assert "need more rounds than the budget" in sequential.STOPPED[step.stop]


def test_a_pair_in_reach_runs_until_the_budget_is_spent() -> None:
    """A pair 10 points apart, CV 10 %: in reach of a 150 s budget (5 rounds of 3 cases),
    so rounds go on until it is decided or nothing fits; the budget is never overrun."""
    truth = {"vxlan": (0.90, 0.10), "srv6": (0.80, 0.10)}
    step, (r,), measured = simulate(truth, seed=2, case_s=10.0, budget_s=150.0)
    spent = 10.0 * sum(measured.values())
    assert spent <= 150.0
    if step.stop == sequential.BUDGET:
        assert spent + step.estimate_s > 150.0
    else:
        assert step.stop in (sequential.SETTLED, sequential.OUT_OF_REACH), step.stop
    assert step.rounds > sequential.MIN_ROUNDS


def test_max_rounds_stops_before_the_budget() -> None:
    truth = {"vxlan": (0.90, 0.10), "ebpf-vxlan": (0.89, 0.10)}
    step, _, measured = simulate(truth, seed=7, max_rounds=3, budget_s=1e6)
    assert (step.stop, step.rounds) == (sequential.MAX_ROUNDS, 3)
    assert measured["native"] == 3


def test_rank_orders_lower_is_better_and_leaves_out_methods_without_native() -> None:
    nat = {1: 100.0, 2: 102.0, 3: 98.0}
    s = sequential.Series(SCEN, "tcp_rtt_p50", False, nat,
                          {"wg": {1: 300.0, 2: 305.0, 3: 296.0},
                           "vxlan": {1: 120.0, 2: 121.0, 3: 119.0},
                           "lost": {9: 50.0}})
    r = sequential.rank(s)
    assert r.order == ("native", "vxlan", "wg")
    assert [(d.a, d.b) for d in r.decisions] == [("native", "vxlan"), ("vxlan", "wg")]


def test_a_delay_ranks_as_its_transaction_rate() -> None:
    """Ranking round-trip times (lower is better) decides every pair exactly as ranking their
    reciprocals, transaction rates (higher is better): the same order, verdicts and margins.
    Two slow methods 1 % apart (5.40× and 5.45× native's p50) are within 3 points of native's
    rate (18.5 and 18.3 %): equivalent, not 'more than 1000 rounds'."""
    rng = random.Random(5)
    nat, slow, slower, near = {}, {}, {}, {}
    for r in range(1, 9):
        host = rng.uniform(0.9, 1.1)
        nat[r] = 30.0 * host
        near[r] = 30.0 * 1.10 * host * math.exp(rng.gauss(0, 0.01))
        slow[r] = 30.0 * 5.40 * host * math.exp(rng.gauss(0, 0.02))
        slower[r] = 30.0 * 5.45 * host * math.exp(rng.gauss(0, 0.02))
    methods = {"ssh-forward": slow, "ovs-gre": slower, "vxlan": near}
    delay = sequential.rank(sequential.Series(SCEN, "tcp_rtt_p50", False, nat, methods))
    rate = sequential.rank(sequential.Series(
        SCEN, "tcp_rr_rate", True, {r: 1 / v for r, v in nat.items()},
        {k: {r: 1 / v for r, v in m.items()} for k, m in methods.items()}))
    assert delay.order == rate.order == ("native", "vxlan", "ssh-forward", "ovs-gre")
    assert [(d.verdict, d.n) for d in delay.decisions] == \
        [(d.verdict, d.n) for d in rate.decisions]
    assert [d.margin for d in delay.decisions] == pytest.approx(
        [d.margin for d in rate.decisions])
    assert delay.close == rate.close
    assert delay.decisions[2].verdict == decide.EQUIVALENT


def test_series_from_case_documents() -> None:
    def doc(label: str, kind: str, rep: int, value: float | None, status: str = "ok",
            wl: str = "stream", t0: float = 0.0) -> dict[str, object]:
        return {"case": {"tunnel": {"label": label, "kind": kind},
                         "workload": {"name": wl, "label": wl,
                                      "headline": ["throughput", "retransmits"]},
                         "mtu": 1500, "offloads": {"name": "default"}, "repeat": rep},
                "status": status, "started": t0, "ended": t0 + 7.0,
                "metrics": {} if value is None else {
                    "throughput": {"value": value, "higher_is_better": True}}}
    docs = [doc("native", "native", 1, 1000.0), doc("vxlan", "vxlan", 1, 900.0),
            doc("native", "native", 2, 1010.0), doc("vxlan", "vxlan", 2, None, "failed"),
            doc("native via chain", "native", 2, 500.0)]
    obs = sequential.series_from_docs(docs)
    assert obs.rounds == 2 and obs.measured_s == pytest.approx(35.0)
    (s,) = obs.series
    assert (s.scenario, s.metric, s.higher_is_better) == (SCEN, "throughput", True)
    assert dict(s.native) == {1: 1000.0, 2: 1010.0}
    assert {k: dict(v) for k, v in s.methods.items()} == {
        "vxlan": {1: 900.0}, "native via chain": {2: 500.0}}
    assert obs.case_s()[("vxlan", SCEN)] == pytest.approx(7.0)


def _exp(**experiment: object) -> spec.Experiment:
    return spec.build({"experiment": dict(experiment),
                       "tunnel": [{"kind": "native"}, {"kind": "vxlan"}]})


def test_without_repeats_the_campaign_is_sequential_with_a_fixed_one_as_before() -> None:
    seq = _exp()
    assert seq.sequential and seq.planned_rounds == sequential.MIN_ROUNDS
    assert (seq.budget, seq.max_rounds) == (sequential.DEFAULT_BUDGET_S,
                                            sequential.DEFAULT_MAX_ROUNDS)
    assert seq.to_dict()["repeats"] is None and seq.to_dict()["budget"] == 900.0
    fixed = _exp(repeats=3)
    assert not fixed.sequential
    assert "budget" not in fixed.to_dict() and "max_rounds" not in fixed.to_dict()
    assert [c.case_id for c in plan.plan(fixed)] == [
        f"{i:04d}-{t}-stream-mtu1500-r{r}" for i, (r, t) in enumerate(
            (r, t) for r in (1, 2, 3) for t in ("native", "vxlan"))]
    assert len(plan.plan(seq)) == 2 * sequential.MIN_ROUNDS
    more = plan.next_round(seq, 3, 4, lambda c: c.tunnel.label == "vxlan")
    assert [(c.index, c.case_id, c.repeat) for c in more] == [
        (4, "0004-vxlan-stream-mtu1500-r3", 3)]


@pytest.mark.parametrize("given, seconds", [("15m", 900.0), ("90s", 90.0), ("1.5h", 5400.0),
                                            (600, 600.0)])
def test_budget_spans(given: object, seconds: float) -> None:
    assert _exp(budget=given, max_rounds=7).budget == seconds


@pytest.mark.parametrize("experiment, says", [
    ({"repeats": 3, "budget": "5m"}, "experiment.budget applies to the sequential design only"),
    ({"budget": "15 minutes"}, "experiment.budget must be a duration"),
    ({"budget": "5s"}, "experiment.budget must be a duration"),
    ({"max_rounds": 1}, "experiment.max_rounds must be an integer from 2"),
])
def test_bad_sequential_keys_are_one_line_each(experiment: dict[str, object],
                                               says: str) -> None:
    with pytest.raises(SpecError) as err:
        _exp(**experiment)
    assert says in err.value.message and "\n" not in err.value.message


def test_cli_budget_with_repeats_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from tunbench import cli
    code = cli.main(["run", "--repeats", "3", "--budget", "5m", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--budget applies to the sequential design only, but --repeats fixes" in err


def test_summary_lines_name_every_open_pair() -> None:
    nat = {1: 100.0, 2: 101.0}
    r = sequential.rank(sequential.Series(SCEN, "throughput", True, nat,
                                          {"a": {1: 90.0, 2: 80.0}, "b": {1: 85.0, 2: 88.0}}))
    step = sequential.Step(2, sequential.BUDGET)
    rec = sequential.record([r], step, 123.4, min_rounds=2, max_rounds=20, budget_s=120.0,
                            history=[])
    lines = sequential.summary_lines(rec)
    assert "stopped: the measurement budget is spent" in lines[0]
    assert len(lines) == 2 + len(rec["unsettled"]) and len(rec["unsettled"]) >= 1
    for p in rec["unsettled"]:
        assert isinstance(p["n"], int)
        assert p["rounds_needed"] is None or isinstance(p["rounds_needed"], int)




def two_open_pairs() -> sequential.Ranking:
    """After 4 rounds: vxlan~ebpf-vxlan about 2 points apart (close, about 6 more rounds) and
    ebpf-vxlan~srv6 perhaps 30 points apart (wide, about 2 more rounds); native~vxlan is
    settled, so vxlan, ebpf-vxlan and srv6 are one unordered run and its ends, vxlan~srv6,
    are decided directly (Ranking.far: wide, about 1 more round)."""
    rounds = (1, 2, 3, 4)
    vx = dict(zip(rounds, (900.0, 920.0, 880.0, 910.0), strict=True))
    d = dict(zip(rounds, (0.0, 0.04, 0.01, 0.03), strict=True))
    return sequential.rank(sequential.Series(
        SCEN, "throughput", True, {r: 1000.0 for r in rounds},
        {"vxlan": vx, "ebpf-vxlan": {r: vx[r] * math.exp(-d[r]) for r in rounds},
         "srv6": dict(zip(rounds, (600.0, 750.0, 500.0, 700.0), strict=True))}))


def test_a_tight_budget_goes_to_the_pair_it_can_settle() -> None:
    """Three open pairs after 4 rounds: vxlan~ebpf-vxlan about 2 points apart and shown
    within the 10-point resolution (close; about 6 more rounds), ebpf-vxlan~srv6 perhaps 30
    points apart (wide; about 2 more rounds) and the run's ends vxlan~srv6 (wide; 1 more).
    With room for every open method, the round holds all of them. With 65 s left (10 s a
    case: 2 rounds of a pair) the close pair is out of reach and the round keeps the wide
    pairs' methods with native; with 35 s left only the far pair's (1 round of it fits).
    With 25 s left nothing fits: the budget stops it. The close pair is reported with its
    resolution."""
    r = two_open_pairs()
    pairs = {frozenset((x.a, x.b)): (x.verdict, c, x.rounds_needed)
             for x, c in zip(r.decisions, r.close, strict=True)}
    assert pairs[frozenset(("vxlan", "ebpf-vxlan"))] == (decide.UNDECIDED, True, 6)
    assert pairs[frozenset(("ebpf-vxlan", "srv6"))] == (decide.UNDECIDED, False, 2)
    assert [(x.a, x.b, x.verdict, x.rounds_needed) for x in r.far] == [
        ("vxlan", "srv6", decide.UNDECIDED, 1)]
    durations = {(k, SCEN): 10.0 for k in ("native", "vxlan", "ebpf-vxlan", "srv6")}
    roomy = sequential.next_step([r], 4, 100.0, durations, budget_s=1000.0)
    assert roomy.keep == {(k, SCEN) for k in ("native", "vxlan", "ebpf-vxlan", "srv6")}
    tight = sequential.next_step([r], 4, 100.0, durations, budget_s=165.0)
    assert tight.stop is None and tight.estimate_s == 40.0
    assert tight.keep == {(k, SCEN) for k in ("native", "vxlan", "ebpf-vxlan", "srv6")}
    assert tight.out_of_reach == (("vxlan", "ebpf-vxlan", SCEN),)
    tighter = sequential.next_step([r], 4, 100.0, durations, budget_s=135.0)
    assert tighter.stop is None and tighter.estimate_s == 30.0
    assert tighter.keep == {(k, SCEN) for k in ("native", "vxlan", "srv6")}
    assert sequential.next_step([r], 4, 100.0, durations, budget_s=125.0).stop == \
        sequential.BUDGET
    close = next(p for p in sequential.unsettled([r]) if p["close"])
    assert {close["a"], close["b"]} == {"vxlan", "ebpf-vxlan"}
    assert sequential.pair_text(close).endswith("within 10 points of each other")


def test_wide_pairs_come_first_then_the_nearest_to_a_decision() -> None:
    """The order in which open pairs claim the round (`candidates`)."""
    r = two_open_pairs()
    durations = {(k, SCEN): 10.0 for k in ("native", "vxlan", "ebpf-vxlan", "srv6")}
    cands = sequential.candidates([r], durations, left_s=1000.0, rounds_left=16)
    assert [(c.close, c.need, c.reachable) for c in cands] == [(False, 1, True),
                                                              (False, 2, True),
                                                              (True, 6, True)]
    # 2 rounds left before --max-rounds: the close pair (6 more) is out of reach, last
    cands = sequential.candidates([r], durations, left_s=1000.0, rounds_left=2)
    assert [(c.need, c.reachable) for c in cands] == [(1, True), (2, True), (6, False)]


def test_points_apart_is_the_distance_of_the_two_shares() -> None:
    """An open pair carries its estimated distance in points of native: with both methods
    measured in the same rounds, exactly |A - B| × 100 for A and B the geometric-mean shares
    (the inverse of decide.log_margin at the pair's level), whichever is ranked first."""
    rounds = (1, 2, 3, 4)
    nat = dict(zip(rounds, (1000.0, 1040.0, 960.0, 1010.0), strict=True))
    a = dict(zip(rounds, (900.0, 950.0, 860.0, 905.0), strict=True))
    b = dict(zip(rounds, (880.0, 900.0, 850.0, 900.0), strict=True))
    rk = sequential.rank(sequential.Series(SCEN, "throughput", True, nat, {"a": a, "b": b}))
    d = next(x for x in rk.decisions if {x.a, x.b} == {"a", "b"})

    def gshare(vals: dict[int, float]) -> float:
        return math.exp(sum(math.log(vals[r] / nat[r]) for r in rounds) / len(rounds))

    assert sequential.points_apart(d) == pytest.approx(100 * abs(gshare(a) - gshare(b)),
                                                       abs=0.01)
    # a delay: the points are on native's share of it, as the margin is
    lat_nat = {r: 100.0 for r in rounds}
    slow = dict(zip(rounds, (125.0, 126.0, 124.0, 125.0), strict=True))
    slower = dict(zip(rounds, (250.0, 240.0, 260.0, 250.0), strict=True))
    rk2 = sequential.rank(sequential.Series(SCEN, "tcp_rtt_p50", False, lat_nat,
                                            {"slow": slow, "slower": slower}))
    d2 = next(x for x in rk2.decisions if {x.a, x.b} == {"slow", "slower"})
    inv = {k: math.exp(-sum(math.log(v[r] / 100.0) for r in rounds) / 4)
           for k, v in (("slow", slow), ("slower", slower))}
    assert sequential.points_apart(d2) == pytest.approx(100 * (inv["slow"] - inv["slower"]),
                                                        abs=0.01)
    untested = sequential.rank(sequential.Series(SCEN, "throughput", True, {1: 1000.0},
                                                 {"a": {1: 900.0}}))
    assert sequential.points_apart(untested.decisions[0]) is None


def test_the_open_pairs_line_says_whether_a_far_pair_is_left() -> None:
    """The console and the report say whether what is left open is only close pairs (the
    campaign's question answered) or pairs far apart (more rounds would decide them); each
    unsettled line carries its own estimate."""
    r = two_open_pairs()   # vxlan~ebpf-vxlan about 2 points apart, ebpf-vxlan~srv6 about 30
    open_ = sequential.unsettled([r])
    near = next(p for p in open_ if {p["a"], p["b"]} == {"vxlan", "ebpf-vxlan"})
    far = next(p for p in open_ if {p["a"], p["b"]} == {"ebpf-vxlan", "srv6"})
    ends = next(p for p in open_ if {p["a"], p["b"]} == {"vxlan", "srv6"})   # Ranking.far
    assert 0 < near["apart"] < 10 < far["apart"] < ends["apart"]
    line = sequential.apart_line(open_)
    assert line.startswith(f"open pairs: 3 (estimated {near['apart']:.1f}-"
                           f"{ends['apart']:.1f} points of native apart)")
    assert line.endswith("2 of them more than 10 points apart, not yet decided: more rounds "
                         "(--budget, --max-rounds) would decide them")
    assert sequential.apart_line([near]).endswith(
        "every pair estimated more than 10 points apart is settled")
    assert f"estimated {near['apart']:.1f} points apart, about " in sequential.pair_text(near)
    rec = sequential.record([r], sequential.Step(4, sequential.BUDGET), 100.0, min_rounds=2,
                            max_rounds=20, budget_s=120.0, history=[])
    assert [(p["a"], p["b"]) for p in rec["rankings"][0]["far_pairs"]] == [("vxlan", "srv6")]
    lines = sequential.summary_lines(rec)
    assert lines[1] == line and len(lines) == 2 + len(open_)


def test_the_far_pairs_left_open_are_priced_in_rounds_seconds_and_flags() -> None:
    """When pairs more than the resolution apart are left open, the line says what would
    settle them at the pace measured: the most rounds one of them needs, what a round of
    their cases costs (their mean durations so far), and the --budget that holds that (and
    --max-rounds when the campaign's maximum would stop first)."""
    r = two_open_pairs()   # vxlan~ebpf-vxlan about 2 points apart; ebpf-vxlan~srv6, vxlan~srv6 far
    far = [d for d in r.open if sequential.points_apart(d) > 10]
    assert {frozenset((d.a, d.b)) for d in far} == {frozenset(("ebpf-vxlan", "srv6")),
                                                   frozenset(("vxlan", "srv6"))}
    case_s = {("native", SCEN): 15.0, ("vxlan", SCEN): 5.0, ("ebpf-vxlan", SCEN): 6.0,
              ("srv6", SCEN): 7.0, ("wireguard", SCEN): 100.0}   # wireguard: in no open pair
    got = sequential.to_settle([r], case_s, 4, 300.0)
    need = max(d.rounds_needed for d in far)
    assert got == {"rounds": need, "cases": 4, "round_s": 33.0,
                   "budget_s": round(300.0 + need * 33.0, 1), "max_rounds": 4 + need}
    line = sequential.apart_line(sequential.unsettled([r]), settle=got, max_rounds=20)
    minutes = need * 33.0 / 60
    assert line.endswith(
        f"2 of them more than 10 points apart, not yet decided: at the pace measured they need "
        f"about {need} more round{'s' if need != 1 else ''} at 33 s a round (about "
        f"{minutes:.1f} min more): --budget {math.ceil((300 + need * 33) / 60)}m would likely "
        "decide them")
    # a maximum of rounds that would stop first is named too
    assert f"m --max-rounds {4 + need} would" in sequential.settle_text(got, max_rounds=4)
    # beyond HINT_MAX_ROUNDS, no budget is named: a campaign is not the way
    slow = {**got, "rounds": sequential.HINT_MAX_ROUNDS + 1}
    assert sequential.settle_text(slow).startswith(
        f"at the pace measured they need more than {sequential.HINT_MAX_ROUNDS} more rounds")
    # nothing to price: no durations, or no far pair open
    assert sequential.to_settle([r], {}, 4, 300.0) is None
    assert sequential.settle_text(None) == ("more rounds (--budget, --max-rounds) would "
                                            "decide them")
    settled = sequential.rank(sequential.Series(SCEN, "throughput", True, {1: 1000.0, 2: 990.0},
                                                {"x": {1: 20.0, 2: 21.0}}))
    assert sequential.to_settle([settled], case_s, 2, 50.0) is None
    # recorded in index.json's section, and the summary line carries it
    rec = sequential.record([r], sequential.Step(4, sequential.BUDGET), 300.0, min_rounds=2,
                            max_rounds=20, budget_s=360.0, history=[], case_s=case_s)
    assert rec["to_settle"] == got and sequential.summary_lines(rec)[1] == line


def test_close_open_pairs_in_a_chain_leave_a_far_pair_that_is_decided_directly() -> None:
    """Three open neighbour pairs, each about 6 points apart, join methods 18 points apart:
    no neighbour pair is far, but native~c is, and nothing orders it. The ranking decides it
    directly (Ranking.far), so it is open until decided and the rule measures for it; when
    the rounds tell it, it is settled while the close pairs stay open. A 'different' pair in
    the middle splits the run: no far pair is left."""
    rounds = tuple(range(1, 5))
    wob = dict(zip(rounds, (0.0, 0.08, -0.07, 0.05), strict=True))
    noisy = (-0.06, 0.07, 0.03, -0.05)

    def method(level: float, k: int, rs: tuple[int, ...] = rounds) -> dict[int, float]:
        return {r: 1000.0 * level * math.exp(wob[(r - 1) % 4 + 1] * (k % 2)
                                             + noisy[(r + k) % 4]) for r in rs}

    nat = {r: 1000.0 for r in rounds}
    meths = {"a": method(0.94, 0), "b": method(0.88, 1), "c": method(0.82, 2)}
    rk = sequential.rank(sequential.Series(SCEN, "throughput", True, nat, meths))
    assert rk.order == ("native", "a", "b", "c")
    assert all(d.verdict == decide.UNDECIDED for d in rk.decisions)
    assert all(sequential.points_apart(d) < 10 for d in rk.decisions)   # neighbours: close
    # the run's pairs more than 10 points apart, each decided directly and open for now
    assert {(d.a, d.b) for d in rk.far} == {("native", "b"), ("native", "c"), ("a", "c")}
    assert all(sequential.points_apart(d) > 10 and d in rk.open for d in rk.far)
    assert ("c", SCEN) in sequential.next_round([rk])
    line = sequential.apart_line(sequential.unsettled([rk]))
    assert line.endswith("3 of them more than 10 points apart, not yet decided: more rounds "
                         "(--budget, --max-rounds) would decide them")
    # twelve rounds of the same spread: native~a is told, which splits the run; a~c, the
    # far pair left in it, is told too; only the close pairs a~b and b~c stay open
    more = tuple(range(1, 13))
    nat12 = {r: 1000.0 for r in more}
    long = {"a": method(0.94, 0, more), "b": method(0.88, 1, more), "c": method(0.82, 2, more)}
    rk12 = sequential.rank(sequential.Series(SCEN, "throughput", True, nat12, long))
    assert [(d.a, d.b, d.verdict) for d in rk12.far] == [("a", "c", decide.DIFFERENT)]
    assert {(d.a, d.b) for d in rk12.open} == {("a", "b"), ("b", "c")}
    assert sequential.apart_line(sequential.unsettled([rk12])).endswith(
        "every pair estimated more than 10 points apart is settled")
    # settled in the middle (b far below a in every round): two runs, each close
    split = dict(meths, b=method(0.50, 1), c=method(0.47, 2))
    rk2 = sequential.rank(sequential.Series(SCEN, "throughput", True, nat, split))
    assert [d.verdict for d in rk2.decisions][1] == decide.DIFFERENT
    assert rk2.far == ()


def test_unordered_pairs_are_the_non_neighbours_inside_a_run() -> None:
    """Positions 0..4 with neighbour decisions open, different, open, open: runs {0, 1} and
    {2, 3, 4}; the only non-neighbour pair inside a run is (2, 4)."""
    def dec(verdict: str) -> decide.Decision:
        return decide.Decision("x", "y", verdict, 3, 0.0, 0.1, None, None, None, None, None,
                               0.03, None)
    ds = [dec(decide.UNDECIDED), dec(decide.DIFFERENT), dec(decide.UNDECIDED),
          dec(decide.EQUIVALENT)]
    assert sequential.unordered_pairs(ds) == [(2, 4)]
    assert sequential.unordered_pairs([dec(decide.UNDECIDED)] * 3) == [(0, 2), (0, 3), (1, 3)]
    assert sequential.unordered_pairs([dec(decide.DIFFERENT)] * 3) == []


def test_progress_names_neighbour_pairs_first_and_counts_the_far_ones() -> None:
    r = two_open_pairs()   # two open neighbour pairs and the far pair vxlan~srv6
    text = sequential.open_text([r])
    assert text.startswith("3 pair(s) open (1 far, inside unordered runs): ")
    assert text.endswith(", vxlan~srv6 (stream)")
