"""The sequential design against fixed rounds (issue 28): wall time, and the pairs each leaves
unsettled. Prints ratios, asserts nothing.

Two parts:

- `sim` (pure, no root): the stopping rule (sequential.py) on simulated campaigns with known
  truth: the rate of false decisions for a pair of equal methods at the rule's level per look
  against the report's 5 %, and the rounds a pair 10 or 5 points apart takes to settle.
- `live` (root, a few minutes; under the live lock): the six methods native, vxlan,
  ebpf-vxlan, srv6, wireguard, ssh-forward, stream workload, run three times in one sitting:
  sequential (the default), fixed --repeats 3 and fixed --repeats 10. For each: wall time, and
  the neighbouring pairs left unsettled, all of them and those at least 10 points of native
  apart (judged as the report judges the final rounds: report/decide at 5 %).

- `plan` (pure, no root): the rule with its budget on campaigns simulated from recorded
  ones (`make run` directories): each method's share and per-round sd of ln(share) per
  workload fitted from them (sd pooled within each campaign), native's runs' own sd, the
  cases' durations; the per-round values drawn from those. For each simulated campaign:
  rounds, seconds of measurement, and the pairs more than 10 points of native apart (in
  the fitted truth) left unsettled, per workload. `--sd-scale` and `--time-scale` ask what a
  quieter or a faster design would reach (e.g. interleaving, bench_interleave.py).

- `bursts` (pure, no root): over recorded campaigns' native-beside cases (`paired_native`,
  docs/methodology.md "Native beside the method"), the per-round sd of ln(share) of each
  method with at least 3 rounds under five figures of the bursts: the ratio of their means
  (what results/model.own_share takes), of the best bursts, of the medians, the median and
  the geometric mean of the pairs' ratios; and each figure's sd pooled over all series.

Run: python bench/bench_decide.py sim [campaigns]   |   python bench/bench_decide.py live [S [FLAGS]]
     python bench/bench_decide.py plan DIR... [--campaigns N] [--budget S] [--sd-scale X]
     [--time-scale X]   |   python bench/bench_decide.py bursts DIR...
(S: seconds per measurement, default 2; FLAGS: more `tunbench run` flags for all three, e.g.
--placement processes.)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tunbench import sequential  # noqa: E402
from tunbench.report import decide  # noqa: E402

SCEN = ("stream", 1500, "default")
KINDS = "native,vxlan,ebpf-vxlan,srv6,wireguard,ssh-forward"


def simulate(truth: dict[str, tuple[float, float]], seed: int, alpha: float,
             max_rounds: int = sequential.DEFAULT_MAX_ROUNDS
             ) -> tuple[sequential.Step, sequential.Ranking]:
    """One campaign of the rule with per-round values drawn from `truth` (share of native,
    CV of the ratio), host drift common to a round."""
    rng = random.Random(seed)
    native: dict[int, float] = {}
    methods: dict[str, dict[int, float]] = {k: {} for k in truth}
    keep: frozenset[sequential.Key] | None = None
    rnd = 0
    while True:
        rnd += 1
        host = 1000.0 * rng.uniform(0.8, 1.2)
        for k in ["native", *truth]:
            if keep is not None and (k, SCEN) not in keep:
                continue
            if k == "native":
                native[rnd] = host * math.exp(rng.gauss(0, 0.01))
            else:
                share, cv = truth[k]
                methods[k][rnd] = host * share * math.exp(rng.gauss(0, cv))
        r = sequential.rank(sequential.Series(SCEN, "throughput", True, native, methods),
                            alpha=alpha)
        step = sequential.next_step([r], rnd, 0.0, {}, max_rounds=max_rounds, budget_s=1e12)
        if step.stop is not None:
            return step, r
        keep = step.keep


def sim(n: int) -> None:
    cases = {"equal (0.80/0.80, CV 2 %)": ({"a": (0.80, 0.02), "b": (0.80, 0.02),
                                             "far": (0.02, 0.02)}, ("a", "b")),
             "10 points (0.85/0.75, CV 3 %)": ({"a": (0.85, 0.03), "b": (0.75, 0.03),
                                                 "far": (0.02, 0.03)}, ("a", "b")),
             "5 points (0.85/0.80, CV 2 %)": ({"a": (0.85, 0.02), "b": (0.80, 0.02)},
                                               ("a", "b"))}
    for alpha in (decide.ALPHA, sequential.ALPHA_PER_LOOK):
        for name, (truth, pair) in cases.items():
            verdicts: Counter[str] = Counter()
            rounds = []
            for seed in range(n):
                step, r = simulate(truth, seed, alpha)
                v = {frozenset((d.a, d.b)): d.verdict for d in r.decisions}
                verdicts[v.get(frozenset(pair), "not neighbours")] += 1
                rounds.append(step.rounds)
            print(f"alpha per look {alpha:g}: {name}: {dict(verdicts)} of {n}; rounds mean "
                  f"{statistics.fmean(rounds):.2f}, max {max(rounds)}")


def campaign(out: Path, extra: list[str], seconds: float) -> tuple[float, dict]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "tunbench", "run", "--tunnels", KINDS,
                        "--workloads", "stream", "--duration", str(seconds), "--warmup", "0",
                        "--out", str(out), "--no-report", "--quiet", "--json", *extra],
                       capture_output=True, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"campaign {extra} failed: {r.stderr.strip()[-400:]}")
    return wall, json.loads((out / "index.json").read_text())


def unsettled(out: Path) -> tuple[int, int, int]:
    """(pairs, unsettled, unsettled at least 10 points of native apart), judged at 5 %."""
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    obs = sequential.series_from_docs(docs)
    pairs = open_ = far = 0
    for s in obs.series:
        r = sequential.rank(s, alpha=decide.ALPHA)
        logs = {k: statistics.fmean(lr.values()) for k, v in s.methods.items()
                for lr in [sequential.log_ratios(v, s.native, s.own.get(k))] if lr}
        logs["native"] = 0.0
        for d in r.decisions:
            pairs += 1
            if d.verdict not in (decide.DIFFERENT, decide.EQUIVALENT):
                open_ += 1
                far += abs(math.exp(logs[d.a]) - math.exp(logs[d.b])) >= 0.10
    return pairs, open_, far


def far_settled_at(out: Path) -> tuple[int | None, float]:
    """The first round after which no neighbouring pair at least 10 points of native apart
    is open (judged as the rule judges, at its level per look), and the seconds of
    measurement up to it (the cases' wall times); (None, all seconds) if never."""
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    last = max(int(d["case"]["repeat"]) for d in docs)
    for k in range(1, last + 1):
        obs = sequential.series_from_docs([d for d in docs if int(d["case"]["repeat"]) <= k])
        far_open = 0
        for s in obs.series:
            r = sequential.rank(s)
            lr = {m: sequential.log_ratios(v, s.native, s.own.get(m))
                  for m, v in s.methods.items()}
            share = {m: math.exp(statistics.fmean(v.values())) for m, v in lr.items() if v}
            share["native"] = 1.0
            far_open += sum(1 for d in r.open if abs(share[d.a] - share[d.b]) >= 0.10)
        if k >= 2 and far_open == 0:
            return k, obs.measured_s
    return None, sequential.series_from_docs(docs).measured_s


def live(seconds: float, common: list[str] | None = None) -> None:
    rows = {}
    measured_fixed3, measured = 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("sequential", []), ("fixed n=3", ["--repeats", "3"]),
                            ("fixed n=10", ["--repeats", "10"])):
            out = Path(tmp) / name.replace(" ", "").replace("=", "")
            wall, index = campaign(out, [*extra, *(common or [])], seconds)
            rows[name] = (wall, len(index["cases"]), *unsettled(out),
                          (index.get("sequential") or {}).get("stopped"))
            if name == "fixed n=3":
                measured_fixed3 = far_settled_at(out)[1]
            if name == "sequential":
                at, measured = far_settled_at(out)
                print("sequential: every pair >= 10 points apart settled after "
                      + (f"round {at}, {measured:.0f} s of measurement" if at else
                         f"never ({measured:.0f} s of measurement)"))
    for name, (wall, cases, pairs, open_, far, stopped) in rows.items():
        print(f"{name}: {wall:.0f} s wall, {cases} cases; unsettled {open_} of {pairs} pairs, "
              f"{far} of them >= 10 points apart" + (f"; stopped: {stopped}" if stopped else ""))
    seq = rows["sequential"][0]
    print(f"measurement until every far pair settled (sequential) / all of fixed n=3's: "
          f"{measured / measured_fixed3:.2f}" if measured_fixed3 else "")
    print(f"wall time sequential / fixed n=3: {seq / rows['fixed n=3'][0]:.2f}; "
          f"sequential / fixed n=10: {seq / rows['fixed n=10'][0]:.2f}")


