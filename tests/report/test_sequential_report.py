"""The sequential design's record on a recorded campaign (tests/data/campaigns/kinds: native,
vxlan, wireguard-go, IPsec, ovs-vxlan; two rounds of a real `tunbench run`): the rule ranks its
case files, and the report names every unsettled pair under the decision summary."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tunbench import sequential
from tunbench.report import build
from tunbench.results import reader


def test_kinds_campaign_after_two_rounds(campaign: Callable[[str], Path]) -> None:
    root = campaign("kinds")
    docs = reader.read_campaign(root).cases   # as the runner reads them (upgraded)
    obs = sequential.series_from_docs(docs)
    assert obs.rounds == 2 and obs.measured_s > 0
    # case files written before the headline was recorded: the workload's own declaration
    raw = [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]
    assert [s.metric for s in sequential.series_from_docs(raw).series] == ["throughput"]
    (ranking,) = [sequential.rank(s) for s in obs.series]
    assert ranking.metric == "throughput" and ranking.order[:2] == ("native", "vxlan")
    pairs = {(d.a, d.b): d for d in ranking.decisions}
    # the 40x gap measured twice with one degree of freedom: not yet decided (docs/methodology)
    assert pairs[("vxlan", "ovs-vxlan")].verdict == "undecided"
    # a budget that is spent: the rule stops and names what is open, with numbers
    step = sequential.next_step([ranking], obs.rounds, obs.measured_s, obs.case_s(),
                                budget_s=obs.measured_s + 1)
    assert step.stop == sequential.BUDGET
    rec = sequential.record([ranking], step, obs.measured_s, min_rounds=2, max_rounds=20,
                            budget_s=obs.measured_s + 1, history=[])
    assert rec["unsettled"] and all(isinstance(p["n"], int) for p in rec["unsettled"])
    index = json.loads((root / "index.json").read_text())
    index["sequential"] = rec
    (root / "index.json").write_text(json.dumps(index))
    page = build.build(root).html.read_text()
    assert "id=sequential" in page and "Unsettled" in page
    assert "stopped: the measurement budget is spent" in page
    for p in rec["unsettled"]:
        assert sequential.pair_text(p).replace("&", "&amp;") in page.replace("&#x27;", "'")
    # whether what is left open is only close pairs: a paragraph above the list
    line = sequential.apart_line(rec["unsettled"])
    assert f"<p class=meta>{line[0].upper() + line[1:]}.</p>" in page
    assert "<li>open pairs" not in page
