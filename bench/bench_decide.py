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

Run: python bench/bench_decide.py sim [campaigns]   |   python bench/bench_decide.py live [S [FLAGS]]
(S: seconds per measurement, default 2; FLAGS: more `tunbench run` flags for all three, e.g.
--placement processes.)
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
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
        logs = {k: statistics.fmean(sequential.log_ratios(v, s.native).values())
                for k, v in s.methods.items() if sequential.log_ratios(v, s.native)}
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
            lr = {m: sequential.log_ratios(v, s.native) for m, v in s.methods.items()}
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


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "sim"
    if mode == "sim":
        sim(int(sys.argv[2]) if len(sys.argv) > 2 else 150)
    elif mode == "live":
        live(float(sys.argv[2]) if len(sys.argv) > 2 else 2.0, sys.argv[3:])
    else:
        raise SystemExit("usage: bench_decide.py sim [N] | live [SECONDS [RUN FLAGS...]]")