@dataclass(frozen=True)
class Fitted:
    """What `plan` simulates, per scenario: each method's mean ln(share) and its own
    per-round sd (the reference's part taken out), native's per-run sd and runs per round,
    and every case's seconds."""
    mean: dict[sequential.Key, float]
    own_sd: dict[sequential.Key, float]
    native_sd: dict[sequential.Scenario, float]
    natives: int
    higher: dict[sequential.Scenario, bool]
    seconds: dict[sequential.Key, float]


def fit(dirs: list[Path]) -> Fitted:
    """The model of `plan` from recorded campaigns: shares pooled over all of them, sds pooled
    within each (a campaign's own level is not noise a round sees)."""
    logs: dict[sequential.Key, list[list[float]]] = {}
    nat: dict[sequential.Scenario, list[list[float]]] = {}
    seconds: dict[sequential.Key, list[float]] = {}
    higher: dict[sequential.Scenario, bool] = {}
    runs = 1
    for d in dirs:
        docs = [json.loads(p.read_text()) for p in sorted((d / "cases").glob("*.json"))]
        obs = sequential.series_from_docs(docs)
        for s in obs.series:
            higher[s.scenario] = s.higher_is_better
            for m, vals in s.methods.items():
                lr = list(sequential.log_ratios(vals, s.native, s.own.get(m)).values())
                if len(lr) >= 2:
                    logs.setdefault((m, s.scenario), []).append(lr)
        by_round: dict[tuple[sequential.Scenario, int], list[float]] = {}
        for doc in docs:   # native's runs within a round: its own run-to-run noise
            if doc.get("status") != "ok" or not sequential.is_native(doc):
                continue
            key = sequential.case_key(doc)
            s = next(x for x in obs.series if x.scenario == key[1])
            v = sequential.paired_figure(doc, s.metric)
            if v:
                by_round.setdefault((key[1], int(doc["case"]["repeat"])), []).append(
                    math.log(v))
        for (scen, _), vs in by_round.items():
            runs = max(runs, len(vs))
            if len(vs) >= 2:
                nat.setdefault(scen, []).append(vs)
        for k, v in obs.case_s().items():
            seconds.setdefault(k, []).append(v)
    native_sd = {s: _pooled_sd(v) for s, v in nat.items()}
    mean, own = {}, {}
    for k, groups in logs.items():
        mean[k] = statistics.fmean(x for g in groups for x in g)
        ref = native_sd.get(k[1], 0.0) / math.sqrt(runs)
        own[k] = math.sqrt(max(_pooled_sd(groups) ** 2 - ref ** 2, 0.01 ** 2))
    return Fitted(mean, own, native_sd, runs, higher,
                  {k: statistics.fmean(v) for k, v in seconds.items()})


