"""Statistics against values computed by hand."""

from __future__ import annotations

import math
import statistics

import pytest

from tunbench.report import stats
from tunbench.results.records import CaseRecord


def _typed(cases: list[dict]) -> list[CaseRecord]:
    """Case documents as the report reads them: typed records (results/records.py)."""
    return [CaseRecord.from_doc(d) for d in cases]


def test_summary_known_values() -> None:
    s = stats.summarize([10.0, 12.0, 14.0, 16.0, 18.0])
    assert s.n == 5 and s.mean == 14.0 and s.median == 14.0
    assert s.std == pytest.approx(3.16227766, rel=1e-6)           # sample std
    # t(0.975, 4) = 2.776445; half width = 2.776445 * 3.1623 / sqrt(5) = 3.9264
    assert s.ci95_low == pytest.approx(14.0 - 3.926396, rel=1e-5)
    assert s.ci95_high == pytest.approx(14.0 + 3.926396, rel=1e-5)
    assert s.cv == pytest.approx(3.16227766 / 14.0, rel=1e-6)


def test_single_value_has_zero_width() -> None:
    s = stats.summarize([5.0])
    assert (s.n, s.std, s.ci95_low, s.ci95_high) == (1, 0.0, 5.0, 5.0)


def _case(label: str, kind: str, value: float, status: str = "ok") -> dict:
    return {"status": status, "case": {"id": f"{label}-{value}",
            "tunnel": {"label": label, "kind": kind}, "workload": {"name": "stream"},
            "mtu": 1500, "offloads": {"name": "default"}},
            "metrics": {"throughput": {"value": value, "unit": "Mbit/s",
                                       "higher_is_better": True}}}


def test_rows_percent_of_native_and_noise() -> None:
    cases = [_case("native", "native", v) for v in (100.0, 100.0)]
    cases += [_case("vxlan", "vxlan", v) for v in (60.0, 100.0)]
    cases.append(_case("vxlan", "vxlan", 1.0, status="failed"))
    rows = stats.rows(_typed(cases))
    assert [r.tunnel for r in rows] == ["native", "vxlan"]
    native, vx = rows
    assert native.pct_of_native == pytest.approx(100.0)
    # paired per round on the log scale: the geometric mean of 60/100 and 100/100
    assert vx.pct_of_native == pytest.approx(100 * math.sqrt(0.6 * 1.0))
    logs = [math.log(0.6), 0.0]
    half = 12.706205 * statistics.stdev(logs) / math.sqrt(2)     # t(0.975, 1)
    assert vx.share is not None and vx.share.n == 2
    assert (vx.share.ci_low, vx.share.ci_high) == pytest.approx(
        (100 * math.exp(statistics.fmean(logs) - half),
         100 * math.exp(statistics.fmean(logs) + half)), rel=1e-5)
    assert native.share is None             # the reference, not a measurement
    assert vx.stats.n == 2            # the failed case is not counted
    assert vx.noisy and not native.noisy
    js = stats.summary_json(cases, "x")
    assert js["failed_cases"] == ["vxlan-1.0"]
    e = js["entries"][1]
    for key in ("tunnel", "workload", "metric", "unit", "n", "mean", "median", "std",
                "ci95_low", "ci95_high", "pct_of_native", "share_of_native"):
        assert key in e
    share = e["share_of_native"]
    assert share["mean"] == pytest.approx(e["pct_of_native"]) and share["n"] == 2
    assert 0 < share["ci_low"] < share["mean"] < share["ci_high"]
    assert share["decision"] in ("different", "equivalent", "undecided")
    assert js["entries"][0]["share_of_native"] is None


def test_a_lower_bound_in_any_repeat_marks_the_row() -> None:
    cases = [_case("native", "native", v) for v in (100.0, 100.0)]
    cases[1]["metrics"]["throughput"]["bound"] = "lower"
    cases += [_case("vxlan", "vxlan", v) for v in (60.0, 70.0)]
    native, vx = stats.rows(_typed(cases))
    assert native.bound == "lower" and vx.bound is None
    assert stats.bound_mark(native) == "≥" and stats.bound_mark(vx) == ""
    entries = stats.summary_json(cases, "x")["entries"]
    assert [e["bound"] for e in entries] == ["lower", None]


def test_against_native_a_share_for_throughput_a_multiple_for_costs() -> None:
    def case(label: str, kind: str, tput: float, cost: float) -> dict:
        d = _case(label, kind, tput)
        d["metrics"]["cpu_per_gbit"] = {"value": cost, "unit": "% of a core per Gbit/s",
                                        "higher_is_better": False}
        return d
    cases = [case("native", "native", 1000.0, 8.0), case("wg", "wireguard", 250.0, 424.0)]
    by = {(r.tunnel, r.metric): r for r in stats.rows(_typed(cases))}
    assert stats.vs_native(by[("wg", "throughput")]) == "25.0%"
    assert stats.vs_native(by[("wg", "cpu_per_gbit")]) == "53.00×"
    assert stats.vs_native(by[("native", "cpu_per_gbit")]) == "1.00×"
