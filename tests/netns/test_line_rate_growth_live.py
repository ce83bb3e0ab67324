"""line-rate-processes grown for real between two namespaces (native, 2 s steps): every step
is recorded as throughput@processesK, the stop follows the gain rule on the measured steps,
the chosen step's figures are the case's. On a tbf-shaped underlay one process already fills
the link: a physics test judges the first step's share of the shaped rate against its recorded
spread (a single TCP stream into a tbf queue measured for 2 s on a loaded 2-core host comes 3-5 %
under the shaped rate; CI saw 94.6 then 104.3 Mbit/s, a 10 % "gain" of a second process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import physics
from tunbench import spec
from tunbench.report import data
from tunbench.runner import run_campaign
from tunbench.workloads import line_rate_processes as lr

pytestmark = pytest.mark.correctness


def _run(tmp: Path, experiment: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    exp = spec.build({
        "experiment": {"repeats": 1, "duration": 2, "warmup": 1, **experiment},
        "tunnel": [{"kind": "native"}],
        "workload": [{"name": "line-rate-processes", **params}]}, "test")
    outcome = run_campaign(exp, tmp)
    (doc,) = outcome.store.read_cases()
    assert doc["status"] == "ok", doc.get("error")
    return doc


def _check_steps(doc: dict[str, Any], min_gain: float) -> list[tuple[int, float]]:
    growth = doc["raw"]["growth"]
    m = {k: v["value"] for k, v in doc["metrics"].items()}
    steps = [(s["processes"], s["mbps"]) for s in growth["steps"]]
    ks = [k for k, _ in steps]
    assert ks == lr.step_counts(growth["max_processes"])[:len(ks)]
    for k, t in steps:                       # every step is its own metric (a sweep figure)
        assert m[f"throughput@processes{k}"] == pytest.approx(t) and t > 0
    # growth went on while each step gained >= min_gain %, and stopped at the first that did not
    for i in range(1, len(steps) - 1):
        assert lr.gain_pct(steps[i - 1][1], steps[i][1]) >= min_gain
    k, plateau = lr.choose(steps, min_gain)
    assert growth["chosen_processes"] == k == m["processes"]
    assert m["throughput"] == pytest.approx(dict(steps)[k])
    assert max(t for _, t in steps) == pytest.approx(plateau)
    raw = doc["raw"]["iperf3"]                # the chosen step's own processes and series
    assert raw["layout"] == [1] * k and len(raw["processes"]) == k
    assert doc["series"]["throughput"] == raw["aggregate"]["series_mbps"]
    return steps


def test_grows_over_native(tmp_path: Path) -> None:
    doc = _run(tmp_path, {}, {"max_processes": 4, "step_duration": 2})
    steps = _check_steps(doc, 5.0)
    assert len(steps) >= 2
    growth = doc["raw"]["growth"]
    assert growth["plateau_reached"] or [k for k, _ in steps] == [1, 2, 4]
    assert doc["cpu"]["warmup_excluded_samples"] >= 1
    # the report draws the steps as a sweep over processes
    (sw,) = [s for s in data.sweeps(data.load(tmp_path)) if s.param == "processes"]
    assert sw.workload == "line-rate-processes"
    assert {k: v[0] for k, v in sw.points["throughput"]["native"].items()} == dict(steps)


@pytest.mark.physics("tbf_one_tcp_process_vs_rate")
def test_shaped_link_one_process_fills_it(tmp_path: Path) -> None:
    """On a 100 Mbit/s tbf one TCP process already fills the link: the growth rule is applied
    to the steps as measured (correctness, _check_steps), and the first step's share of the
    shaped rate is judged against its recorded spread. Whether a second step then gains less
    than min_gain is that spread's consequence, not asserted: a 2 s step on a loaded 2-core
    host came 3-5 % under the rate, so the second one could 'gain' 10 %."""
    doc = _run(tmp_path, {"rate": "100mbit"}, {"max_processes": 8, "min_gain": 10.0})
    steps = _check_steps(doc, 10.0)
    assert steps[0][0] == 1 and len(steps) >= 2
    assert doc["metrics"]["line_rate_pct"]["value"] == pytest.approx(
        100 * doc["metrics"]["throughput"]["value"] / doc["raw"]["line_rate"]["mbps"], rel=1e-6)
    # one-sided: a loaded host only takes throughput away (the spread was recorded while other
    # suites ran); above the rate is tbf's bucket, not this test's question
    physics.check("tbf_one_tcp_process_vs_rate", steps[0][1], 100.0, side="lower",
                  what="the tbf rate, 100 Mbit/s")