def _pooled_sd(groups: list[list[float]]) -> float:
    ss = sum((x - statistics.fmean(g)) ** 2 for g in groups for x in g)
    df = sum(len(g) - 1 for g in groups)
    return math.sqrt(ss / df) if df else 0.0


def plan_campaign(f: Fitted, seed: int, budget_s: float, sd_scale: float,
                  time_scale: float, only: str = "") -> tuple[int, float, str, Counter[str]]:
    """One simulated campaign of the budgeted rule: (rounds, seconds, why it stopped, the
    pairs more than RESOLUTION apart in the truth left unsettled, per workload)."""
    rng = random.Random(seed)
    scens = sorted(f.higher)
    native: dict[sequential.Scenario, dict[int, float]] = {s: {} for s in scens}
    methods: dict[sequential.Scenario, dict[str, dict[int, float]]] = {s: {} for s in scens}
    durations: dict[sequential.Key, list[float]] = {}
    keep: frozenset[sequential.Key] | None = None
    measured, rnd = 0.0, 0
    while True:
        rnd += 1
        for scen in scens:
            if keep is not None and ("native", scen) not in keep:
                continue
            scaled = not only or scen[0] == only
            sd_x, time_x = (sd_scale, time_scale) if scaled else (1.0, 1.0)
            host = rng.gauss(0, 0.05)   # a round's common drift: cancels in every pair
            sd = f.native_sd.get(scen, 0.0) * sd_x
            native[scen][rnd] = math.exp(host + statistics.fmean(
                rng.gauss(0, sd) for _ in range(f.natives)))
            for (m, s), mu in f.mean.items():
                if s != scen or (keep is not None and (m, scen) not in keep):
                    continue
                methods[scen].setdefault(m, {})[rnd] = math.exp(
                    host + mu + rng.gauss(0, f.own_sd[(m, s)] * sd_x))
            for k in [("native", scen), *((m, scen) for m in methods[scen])]:
                if keep is None or k in keep:
                    took = f.seconds.get(k, 0.0) * time_x
                    measured += took
                    durations.setdefault(k, []).append(took)
        rankings = [sequential.rank(sequential.Series(s, "x", f.higher[s], native[s],
                                                      methods[s])) for s in scens]
        step = sequential.next_step(rankings, rnd, measured,
                                    {k: statistics.fmean(v) for k, v in durations.items()},
                                    budget_s=budget_s)
        if step.stop is not None:
            break
        keep = step.keep
    left: Counter[str] = Counter()
    for rk in rankings:
        truth = {m: math.exp(mu) for (m, s), mu in f.mean.items() if s == rk.scenario}
        truth["native"] = 1.0
        ordered = {frozenset((d.a, d.b)) for d in rk.far if d.verdict == decide.DIFFERENT}
        cut = [i for i, d in enumerate(rk.decisions) if d.verdict == decide.DIFFERENT]
        pos = {m: i for i, m in enumerate(rk.order)}
        for a, b in itertools.combinations(sorted(truth), 2):
            if abs(truth[a] - truth[b]) <= sequential.RESOLUTION:
                continue
            i, j = sorted((pos[a], pos[b]))
            if not (any(i <= c < j for c in cut) or frozenset((a, b)) in ordered):
                left[str(rk.scenario[0])] += 1
    return rnd, measured, str(step.stop), left


