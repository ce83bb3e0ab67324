"""`tunbench run` without --repeats: the sequential design on a real campaign (native, kernel
vxlan and wireguard-go, 2 s rounds). It asserts what the runner did and recorded, never a
rate: the rounds, the per-round pairing (native in every round), the pairs' decisions as the
rule computes them from the case files, the far-apart method stopping before the others,
and the unsettled pairs named with numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunbench import sequential, tunnels
from tunbench.workloads import stream

pytestmark = pytest.mark.correctness

TB = [sys.executable, "-m", "tunbench"]
MAX_ROUNDS = 8


def test_sequential_campaign_measures_until_decided(tmp_path: Path,
                                                    root_unchanged: None) -> None:
    wg = tunnels.get("wireguard")
    if any(not r.available for r in tunnels.availability("wireguard")[1:] if r.impl == "go"):
        pytest.skip("wireguard-go is not available here (tunbench doctor says why)")
    assert wg.impl_param == "impl"
    exp = tmp_path / "seq.toml"
    exp.write_text('[[tunnel]]\nkind = "native"\n[[tunnel]]\nkind = "vxlan"\n'
                   '[[tunnel]]\nkind = "wireguard"\nlabel = "wg-go"\nimpl = "go"\n'
                   '[[workload]]\nname = "stream"\n')
    out = tmp_path / "camp"
    r = subprocess.run(TB + ["run", "--experiment", str(exp), "--duration", "2", "--warmup",
                             "0", "--max-rounds", str(MAX_ROUNDS), "--budget", "4m",
                             "--out", str(out), "--json", "--no-report"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    index = json.loads((out / "index.json").read_text())
    seq = index["sequential"]
    assert index["state"] == "complete" and index["experiment"]["repeats"] is None
    # the console's JSON carries the same record
    assert json.loads(r.stdout)["sequential"] == seq
    rounds = seq["rounds"]
    assert sequential.MIN_ROUNDS <= rounds <= MAX_ROUNDS
    assert seq["stopped"] in (sequential.SETTLED, sequential.MAX_ROUNDS, sequential.BUDGET,
                              sequential.OUT_OF_REACH)
    assert isinstance(seq["measured_s"], float) and seq["measured_s"] > 0
    assert (seq["min_rounds"], seq["max_rounds"], seq["budget_s"]) == (
        sequential.MIN_ROUNDS, MAX_ROUNDS, 240.0)

    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    assert len(docs) == len(index["cases"]) and all(d["status"] == "ok" for d in docs)
    by_round: dict[int, list[str]] = {}
    for d in docs:
        by_round.setdefault(d["case"]["repeat"], []).append(d["case"]["tunnel"]["label"])
    assert sorted(by_round) == list(range(1, rounds + 1))
    for k, labels in by_round.items():   # every round pairs against a native of its own
        assert labels[0] == "native", (k, labels)
        if k <= sequential.MIN_ROUNDS:
            assert labels == ["native", "vxlan", "wg-go"]
    # the added rounds measure only what is open: never more than a full round
    assert all(len(by_round[k]) <= 3 for k in by_round)

    # vxlan and wireguard-go leave native's path native: each of their cases measured
    # native beside it (workloads/stream.py), pair by pair in alternating order over the
    # server site's underlay address, and the rule pairs them by that, not by the round;
    # native's own cases have no such bursts
    for d in docs:
        beside = (d.get("paired_native") or {}).get("throughput")
        if d["case"]["tunnel"]["kind"] == "native":
            assert beside is None
            continue
        assert beside is not None, d["case"]["id"]
        assert beside["order"] == stream.burst_order(stream.NATIVE_BURSTS)
        assert len(beside["method"]) == len(beside["native"]) == stream.NATIVE_BURSTS
        assert all(x > 0 for side in ("method", "native") for x in beside["bytes"][side])
        assert beside["native_addr"] == d["testbed"]["sites"]["b"]["underlay4"]
    # what was recorded is the rule applied to the case files
    obs = sequential.series_from_docs(docs)
    (s,) = obs.series
    assert {m: sorted(v) for m, v in s.own.items()} == {
        m: sorted(v) for m, v in s.methods.items()}   # every method round paired by its own
    (ranking,) = [sequential.rank(s) for s in obs.series]
    assert seq["rankings"] == [ranking.to_json()]
    (rec,) = seq["rankings"]
    assert rec["metric"] == "throughput" and set(rec["order"]) == {"native", "vxlan", "wg-go"}
    pairs = {frozenset((p["a"], p["b"])): p for p in rec["pairs"]}
    assert len(pairs) == 2
    for p in rec["pairs"]:
        assert p["decision"] in ("different", "equivalent", "undecided", "untested")
        assert isinstance(p["n"], int) and isinstance(p["mean"], float)
    # wireguard-go (userspace, a few % of native) is far below both kernel paths: it ranks
    # last and its pair with the one above it is decided. Which one that is, native or vxlan,
    # is not asserted: 2 s cases on a busy host have put vxlan above native (ciP, 2026-11-28)
    assert rec["order"][-1] == "wg-go", rec["order"]
    far = pairs[frozenset(rec["order"][-2:])]
    assert far["decision"] == "different"
    # every added round measured exactly native and the methods of the pairs open after
    # the round before it and still in reach: a method whose pairs were settled (or given up
    # as out of reach) was not measured again
    open_after = {h["round"]: [p for p in h["open"] if p not in h["out_of_reach"]]
                  for h in seq["history"]}
    for k in range(sequential.MIN_ROUNDS + 1, rounds + 1):
        wanted = {"native"} | {x for a, b, _ in open_after[k - 1] for x in (a, b)}
        assert set(by_round[k]) == wanted, (k, by_round[k], open_after[k - 1])
    counts = {m: by_round_count(by_round, m) for m in ("native", "vxlan", "wg-go")}
    print(f"sequential: {rounds} rounds, stopped {seq['stopped']}, cases per method {counts}, "
          f"history {seq['history']}")
    if seq["stopped"] == sequential.SETTLED:
        assert seq["unsettled"] == [] and all(
            p["decision"] in ("different", "equivalent") for p in rec["pairs"])
    else:   # out of rounds or budget: each open pair named with the rounds it needs
        assert seq["unsettled"]
        for p in seq["unsettled"]:
            assert p["rounds_needed"] is None or isinstance(p["rounds_needed"], int)
            assert p["apart"] is None or p["apart"] >= 0    # points of native, a number
        assert sequential.summary_lines(seq)[1].startswith(f"open pairs: {len(seq['unsettled'])}")
    # what would settle the far pairs left open is priced from the recorded cases themselves
    assert seq["to_settle"] == sequential.to_settle([ranking], obs.case_s(), rounds,
                                                    seq["measured_s"])
    if seq["to_settle"] is not None:
        assert seq["to_settle"]["round_s"] > 0 and seq["to_settle"]["rounds"] >= 0
    # the history says how many cases each decision saw, and how many pairs were open
    assert [h["round"] for h in seq["history"]] == list(range(sequential.MIN_ROUNDS,
                                                              rounds + 1))
    assert seq["history"][-1]["open_pairs"] == len(seq["unsettled"])
    # progress said after each round which pairs were still open
    assert f"tunbench: round {sequential.MIN_ROUNDS} done:" in r.stderr


def by_round_count(by_round: dict[int, list[str]], label: str) -> int:
    return sum(label in labels for labels in by_round.values())
