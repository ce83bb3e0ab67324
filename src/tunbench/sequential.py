"""Sequential measurement until decided: after each round, which methods still need one.

A campaign without a fixed `--repeats` runs MIN_ROUNDS rounds of every case, then keeps
adding rounds only for the methods whose place in a ranking is not yet settled, and stops
when every neighbouring pair of every ranking is settled, or when the budget is spent
(`--budget`, wall time of measurement; `--max-rounds`). docs/methodology.md, "Sequential
design".

One ranking per scenario (workload label x underlay MTU x offload variant; on a mesh also
x pair of sites, so each pair is ranked against its own native), by the
workload's headline figure: the first metric of the workload's declared `headline` that the
scenario recorded (throughput for stream, tcp_rtt_p50 for latency, ...; the one the report
judges a workload by, report/data.headline_metric). Each method's figure is taken round by
round against native measured in the same round, on the log scale (ln(method_r /
native_r); native itself is 0 every round and takes its place in the ranking), ordered by
its mean (best first), and each neighbouring pair is decided by report/decide.decide: the
paired log difference, Holm over the ranking's pairs, each look at ALPHA_PER_LOOK;
*different*, *equivalent* (TOST within ±3 points of native), else open, with the rounds it
still needs.

Pure functions over numbers (`rank`, `next_step`) and over case documents
(`series_from_docs`); the runner feeds them and runs what they keep.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .results.model import (
    VIA_CHAIN,
    by_best_second,
    log_share,
    own_share,
    paired_value,
    round_reference,
    slowed_rounds,
)

if TYPE_CHECKING:   # imported where used: scipy stays out of spec validation
    from .report import decide

MIN_ROUNDS = 2               # rounds of every case before any method may stop
# The level each look holds a pair to. The rule looks after every round, and every look is
# a chance of a false decision: at the report's 5 % per look, a pair of equal methods (CV 2 %)
# ended "different" in 18 of 150 simulated campaigns; at 2 % per look, in 8 of 150 (about the
# 5 % one test promises; a Pocock-like constant boundary). Cost: a pair 10 points apart
# settles in 3.9 rounds on average instead of 3.3 (bench/bench_decide.py sim;
# docs/methodology.md, "Sequential design").
ALPHA_PER_LOOK = 0.02
# Pairs whose difference is shown to be smaller than RESOLUTION (points of native; a TOST at
# ALPHA_PER_LOOK) are "close": still open, but a round that cannot hold every open method in
# the budget keeps only the methods of the pairs that may still be further apart than that
# ("wide"). The budget goes first to what changes the practical answer.
RESOLUTION = 0.10
DEFAULT_BUDGET_S = 900.0     # 15 min of measurement
DEFAULT_MAX_ROUNDS = 20
SETTLED, BUDGET, MAX_ROUNDS = "settled", "budget", "max-rounds"
OUT_OF_REACH = "out-of-reach"
# From this many rounds on, a pair whose estimated rounds to a decision exceed what the budget
# (or --max-rounds) leaves is out of reach and gets no more rounds (`candidates`). At 2 rounds
# the estimate stands on one degree of freedom: every pair still gets its third round.
REACH_FROM = 3

# workload label, underlay MTU, offload variant; a mesh case's also its (directed) pair of
# sites, "s1-s2": each pair is ranked against its own native, and a round added for an open
# pair measures that pair only
Scenario = tuple[str, int, str] | tuple[str, int, str, str]
Key = tuple[str, Scenario]        # (tunnel label, scenario): one case of a round


@dataclass(frozen=True)
class Series:
    """One scenario's headline figure per round: native's and each method's."""
    scenario: Scenario
    metric: str
    higher_is_better: bool
    native: Mapping[int, float]
    methods: Mapping[str, Mapping[int, float]]
    # per method, by round: the share of native its case measured itself, native's bursts
    # beside its own (model.own_share); such a round pairs by it, not by `native`
    own: Mapping[str, Mapping[int, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Ranking:
    """A scenario's methods (native included) best first, and each neighbouring pair's
    decision (decisions[i]: order[i] against order[i + 1]). `far`: the decisions of the pairs
    further apart than the resolution that no "different" neighbour orders (far_pairs)."""
    scenario: Scenario
    metric: str
    order: tuple[str, ...]
    decisions: tuple[decide.Decision, ...]
    native: str = "native"
    close: tuple[bool, ...] = ()   # per pair: shown within ±RESOLUTION of each other
    far: tuple[decide.Decision, ...] = ()

    @property
    def open(self) -> list[decide.Decision]:
        from .report import decide
        return [d for d in self.decisions + self.far
                if d.verdict not in (decide.DIFFERENT, decide.EQUIVALENT)]

    @property
    def wide(self) -> list[decide.Decision]:
        """The open pairs not shown to be within the resolution of each other."""
        near = {id(d) for d, c in zip(self.decisions, self.close, strict=False) if c}
        return [d for d in self.open if id(d) not in near]

    def open_methods(self, pairs: Iterable[decide.Decision] | None = None) -> set[str]:
        """The methods of the open pairs (or of `pairs`); native is measured in every round
        anyway."""
        return {x for d in (self.open if pairs is None else pairs)
                for x in (d.a, d.b)} - {self.native}

    def to_json(self) -> dict[str, Any]:
        return {**_where(self.scenario), "metric": self.metric,
                "order": list(self.order),
                "pairs": [{**d.to_json(), "close": c} for d, c in zip(
                    self.decisions, self.close or (False,) * len(self.decisions),
                    strict=True)],
                "far_pairs": [d.to_json() for d in self.far]}


def log_ratios(values: Mapping[int, float], native: Mapping[int, float],
               own: Mapping[int, float] | None = None) -> dict[int, float]:
    """ln(value_r / native_r) for the rounds where both are positive; ln(own_r) where the
    case measured its own share of native (model.log_share)."""
    mine = own or {}
    return {r: x for r, v in values.items()
            for x in [log_share(v, native.get(r), mine.get(r))] if x is not None}


def rank(s: Series, margin: float | None = None, native: str = "native",
         alpha: float = ALPHA_PER_LOOK, resolution: float = RESOLUTION) -> Ranking:
    """The scenario's ranking by the mean log-ratio to native (best first) and its
    neighbours' decisions, Holm over them. A method with no round against native is left
    out (nothing to rank it by). `margin`: the equivalence margin (default ±3 points);
    `resolution`: the width (points of native) under which an open pair counts as close."""
    from .report import decide
    margin = decide.MARGIN if margin is None else margin
    # native's own rounds, and every round a method paired by its own share (native's bursts
    # beside it: that round needs no native case)
    logs: dict[str, dict[int, float]] = {native: {
        r: 0.0 for r in {r for r, v in s.native.items() if v > 0}
        | {r for own in s.own.values() for r in own}}}
    for label, vals in s.methods.items():
        lr = log_ratios(vals, s.native, s.own.get(label))
        if lr:
            logs[label] = lr
    if not logs[native]:
        return Ranking(s.scenario, s.metric, (), (), native)
    sign = -1.0 if s.higher_is_better else 1.0
    order = sorted(logs, key=lambda k: sign * statistics.fmean(logs[k].values()))
    hib = s.higher_is_better
    pairs = [decide.pair_of_shares(a, b, logs[a], logs[b], margin, hib)
             for a, b in zip(order, order[1:], strict=False)]
    decisions = tuple(decide.decide(pairs, alpha))
    close = tuple(decide.shown_within(d.mean, d.sd, d.n, decide.log_margin(
        resolution, decide.pair_level(logs[d.a], logs[d.b], hib)), alpha) for d in decisions)
    far = [p for p in (decide.pair_of_shares(order[i], order[j], logs[order[i]],
                                             logs[order[j]], margin, hib)
                       for i, j in unordered_pairs(decisions))
           if p.diffs and distance(statistics.fmean(p.diffs), p.margin) > 100 * resolution]
    return Ranking(s.scenario, s.metric, tuple(order), decisions, native, close,
                   tuple(decide.decide(far, alpha)) if far else ())


def unordered_pairs(decisions: Sequence[decide.Decision]) -> list[tuple[int, int]]:
    """The pairs (i, j) of a ranking's positions, not neighbours, that its neighbours leave
    unordered: neighbours joined by any decision but "different" form a run, and within a
    run close pairs in a row can join methods far apart (three open pairs 6 points apart
    each: the first and the last 18 points apart, ordered by nothing). `rank` decides those
    further apart than the resolution directly (Ranking.far), Holm over them."""
    from .report import decide
    out, start = [], 0
    for k in range(len(decisions) + 1):
        if k < len(decisions) and decisions[k].verdict != decide.DIFFERENT:
            continue
        out += [(i, j) for i in range(start, k + 1) for j in range(i + 2, k + 1)]
        start = k + 1
    return out


@dataclass(frozen=True)
class Step:
    """What comes after the rounds done: stop (with why) or run `keep` as the next round."""
    rounds: int
    stop: str | None
    keep: frozenset[Key] | None = frozenset()   # None: every case of the experiment
    estimate_s: float = 0.0           # the next round's expected seconds (0 when stopping)
    # the open pairs given up as out of reach (candidates): (a, b, scenario)
    out_of_reach: tuple[tuple[str, str, Scenario], ...] = ()


def cost_s(keys: Iterable[Key], case_s: Mapping[Key, float]) -> float:
    """Seconds one round of these cases takes: each case's mean duration so far (`case_s`),
    an unseen case the mean of all."""
    mean = statistics.fmean(case_s.values()) if case_s else 0.0
    return sum(case_s.get(k, mean) for k in keys)


def pair_keys(rk: Ranking, d: decide.Decision) -> frozenset[Key]:
    """The cases a pair of `rk` is measured by in a round: its two methods and native."""
    return frozenset((m, rk.scenario) for m in {d.a, d.b, rk.native})


def next_round(rankings: Iterable[Ranking]) -> frozenset[Key]:
    """Every open pair's methods in its scenario, and native next to them in the same
    scenario, so the pairing stays per round: the round the budget could not hold."""
    keep: set[Key] = set()
    for rk in rankings:
        if rk.open:
            keep |= {(m, rk.scenario) for m in rk.open_methods() | {rk.native}}
    return frozenset(keep)


def next_step(rankings: list[Ranking], rounds: int, measured_s: float,
              case_s: Mapping[Key, float], *, min_rounds: int = MIN_ROUNDS,
              max_rounds: int = DEFAULT_MAX_ROUNDS,
              budget_s: float = DEFAULT_BUDGET_S) -> Step:
    """The stopping rule. Before `min_rounds` every case runs again; then a round is added
    only while some pair is open, fewer than `max_rounds` rounds ran, and something fits
    in what is left of `budget_s` after the measurement so far (`measured_s`; a case's
    expected seconds: its mean duration so far, `case_s`; an unseen case: the mean of all).

    What the round holds (`plan_round`): the open pairs that can still be settled in what is
    left, the wide ones (not shown within the resolution of each other) first, then those
    nearest to a decision; a pair out of reach is left out, so its rounds go to the pairs
    they can decide. When no open pair is in reach the campaign stops (OUT_OF_REACH) rather
    than spend the rest of the budget on rounds that cannot settle anything."""
    if rounds < min_rounds:
        return Step(rounds, None, None, sum(case_s.values()))
    if not any(rk.open for rk in rankings):
        return Step(rounds, SETTLED)
    if rounds >= max_rounds:
        return Step(rounds, MAX_ROUNDS)
    left_s = budget_s - measured_s
    cands = candidates(rankings, case_s, left_s, max_rounds - rounds)
    keep = plan_round(cands, case_s, left_s)
    gone = tuple((c.a, c.b, c.scenario) for c in cands if not c.reachable)
    if keep:
        return Step(rounds, None, keep, cost_s(keep, case_s), gone)
    if any(c.reachable for c in cands) or left_s < min(c.cost_s for c in cands):
        # nothing fits: the budget is spent
        return Step(rounds, BUDGET, estimate_s=cost_s(next_round(rankings), case_s),
                    out_of_reach=gone)
    return Step(rounds, OUT_OF_REACH, out_of_reach=gone)


@dataclass(frozen=True)
class Candidate:
    """An open pair as a claim on the next round: its cases (its two methods and native in
    its scenario), what one round of them costs alone, and whether it can still settle."""
    a: str
    b: str
    scenario: Scenario
    keys: frozenset[Key]
    cost_s: float
    close: bool
    need: int | None        # decide.rounds_needed at the observed mean and sd (None: n < 2)
    reachable: bool


def candidates(rankings: Iterable[Ranking], case_s: Mapping[Key, float], left_s: float,
               rounds_left: int) -> list[Candidate]:
    """Every open pair, in the order it gets the round: reachable before out of reach, wide
    before close, fewer rounds needed first. A pair is out of reach when, from REACH_FROM
    rounds on, the rounds it needs (at its observed mean and sd) exceed what is left: the
    rounds before `max_rounds`, or the rounds of its own cases the budget left still buys.
    Before REACH_FROM rounds the estimate stands on too few rounds to give a pair up."""
    out = []
    for rk in rankings:
        wide = {id(d) for d in rk.wide}
        for d in rk.open:
            keys = pair_keys(rk, d)
            cost = cost_s(keys, case_s)
            affordable = rounds_left if cost <= 0 else min(rounds_left, int(left_s // cost))
            reachable = (d.n < REACH_FROM or d.rounds_needed is None
                         or d.rounds_needed <= affordable)
            out.append(Candidate(d.a, d.b, rk.scenario, keys, cost, id(d) not in wide,
                                 d.rounds_needed, reachable))
    out.sort(key=lambda c: (not c.reachable, c.close,
                            c.need if c.need is not None else 0))
    return out


def plan_round(cands: Iterable[Candidate], case_s: Mapping[Key, float],
               left_s: float) -> frozenset[Key]:
    """The next round's cases within `left_s` seconds: the reachable pairs' cases, added in
    the order of `candidates` while the round still fits (a pair whose cases do not fit is
    passed over for the next). Empty: nothing in reach fits."""
    keep: set[Key] = set()
    for c in cands:
        if not c.reachable:
            break
        more = keep | c.keys
        if cost_s(more, case_s) <= left_s:
            keep = more
    return frozenset(keep)


# -- from the case documents ------------------------------------------------------------------

@dataclass
class Observed:
    """What the recorded cases say: per scenario its Series; per case key its durations (per
    round: native's runs in a round together);
    the rounds begun and the seconds measured (the sum of the cases' wall times)."""
    series: list[Series]
    durations: dict[Key, list[float]] = field(default_factory=dict)
    rounds: int = 0
    measured_s: float = 0.0

    def case_s(self) -> dict[Key, float]:
        return {k: statistics.fmean(v) for k, v in self.durations.items() if v}


def case_key(doc: Mapping[str, Any]) -> Key:
    """(tunnel label, scenario) of a case document (or of plan.Case.to_dict() under "case");
    a mesh case's scenario carries its pair."""
    c = doc["case"]
    wl, mtu, off = (str(c["workload"].get("label") or c["workload"]["name"]), int(c["mtu"]),
                    str(c["offloads"]["name"]))
    pair = c.get("pair")
    scen: Scenario = (wl, mtu, off, "-".join(map(str, pair))) if pair else (wl, mtu, off)
    return str(c["tunnel"]["label"]), scen


def _where(scen: Scenario) -> dict[str, Any]:
    """A scenario as the record names it: workload, mtu, offloads (and a mesh's pair)."""
    return {"workload": scen[0], "mtu": scen[1], "offloads": scen[2],
            **({"pair": scen[3]} if len(scen) > 3 else {})}


def is_native(doc: Mapping[str, Any]) -> bool:
    """Whether a case document is native's own run (not native through a chain)."""
    t = doc["case"]["tunnel"]
    return t["kind"] == "native" and not str(t["label"]).endswith(VIA_CHAIN)


def _headline(docs: list[Mapping[str, Any]]) -> tuple[str, bool] | None:
    """The scenario's headline metric (the first declared one its native recorded) and
    whether higher is better."""
    declared = next((list(d["case"]["workload"].get("headline") or ()) for d in docs), [])
    if not declared and docs:   # a case written before the headline was recorded
        from . import workloads
        try:
            declared = list(workloads.get(str(docs[0]["case"]["workload"]["name"])).headline)
        except Exception:   # a workload this version does not know: nothing to rank by
            return None
    for pool in ([d for d in docs if is_native(d)], docs):
        for name in declared:
            for d in pool:
                m = (d.get("metrics") or {}).get(name)
                if m and m.get("value") is not None:
                    return name, bool(m.get("higher_is_better", True))
    return None


def paired_figure(doc: Mapping[str, Any], metric: str) -> float | None:
    """The value of `metric` a round pairs against native's (a rate's best second,
    model.paired_value); None when the case did not record it."""
    m = (doc.get("metrics") or {}).get(metric) or {}
    if m.get("value") is None:
        return None
    hib, series = bool(m.get("higher_is_better", True)), (doc.get("series") or {}).get(metric)
    return float(paired_value(float(m["value"]), hib, series) or m["value"])


def series_from_docs(docs: Iterable[Mapping[str, Any]]) -> Observed:
    """Per scenario, the headline figure of every ok case by round (its `repeat`)."""
    by_scen: dict[Scenario, list[Mapping[str, Any]]] = {}
    obs = Observed([])
    per_round: dict[tuple[Key, int], float] = {}   # a round's native runs cost together
    for d in docs:
        key = case_key(d)
        rep = int(d["case"].get("repeat") or 0)
        obs.rounds = max(obs.rounds, rep)
        if d.get("started") is not None and d.get("ended") is not None:
            took = max(float(d["ended"]) - float(d["started"]), 0.0)
            obs.measured_s += took
            per_round[(key, rep)] = per_round.get((key, rep), 0.0) + took
        if d.get("status") == "ok":
            by_scen.setdefault(key[1], []).append(d)
    for (key, _), took in per_round.items():
        obs.durations.setdefault(key, []).append(took)
    for scen, sdocs in by_scen.items():
        head = _headline(sdocs)
        if head is None:
            continue
        metric, hib = head
        natives: dict[tuple[int, int], float] = {}   # (round, native run): a round has several
        methods: dict[str, dict[int, float]] = {}
        own: dict[str, dict[int, float]] = {}   # shares the cases measured themselves
        best: set[str | None] = set()   # the methods (None: native) paired by best seconds
        for d in sdocs:
            v = paired_figure(d, metric)
            if v is None:
                continue
            m = d["metrics"][metric]
            hib_m, series = bool(m.get("higher_is_better", True)), (d.get("series") or {}).get(metric)
            rep = int(d["case"].get("repeat") or 0)
            label = None if is_native(d) else case_key(d)[0]
            if label is None:
                natives[(rep, int(d["case"].get("native_run") or 1))] = v
            else:
                methods.setdefault(label, {})[rep] = v
                mine = own_share(d.get("paired_native"), metric)
                if mine is not None:
                    own.setdefault(label, {})[rep] = mine
                    continue   # its share does not rest on its window: never "slowed"
            if by_best_second(hib_m, series):
                best.add(label)
        # a case the host slowed for its whole window pairs with nothing (model.slowed_rounds,
        # as the report's records.mark_slowed): the rule sees the round as not measured
        for run in slowed_rounds(natives) if None in best else ():
            del natives[run]
        for label, vals in methods.items():
            mine_r = own.get(label, {})
            judged = {r: v for r, v in vals.items() if r not in mine_r}
            for rep in slowed_rounds(judged) if label in best else ():
                del vals[rep]
        # native's figure in a round: the geometric mean of its runs there (plan.spread_natives)
        by_rep: dict[int, list[float]] = {}
        for (rep, _), v in natives.items():
            by_rep.setdefault(rep, []).append(v)
        native = {rep: round_reference(vs) for rep, vs in by_rep.items()}
        obs.series.append(Series(scen, metric, hib, native, methods, own))
    return obs


# -- what the campaign records and prints ------------------------------------------------------

def unsettled(rankings: Iterable[Ranking], step: Step | None = None) -> list[dict[str, Any]]:
    """Each open pair with its scenario and the rounds it still needs (numbers), and whether
    `step` gave it up as out of reach."""
    gone = set(step.out_of_reach) if step is not None else set()
    out = []
    for rk in rankings:
        wide = {id(d) for d in rk.wide}
        for d in rk.open:
            out.append({**_where(rk.scenario), "metric": rk.metric,
                        "a": d.a, "b": d.b, "decision": d.verdict, "n": d.n,
                        "rounds_needed": d.rounds_needed, "close": id(d) not in wide,
                        "apart": points_apart(d),
                        "out_of_reach": (d.a, d.b, rk.scenario) in gone})
    return out


def points_apart(d: decide.Decision) -> float | None:
    """The pair's estimated distance in points of native (|A - B| × 100, A and B shares of
    native): the inverse of decide.log_margin. The pair's level g (the geometric mean of its
    two shares) is the one its margin was set at, δ = 2·asinh(MARGIN / 2g); then
    |A - B| = 2g·sinh(|d̄| / 2). None when untested (no mean) or the level was 0."""
    if d.n < 2 or not math.isfinite(d.margin) or d.margin <= 0:
        return None
    return round(distance(d.mean, d.margin), 2)


def distance(mean: float, margin: float) -> float:
    """Points of native between two shares from their mean log difference and the margin
    their pair was given (points_apart); inf when the margin's level was 0."""
    from .report import decide as dec
    if not math.isfinite(margin) or margin <= 0:
        return math.inf
    level = dec.MARGIN / (2.0 * math.sinh(margin / 2.0))
    return 100.0 * 2.0 * level * math.sinh(abs(mean) / 2.0)


# Beyond this many more rounds a campaign is not the way to settle a pair: to_settle's hint
# says so instead of naming a budget of hours.
HINT_MAX_ROUNDS = 100


def to_settle(rankings: Iterable[Ranking], case_s: Mapping[Key, float], rounds: int,
              measured_s: float, resolution: float = RESOLUTION) -> dict[str, Any] | None:
    """What would settle the open pairs estimated more than `resolution` apart, at the pace
    measured so far: the most rounds one of them needs (decide.rounds_needed at its observed
    mean and sd), the cases those pairs are measured by (their methods and native in their
    scenarios) and one round of them in seconds (their mean durations so far), and the
    budget and --max-rounds that hold that many more rounds. None when no such pair is open
    (or one was measured in a single round)."""
    if not case_s:   # nothing measured to price a round by
        return None
    keys: set[Key] = set()
    need = 0
    for rk in rankings:
        for d in rk.open:
            apart = points_apart(d)
            if apart is None or apart <= 100 * resolution:
                continue
            if d.rounds_needed is None:
                return None
            need = max(need, d.rounds_needed)
            keys |= pair_keys(rk, d)
    if not keys:
        return None
    round_s = cost_s(keys, case_s)
    return {"rounds": need, "cases": len(keys), "round_s": round(round_s, 1),
            "budget_s": round(measured_s + need * round_s, 1), "max_rounds": rounds + need}


def record(rankings: list[Ranking], step: Step, measured_s: float, *, min_rounds: int,
           max_rounds: int, budget_s: float, history: list[dict[str, Any]],
           case_s: Mapping[Key, float] | None = None) -> dict[str, Any]:
    """The campaign's `sequential` section of index.json; `case_s` (each case's mean seconds
    so far) prices what would settle the far pairs still open (`to_settle`)."""
    return {"min_rounds": min_rounds, "max_rounds": max_rounds, "budget_s": budget_s,
            "alpha_per_look": ALPHA_PER_LOOK, "margin": _margin(), "resolution": RESOLUTION,
            "rounds": step.rounds, "measured_s": round(measured_s, 3), "stopped": step.stop,
            "rankings": [rk.to_json() for rk in rankings], "unsettled": unsettled(rankings, step),
            "to_settle": to_settle(rankings, case_s or {}, step.rounds, measured_s),
            "history": history}


def _margin() -> float:
    from .report import decide
    return decide.MARGIN


def pair_text(p: Mapping[str, Any]) -> str:
    """'vxlan vs ebpf-vxlan (stream, MTU 1500): undecided, about 4 more rounds'."""
    where = f"{p['workload']}, MTU {p['mtu']}" + (
        f", {p['offloads']}" if p["offloads"] != "default" else "") + (
        f", pair {p['pair']}" if p.get("pair") else "")
    from .report import decide
    need = p.get("rounds_needed")
    if need is None:
        tail = "a single round each: run more rounds"
    elif need > decide.MAX_ROUNDS - int(p.get("n") or 0):
        tail = f"more than {decide.MAX_ROUNDS} rounds"
    else:
        tail = f"about {need} more round{'s' if need != 1 else ''}"
    if p.get("apart") is not None:
        tail = f"estimated {float(p['apart']):.1f} points apart, " + tail
    if p.get("close"):
        tail += f"; within {_points(p)} points of each other"
    if p.get("out_of_reach"):
        tail += f"; out of reach of the budget after round {p.get('n')}"
    return f"{p['a']} vs {p['b']} ({where}): {p['decision']}, {tail}"


def _points(p: Mapping[str, Any]) -> str:
    return f"{100 * float(p.get('resolution') or RESOLUTION):g}"


STOPPED = {SETTLED: "every neighbouring pair of every ranking settled",
           BUDGET: "the measurement budget is spent",
           MAX_ROUNDS: "the maximum number of rounds is reached",
           OUT_OF_REACH: "the pairs still open need more rounds than the budget or "
                         "--max-rounds leaves (each is named below with the rounds it needs)"}


def summary_lines(seq: Mapping[str, Any]) -> list[str]:
    """What the console and the report say of a sequential campaign."""
    why = STOPPED.get(str(seq.get("stopped")), "not yet (running, or interrupted)")
    lines = [f"sequential design: {seq.get('rounds')} round(s), "
             f"{float(seq.get('measured_s') or 0) / 60:.1f} min of measurement; stopped: {why} "
             f"(at least {seq.get('min_rounds')}, at most {seq.get('max_rounds')} rounds, "
             f"budget {float(seq.get('budget_s') or 0) / 60:g} min)"]
    open_ = list(seq.get("unsettled") or [])
    if open_:
        lines.append(apart_line(open_, float(seq.get("resolution") or RESOLUTION),
                                seq.get("to_settle"), int(seq.get("max_rounds") or 0)))
    lines += [f"unsettled: {pair_text(p)}" for p in open_]
    return lines


def apart_line(open_: list[Mapping[str, Any]], resolution: float = RESOLUTION,
               settle: Mapping[str, Any] | None = None, max_rounds: int = 0) -> str:
    """Whether what is left open is only close pairs: 'open pairs: 3 (estimated 1.1-7.8
    points of native apart); every pair estimated more than 10 points apart is settled'.
    The open pairs include the far pairs a run of close neighbours leaves unordered
    (far_pairs), so a far pair is never hidden behind close neighbours. With `settle`
    (to_settle) the line prices the far ones: the rounds they need at the pace measured,
    and the --budget (and --max-rounds, when the campaign's `max_rounds` would stop first)
    that holds them."""
    pts = f"{100 * resolution:g}"
    est = [float(p["apart"]) for p in open_ if p.get("apart") is not None]
    head = f"open pairs: {len(open_)}" + (
        f" (estimated {min(est):.1f}-{max(est):.1f} points of native apart)" if est else "")
    if len(est) < len(open_):
        return f"{head}; some were measured in a single round: run more rounds"
    far = [x for x in est if x > 100 * resolution]
    if far:
        return (f"{head}; {len(far)} of them more than {pts} points apart, not yet decided: "
                + settle_text(settle, max_rounds))
    return f"{head}; every pair estimated more than {pts} points apart is settled"


def settle_text(settle: Mapping[str, Any] | None, max_rounds: int = 0) -> str:
    """'at the pace measured they need about 9 more rounds at 104 s a round (about 15.6 min
    more): --budget 36m would likely decide them' (to_settle), or the plain advice."""
    plain = "more rounds (--budget, --max-rounds) would decide them"
    if not settle or settle.get("rounds") is None:
        return plain
    need = int(settle["rounds"])
    if need > HINT_MAX_ROUNDS:
        return (f"at the pace measured they need more than {HINT_MAX_ROUNDS} more rounds, "
                "more than a campaign on this host can give them")
    minutes = need * float(settle["round_s"]) / 60
    flags = f"--budget {math.ceil(float(settle['budget_s']) / 60)}m"
    if max_rounds and int(settle["max_rounds"]) > max_rounds:
        flags += f" --max-rounds {int(settle['max_rounds'])}"
    return (f"at the pace measured they need about {need} more round{'s' if need != 1 else ''}"
            f" at {float(settle['round_s']):.0f} s a round (about {minutes:.1f} min more): "
            f"{flags} would likely decide them")


def open_text(rankings: Iterable[Ranking], limit: int = 4) -> str:
    """For the progress line: 'open: vxlan~ebpf-vxlan (stream), ...' or 'all settled'."""
    rankings = list(rankings)
    far = {id(d) for rk in rankings for d in rk.far}
    opened = [(rk, d) for rk in rankings for d in rk.open]
    # neighbours first: a far pair is open while its run is, and says less of what decides
    opened.sort(key=lambda x: id(x[1]) in far)
    pairs = [f"{d.a}~{d.b} ({', '.join(map(str, rk.scenario[:1] + rk.scenario[3:]))})"
             for rk, d in opened]
    if not pairs:
        return "all pairs settled"
    n_far = sum(id(d) in far for _, d in opened)
    of_far = f" ({n_far} far, inside unordered runs)" if n_far else ""
    more = f", +{len(pairs) - limit} more" if len(pairs) > limit else ""
    return f"{len(pairs)} pair(s) open{of_far}: " + ", ".join(pairs[:limit]) + more