def plan(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="bench_decide.py plan")
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--campaigns", type=int, default=20)
    ap.add_argument("--budget", type=float, default=1200.0, help="seconds (make run: 1200)")
    ap.add_argument("--sd-scale", type=float, default=1.0)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--only", default="", metavar="WORKLOAD",
                    help="scale this workload's cases only (e.g. stream)")
    ap.add_argument("--wide-only", action="store_true",
                    help="a variant of the rule: while a wide pair in reach fits, the round "
                         "holds the wide pairs only (close pairs wait)")
    args = ap.parse_args(argv)
    if args.wide_only:
        plain = sequential.plan_round

        def wide_first(cands, case_s, left_s):   # type: ignore[no-untyped-def]
            cands = list(cands)
            wide = plain([c for c in cands if not c.close], case_s, left_s)
            return wide or plain(cands, case_s, left_s)
        sequential.plan_round = wide_first   # type: ignore[assignment]
    f = fit(args.dirs)
    for (m, s), mu in sorted(f.mean.items(), key=lambda kv: (kv[0][1], -kv[1])):
        print(f"fitted {s[0]} {m}: {math.exp(mu):.3f} of native, own sd {f.own_sd[(m, s)]:.3f}")
    for s, sd in sorted(f.native_sd.items()):
        print(f"fitted {s[0]} native: sd of a run {sd:.3f}, {f.natives} per round")
    runs = [plan_campaign(f, seed, args.budget, args.sd_scale, args.time_scale, args.only)
            for seed in range(args.campaigns)]
    done = sum(1 for r in runs if not r[3])
    wls = sorted({w for r in runs for w in r[3]} | {str(s[0]) for s in f.higher})
    per = ", ".join(f"{w} {statistics.fmean(r[3][w] for r in runs):.1f}" for w in wls)
    print(f"budget {args.budget:.0f} s, sd x{args.sd_scale:g}, case seconds "
          f"x{args.time_scale:g}{' (' + args.only + ' only)' if args.only else ''}"
          f"{', close pairs wait' if args.wide_only else ''}: every pair > {100 * sequential.RESOLUTION:.0f} points apart "
          f"settled in {done} of {len(runs)} campaigns; unsettled such pairs per campaign: "
          f"{per}; rounds {statistics.fmean(r[0] for r in runs):.1f}, measurement "
          f"{statistics.fmean(r[1] for r in runs):.0f} s; stopped: "
          f"{dict(Counter(r[2] for r in runs))}")


