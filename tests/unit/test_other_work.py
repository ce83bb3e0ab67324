"""The CPU a case's host spent on other work during the measurement (runner.other_work), on
the CPU sections of two real cases: a native stream case beside three of the developers'
test processes (nice 19, about one core) and one on an otherwise idle host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunbench import runner

DATA = Path(__file__).parent.parent / "data" / "cpu_other"


def cpu(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())["cpu"]


@pytest.mark.parametrize("name", ["busy", "quiet"])
def test_other_work_is_all_cores_busy_less_the_cases_processes(name: str) -> None:
    c = cpu(name)
    ours = sum(p["pct_of_one_core"] for p in c["processes"].values())
    assert runner.other_work(c) == pytest.approx(max(0.0, c["busy_avg"] * 2 - ours), abs=0.05)


def test_the_busy_host_reads_about_a_core_the_idle_one_nearly_none() -> None:
    # both cores busy, the case's own processes (iperf3, ksoftirqd) about 85 % of one core:
    # the rest, about 115 % of a core, was the test processes beside it
    assert runner.other_work(cpu("busy")) > 100.0
    # the idle host: 146 % busy, the case's processes 139 %: about 7 % (this process,
    # softirq work charged to no tracked process)
    assert runner.other_work(cpu("quiet")) < 10.0


def test_without_per_core_figures_there_is_no_figure() -> None:
    assert runner.other_work({"busy_avg": 50.0, "cores": {"cpu": {}}}) is None
    assert runner.other_work({}) is None
