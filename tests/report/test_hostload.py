"""The decision summary names other work on the host (report/hostload.py): from the figure
each case records (cpu.other_pct_of_one_core), on the CPU sections of two real cases and on a
recorded campaign given that figure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tunbench import runner
from tunbench.report import advise, data, hostload

DATA = Path(__file__).parent.parent / "data"


def _cpu(name: str) -> dict:
    cpu = json.loads((DATA / "cpu_other" / f"{name}.json").read_text())["cpu"]
    return {**cpu, "other_pct_of_one_core": runner.other_work(cpu)}


def test_note_counts_the_busy_cases_and_their_median() -> None:
    busy, quiet = _cpu("busy"), _cpu("quiet")
    text = hostload.note([busy, quiet, quiet])
    assert text is not None
    assert text.startswith(f"other work on this host during 1 of 3 cases (median "
                           f"{busy['other_pct_of_one_core']:.0f} % of a core")
    assert hostload.note([quiet, quiet]) is None
    assert hostload.note([{}, {"busy_avg": 3.0}]) is None   # recorded before the figure


def test_the_decision_summary_carries_the_note(tmp_path: Path) -> None:
    root = tmp_path / "idle"
    shutil.copytree(DATA / "campaigns" / "idle", root)
    cases = sorted((root / "cases").glob("*.json"))
    for i, p in enumerate(cases):
        doc = json.loads(p.read_text())
        doc["cpu"]["other_pct_of_one_core"] = 90.0 if i % 2 else 5.0
        p.write_text(json.dumps(doc))
    notes = advise.build([data.load(root)]).notes
    busy = sum(1 for i, _ in enumerate(cases) if i % 2)
    assert any(n.startswith(f"other work on this host during {busy} of {len(cases)} cases "
                            "(median 90 % of a core") for n in notes), notes
    # the recorded campaign as it is (no figure): no note
    assert not any(n.startswith("other work") for n in
                   advise.build([data.load(DATA / "campaigns" / "idle")]).notes)