BURST_FIGURES: dict[str, Callable[[list[float], list[float]], float]] = {
    "means": lambda m, n: statistics.fmean(m) / statistics.fmean(n),
    "best": lambda m, n: max(m) / max(n),
    "medians": lambda m, n: statistics.median(m) / statistics.median(n),
    "pair median": lambda m, n: statistics.median(a / b for a, b in zip(m, n, strict=True)),
    "pair gm": lambda m, n: math.exp(statistics.fmean(
        math.log(a / b) for a, b in zip(m, n, strict=True))),
}


def bursts(dirs: list[str]) -> None:
    """The sd per round of ln(share) under each figure of the bursts (BURST_FIGURES)."""
    series: dict[tuple[str, str], list[tuple[list[float], list[float]]]] = {}
    for d in dirs:
        for p in sorted((Path(d) / "cases").glob("*.json")):
            doc = json.loads(p.read_text())
            b = (doc.get("paired_native") or {}).get("throughput")
            if doc.get("status") == "ok" and b and min(b["method"] + b["native"]) > 0:
                series.setdefault((Path(d).name, doc["case"]["tunnel"]["label"]), []).append(
                    (b["method"], b["native"]))
    pooled: dict[str, list[float]] = {k: [] for k in BURST_FIGURES}
    for (camp, label), rounds in sorted(series.items()):
        if len(rounds) < 3:
            continue
        cells = []
        for name, f in BURST_FIGURES.items():
            logs = [math.log(f(m, n)) for m, n in rounds]
            sd = statistics.stdev(logs)
            pooled[name].append(sd * sd)
            cells.append(f"{name} {math.exp(statistics.fmean(logs)):.3f} sd {sd:.3f}")
        print(f"{camp} {label} (n={len(rounds)}): " + "; ".join(cells), flush=True)
    print("pooled sd of ln(share) per round: " + ", ".join(
        f"{k} {math.sqrt(statistics.fmean(v)):.3f}" for k, v in pooled.items() if v))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "sim"
    if mode == "sim":
        sim(int(sys.argv[2]) if len(sys.argv) > 2 else 150)
    elif mode == "live":
        live(float(sys.argv[2]) if len(sys.argv) > 2 else 2.0, sys.argv[3:])
    elif mode == "plan":
        plan(sys.argv[2:])
    elif mode == "bursts":
        bursts(sys.argv[2:])
    else:
        raise SystemExit("usage: bench_decide.py sim [N] | live [SECONDS [RUN FLAGS...]] | "
                         "plan DIR... [--campaigns N] [--budget S] [--sd-scale X] "
                         "[--time-scale X] | bursts DIR...")
