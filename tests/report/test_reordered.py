"""The take-away on spurious retransmits (report/takeaways.reordered): a recorded stream
campaign given each case's spurious_retransmits as the runner records it (from the sites' TCP
counters, metrics/tcpstat.py) names the methods whose retransmits were mostly reordering,
native first; below the threshold nothing is said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tunbench.report import data, takeaways

DATA = Path(__file__).parent.parent / "data"


def _campaign(tmp_path: Path, pct: dict[str, float]) -> data.Campaign:
    root = tmp_path / "idle"
    shutil.copytree(DATA / "campaigns" / "idle", root)
    for p in sorted((root / "cases").glob("*.json")):
        doc = json.loads(p.read_text())
        kind = doc["case"]["tunnel"]["kind"]
        if kind in pct and "retransmits" in doc["metrics"]:
            doc["metrics"]["spurious_retransmits"] = {
                "value": pct[kind], "unit": "% of retransmitted segments",
                "higher_is_better": False, "bound": None}
            p.write_text(json.dumps(doc))
    return data.load(root)


def test_mostly_spurious_named_native_first(tmp_path: Path) -> None:
    c = _campaign(tmp_path, {"native": 93.0, "vxlan": 96.0})
    takes = [t for t in takeaways.compute(c) if t.topic == "reordered"]
    assert len(takes) == 1, [t.text for t in takes]
    facts = takes[0].facts
    assert list(facts["spurious_pct"]) == ["native", "vxlan"]
    assert "native 93%, vxlan 96%" in takes[0].text
    assert "and so does every share of native" in takes[0].text


def test_below_the_threshold_or_unrecorded_nothing_is_said(tmp_path: Path) -> None:
    c = _campaign(tmp_path, {"native": 20.0, "vxlan": 49.0})
    assert not [t for t in takeaways.compute(c) if t.topic == "reordered"]
    recorded = data.load(DATA / "campaigns" / "idle")
    assert not [t for t in takeaways.compute(recorded) if t.topic == "reordered"]


def test_only_the_methods_over_the_threshold_are_named(tmp_path: Path) -> None:
    c = _campaign(tmp_path, {"native": 10.0, "vxlan": 80.0})
    take = next(t for t in takeaways.compute(c) if t.topic == "reordered")
    assert take.facts["spurious_pct"] == {"vxlan": 80.0}
    assert "native" not in take.text.split(":")[1] and "share of native" not in take.text
