"""tests/physics.py: the tolerance from recorded samples, record mode, and the refusals."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

import physics


def test_bound_is_mean_plus_minus_z_sd_never_narrower_than_the_extremes() -> None:
    values = [1.0, 1.1, 0.9, 1.05, 0.95] * 4
    b = physics.bound([values])
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    assert (b.mean, b.n) == (pytest.approx(mean), 20)
    assert b.sd == pytest.approx(sd)   # one sitting: the sample sd
    assert b.low == pytest.approx(mean - 3.29 * b.sd) and b.high == pytest.approx(mean + 3.29 * b.sd)
    # one far sample: the extremes widen the bound beyond 3.29 sd of the others
    skewed = [1.0] * 19 + [3.0]
    assert physics.bound([skewed]).high >= 3.0
    assert physics.bound([values]).holds(1.2, "both")
    assert not physics.bound([values]).holds(2, "both")
    assert physics.bound([values]).holds(0.1, "upper")
    assert not physics.bound([values]).holds(0.1, "lower")


def test_sittings_that_lie_apart_widen_the_bound() -> None:
    """Three sittings, each tight, their means 1 % apart: the sd is the pooled within-sitting
    variance plus the variance of the sittings' means (computed by hand here)."""
    groups = [[0.990, 0.991, 0.989], [1.000, 1.001, 0.999], [1.010, 1.011, 1.009]]
    b = physics.bound(groups)
    within = sum((v - statistics.fmean(g)) ** 2 for g in groups for v in g) / (9 - 3)
    between = statistics.variance([0.990, 1.000, 1.010])
    assert b.sd == pytest.approx((within + between) ** 0.5)
    one = physics.bound([[v for g in groups for v in g]])
    assert b.sd > one.sd * 0.99   # never narrower than pooling them as one sitting (here)
    assert b.low < 0.97 and b.high > 1.03   # 3.29 x ~0.01 around 1.0


def test_record_then_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(physics, "DATA", tmp_path)
    assert "is missing" in (physics.problem("f") or "")
    monkeypatch.setenv(physics.RECORD_ENV, "1")
    monkeypatch.setenv("TUNBENCH_PHYSICS_COMMAND", "scripts/record_physics.py -n 20 T")
    assert physics.problem("f") is None            # record mode records, never refuses
    for i in range(20):
        monkeypatch.setenv("TUNBENCH_PHYSICS_SITTING", f"s{i % 3}")
        assert physics.check("f", 100 + i % 3, 100, what="a model") == (100 + i % 3) / 100
        physics.check("g", 52.0 + i % 2, 50.0, excess=True)
    doc = json.loads((tmp_path / "f.json").read_text())
    assert doc["model"] == "a model" and len(doc["samples"]) == 20
    assert doc["recorded_with"] == ["scripts/record_physics.py -n 20 T"]
    monkeypatch.delenv(physics.RECORD_ENV)
    assert physics.problem("f") is None
    assert physics.check("f", 101, 100) == pytest.approx(1.01)
    assert physics.check("g", 52.5, 50.0, excess=True) == pytest.approx(2.5)
    with pytest.raises(AssertionError, match=r"f: measured 150 is 1.5000 of the model"):
        physics.check("f", 150, 100)
    with pytest.raises(AssertionError, match=r"g: measured 60 is 10.0000 over the model"):
        physics.check("g", 60, 50.0, excess=True)


def test_too_few_samples_and_a_bad_model_are_refused(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(physics, "DATA", tmp_path)
    (tmp_path / "f.json").write_text(json.dumps({"samples": [{"value": 1.0}] * 5}))
    assert "holds 5 samples, fewer than 20" in (physics.problem("f") or "")
    (tmp_path / "h.json").write_text(json.dumps({"samples": [{"value": 1.0, "sitting": "a"}] * 20}))
    assert "recorded in 1 sitting(s), fewer than 3" in (physics.problem("h") or "")
    with pytest.raises(AssertionError, match="holds 5 samples"):
        physics.check("f", 1.0, 1.0)
    with pytest.raises(AssertionError, match="against model 0"):
        physics.check("f", 1.0, 0)


def test_every_recorded_figure_has_enough_samples_and_a_model() -> None:
    files = sorted(physics.DATA.glob("*.json"))
    assert files
    for p in files:
        doc = json.loads(p.read_text())
        assert doc["figure"] == p.stem and doc["model"] and doc["recorded_with"], p
        assert len(doc["samples"]) >= physics.MIN_SAMPLES, p
        assert len(physics.sittings(p.stem)) >= physics.MIN_SITTINGS, p


def test_every_judged_figure_is_logged_for_a_later_sitting(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(physics, "DATA", tmp_path)
    monkeypatch.setenv(physics.RECORD_ENV, "1")
    for i in range(20):
        monkeypatch.setenv("TUNBENCH_PHYSICS_SITTING", f"s{i % 3}")
        physics.check("f", 100 + i % 3, 100)
    monkeypatch.delenv(physics.RECORD_ENV)
    log = tmp_path / "run.jsonl"
    monkeypatch.setenv(physics.LOG_ENV, str(log))
    physics.check("f", 101, 100, what="a model")
    with pytest.raises(AssertionError):
        physics.check("f", 150, 100, what="a model")
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(x["figure"], x["value"], x["model"]) for x in lines] == [
        ("f", pytest.approx(1.01), "a model"), ("f", pytest.approx(1.5), "a model")]
