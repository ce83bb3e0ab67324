"""The report read through the typed records gives the same tables as before them: for every
recorded campaign under tests/data, the console summary, the HTML page without figures, the
statistics rows, the tidy export and the decision summary, and `compare` of a few pairs, are
built again and compared with what the report produced before the typed read side
(tests/data/report-golden, written by make_golden.py beside them)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "report-golden"


def _maker():
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "UTC")
    time.tzset()
    try:
        return _maker().everything()
    finally:
        mp.undo()
        time.tzset()


def test_every_recorded_campaign_has_its_golden_tables() -> None:
    names = {p.name for p in _maker().campaigns()}
    assert len(names) >= 17, names          # tests/data/campaigns/* and the agg campaign
    kept = {p.parent.name for p in GOLDEN.glob("*/summary.txt")}
    assert names == kept


def test_same_tables_as_before_the_typed_records(built: dict[str, str]) -> None:
    kept = {str(p.relative_to(GOLDEN)): p.read_text(encoding="utf-8")
            for p in GOLDEN.rglob("*") if p.is_file() and p.suffix != ".py"}
    assert set(built) == set(kept)
    differ = [rel for rel in sorted(built) if built[rel] != kept[rel]]
    assert not differ, f"{len(differ)} file(s) differ, first {differ[0]}"
