"""Several natives per round (plan.spread_natives, issue 28): how many a campaign plans, where
they go in a round, how they are named and recorded, what refuses them, and that every reader
(the report's rows, advise, the sequential rule) pairs each method with the geometric mean of
its round's natives, one estimator everywhere (results/model.round_reference)."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import pytest

from tunbench import cli, plan, sequential, spec
from tunbench.errors import SpecError
from tunbench.report import advise_collect, data
from tunbench.results.model import round_reference

DATA = Path(__file__).parent.parent / "data"
METHODS = ["vxlan", "ebpf-vxlan", "wireguard", "ovs-vxlan", "ovs-geneve", "ssh-tun",
           "ipsec"]


def _exp(tunnels: list[str], **experiment: object) -> spec.Experiment:
    return spec.build({"experiment": dict(experiment),
                       "tunnel": [{"kind": k} for k in tunnels],
                       "workload": [{"name": "stream"}, {"name": "latency"}]})


@pytest.mark.parametrize("methods, natives", [(0, 1), (1, 1), (2, 1), (3, 2), (6, 2),
                                               (7, 3), (11, 3), (40, 3)])
def test_about_the_square_root_of_the_methods(methods: int, natives: int) -> None:
    assert spec.natives_for(methods) == natives


def test_a_round_measures_native_three_times_spread_and_named() -> None:
    exp = _exp(["native", *METHODS], repeats=2)
    assert exp.natives_per_round == 3 and exp.to_dict()["natives"] == 3
    cases = plan.plan(exp)
    assert len(cases) == 2 * 2 * (1 + len(METHODS) + 2)
    r1 = [c for c in cases if c.repeat == 1]
    where = [i for i, c in enumerate(r1) if c.tunnel.kind == "native"]
    runs = [c.native_run for c in r1 if c.tunnel.kind == "native"]
    # each run measures both workloads, one after the other; run 1 first, the others a third
    # and two thirds of the way through, never between two cases of one method
    assert runs == [1, 1, 2, 2, 3, 3]
    assert where[:2] == [0, 1] and 4 <= where[2] <= 8 and 10 <= where[4] <= 14
    for i in where[2::2]:
        assert r1[i - 1].tunnel != r1[i + 2].tunnel
    ids = [c.case_id for c in r1 if c.tunnel.kind == "native"]
    assert ids[0].endswith("-native-stream-mtu1500-r1")
    assert ids[2].endswith("-native-n2-stream-mtu1500-r1")
    assert ids[5].endswith("-native-n3-latency-mtu1500-r1")
    assert r1[where[2]].to_dict()["native_run"] == 2 and "native_run" not in r1[0].to_dict()
    assert len({c.case_id for c in cases}) == len(cases)
    # a sequential round added later keeps every native run of the cases it keeps
    seq = _exp(["native", *METHODS])
    more = plan.next_round(seq, 3, 100, lambda c: c.tunnel.kind in ("native", "vxlan"))
    assert [(c.tunnel.label, c.native_run) for c in more if c.workload.name == "stream"] == [
        ("native", 1), ("vxlan", 1), ("native", 2), ("native", 3)]


def test_one_native_as_before_where_it_would_not_pay() -> None:
    two = _exp(["native", "vxlan", "wireguard"], repeats=1)   # 2 methods: sqrt(2) -> 1
    assert [c.case_id for c in plan.plan(two)] == [
        f"{i:04d}-{t}-{w}-mtu1500-r1" for i, (t, w) in enumerate(
            (t, w) for t in ("native", "vxlan", "wireguard") for w in ("stream", "latency"))]
    shaped = _exp(["native", *METHODS], repeats=1, rate="200mbit")   # native at the shaper's rate
    assert shaped.natives_per_round == 1
    cores = _exp(["native", *METHODS], repeats=1, cpus_per_site=[1, 2])   # an axis
    assert cores.natives_per_round == 1
    search = spec.build({"experiment": {"repeats": 1},
                         "tunnel": [{"kind": k} for k in ["native", *METHODS]],
                         "workload": [{"name": "loss-search"}]})
    assert search.natives_per_round == 1   # a loss search's native takes minutes
    asked = _exp(["native", *METHODS], repeats=1, natives=1)
    assert asked.natives_per_round == 1 and asked.to_dict()["natives"] == 1
    assert _exp(["native", "vxlan"], natives=4).natives_per_round == 4


@pytest.mark.parametrize("experiment, extra, says", [
    ({"natives": 0}, {}, "experiment.natives must be an integer from 1 to 9"),
    ({"natives": 2.5}, {}, "experiment.natives must be an integer from 1 to 9"),
    ({"natives": 2}, {"chain": {"path": ["router"]}},
     "experiment.natives 2: several natives per round need a pair or a mesh testbed without "
     "an axis, not a chain (leave natives out)"),
    ({"natives": 3, "rate": ["100mbit", "1gbit"], "repeats": 2}, {},
     "experiment.natives 3: several natives per round need a pair or a mesh testbed without "
     "an axis, not an RTT, loss or rate axis"),
])
def test_bad_natives_one_line(experiment: dict[str, object], extra: dict[str, object],
                              says: str) -> None:
    with pytest.raises(SpecError) as err:
        spec.build({"experiment": experiment, "tunnel": [{"kind": "native"},
                                                          {"kind": "vxlan"}], **extra})
    assert says in err.value.message and "\n" not in err.value.message


def test_cli_flag_and_resume_rebuild(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--tunnels", "native,vxlan", "--natives", "0", "--dry-run"]) == 2
    assert "--natives must be an integer from 1 to 9" in capsys.readouterr().err
    recorded = _exp(["native", *METHODS], repeats=2).to_dict()
    assert cli._spec_dict(recorded)["experiment"]["natives"] == 3
    del recorded["natives"]   # a campaign recorded before natives existed: one per round
    assert cli._spec_dict(recorded)["experiment"]["natives"] == 1


def test_the_sequential_rule_pairs_with_the_geometric_mean_of_the_round() -> None:
    def doc(label: str, rep: int, value: float, run: int = 1) -> dict[str, object]:
        case: dict[str, object] = {
            "tunnel": {"label": label, "kind": "native" if label == "native" else label},
            "workload": {"name": "stream", "label": "stream", "headline": ["throughput"]},
            "mtu": 1500, "offloads": {"name": "default"}, "repeat": rep}
        if run > 1:
            case["native_run"] = run
        return {"case": case, "status": "ok", "started": 0.0, "ended": 6.0,
                "metrics": {"throughput": {"value": value, "higher_is_better": True}}}
    docs = [doc("native", 1, 1000.0), doc("vxlan", 1, 900.0), doc("native", 1, 1210.0, 2),
            doc("native", 2, 800.0), doc("vxlan", 2, 700.0), doc("native", 2, 1250.0, 2)]
    obs = sequential.series_from_docs(docs)
    (s,) = obs.series
    assert dict(s.native) == pytest.approx({1: 1100.0, 2: 1000.0})
    assert dict(s.methods) == {"vxlan": {1: 900.0, 2: 700.0}}
    # what a further round costs: native's two runs of 6 s each, a method's one
    scen = ("stream", 1500, "default")
    assert obs.case_s() == {("native", scen): 12.0, ("vxlan", scen): 6.0}


def _two_natives(tmp_path: Path) -> tuple[data.Campaign, dict[int, list[float]],
                                                   dict[int, float]]:
    """The recorded `idle` campaign (native, vxlan; 3 rounds) with a second native run in each
    round, at a factor of the first that differs round by round."""
    root = tmp_path / "idle"
    shutil.copytree(DATA / "campaigns" / "idle", root)
    index = json.loads((root / "index.json").read_text())
    natives: dict[int, list[float]] = {}
    vx: dict[int, float] = {}
    for p in sorted((root / "cases").glob("*.json")):
        doc = json.loads(p.read_text())
        rep, value = doc["case"]["repeat"], doc["metrics"]["throughput"]["value"]
        if doc["case"]["tunnel"]["kind"] != "native":
            vx[rep] = value
            continue
        factor = {1: 1.3, 2: 0.8, 3: 1.1}[rep]
        second = json.loads(json.dumps(doc))
        cid = doc["case"]["id"].replace("-native-", "-native-n2-")
        second["case"].update(id=cid, native_run=2)
        second["metrics"]["throughput"]["value"] = value * factor
        second["series"]["throughput"] = [x * factor for x in doc["series"]["throughput"]]
        (root / "cases" / f"{cid}.json").write_text(json.dumps(second))
        entry = next(e for e in index["cases"] if e["id"] == doc["case"]["id"])
        index["cases"].append({**entry, "id": cid, "file": f"cases/{cid}.json"})
        natives[rep] = [value, value * factor]
    (root / "index.json").write_text(json.dumps(index))
    return data.load(root), natives, vx


def test_rows_and_advise_pair_with_the_geometric_mean_of_the_round(tmp_path: Path) -> None:
    c, natives, vx = _two_natives(tmp_path)
    logs = [math.log(vx[r] / math.sqrt(a * b)) for r, (a, b) in natives.items()]
    want = 100 * math.exp(statistics.fmean(logs))
    row = c.row("vxlan", ("stream", 1500, "default"), "throughput")
    nat = c.row("native", ("stream", 1500, "default"), "throughput")
    assert row is not None and nat is not None
    assert row.pct_of_native == pytest.approx(want)
    assert row.share is not None and row.share.n == 3
    assert nat.stats.n == 6 and nat.pct_of_native == 100.0   # every run in native's own row
    samples, notes = advise_collect.collect(c)
    assert "native measured 2 times in each round, spread through it: every share is against " \
        "the geometric mean of those runs" in notes
    assert [x for _, x in samples["vxlan"]["share"][1]] == pytest.approx(logs)
    assert [x for _, x in samples["native"]["share"][1]] == pytest.approx(
        [math.log(a / math.sqrt(a * b)) for a, b in natives.values()])   # run 1 only


def test_round_reference() -> None:
    assert round_reference([5.0]) == 5.0
    assert round_reference([100.0, 400.0]) == pytest.approx(200.0)
    assert round_reference([0.0, 4.0]) == 2.0   # not all positive: the plain mean
