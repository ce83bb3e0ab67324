"""Physics tests: a measured figure against a model, with a tolerance taken from the figure's
measured spread on this machine.

Every live test is one of two kinds (tests/conftest.py refuses a live test that says neither):

- `@pytest.mark.correctness`: asserts what the system did (bytes arrived intact, counters
  moved, objects created and gone, the right refusal printed). Never a rate, latency or ratio
  against a fixed bound (tests/unit/test_test_kinds.py reads every live test and refuses one).
- `@pytest.mark.physics("figure", ...)`: compares figures with a model through `check()` below.
  Each figure is a dimensionless ratio (measured / model), or for an additive model (a timer's
  wake-up on top of its timeout) the excess measured - model in the figure's unit, whose
  spread was recorded on this machine: tests/data/physics/<figure>.json holds at least MIN_SAMPLES recorded values, the
  model it is a ratio to, and how it was recorded (scripts/record_physics.py, which re-runs the
  test itself in record mode).

The tolerance: the recorded samples' mean +- Z sd, Z = 3.29 (a normally distributed figure falls
outside less than once in 1000 runs), never narrower than the recorded extremes. The samples come
from at least MIN_SITTINGS sittings (separate invocations of the recorder, at different times),
and sd counts both the spread within a sitting and how far the sittings' means lie apart: a
figure recorded in one sitting looked 5x tighter than the next sitting showed (the nft limit's
loss: 20 samples within 0.2 %, then 0.5 % off in the next make test). A one-sided model (a
shaper cannot deliver more than its rate) checks one side only.

Record mode (TUNBENCH_PHYSICS_RECORD=1, set by the recorder): check() appends the value to the
figure's file instead of judging it. With TUNBENCH_PHYSICS_LOG=FILE (make test-repeat sets it
per run) every figure judged is also written there, one JSON line each; `scripts/record_physics.py
--import FILE...` adds such a run as a sitting, so the spread also comes from the suite's own
order of tests, not only from the test run alone.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "physics"
MIN_SAMPLES = 20
MIN_SITTINGS = 3
Z = 3.29            # two-sided normal quantile for a false alarm below 1/1000
RECORD_ENV = "TUNBENCH_PHYSICS_RECORD"
LOG_ENV = "TUNBENCH_PHYSICS_LOG"   # judging mode too: each figure measured, one JSON line
SIDES = ("both", "upper", "lower")


def path(figure: str) -> Path:
    return DATA / f"{figure}.json"


def load(figure: str) -> dict[str, object]:
    with open(path(figure)) as f:
        doc: dict[str, object] = json.load(f)
    return doc


def samples(figure: str) -> list[float]:
    return [float(s["value"]) for s in load(figure)["samples"]]  # type: ignore[union-attr, index]


def sittings(figure: str) -> list[list[float]]:
    """The recorded values grouped by sitting (samples without one share a sitting)."""
    groups: dict[str, list[float]] = {}
    for s in load(figure)["samples"]:  # type: ignore[attr-defined]
        groups.setdefault(str(s.get("sitting", "")), []).append(float(s["value"]))
    return list(groups.values())


@dataclass(frozen=True)
class Bound:
    low: float
    high: float
    mean: float
    sd: float
    n: int

    def holds(self, value: float, side: str) -> bool:
        if side == "upper":
            return value <= self.high
        if side == "lower":
            return value >= self.low
        return self.low <= value <= self.high


def bound(groups: list[list[float]]) -> Bound:
    """mean +- Z sd of the recorded values (grouped by sitting), widened to their extremes; sd
    adds the pooled variance within the sittings and the variance of the sittings' means."""
    values = [v for g in groups for v in g]
    mean = statistics.fmean(values)
    within = [(v - statistics.fmean(g)) ** 2 for g in groups for v in g]
    dof = len(values) - len(groups)
    var = sum(within) / dof if dof > 0 else 0.0
    means = [statistics.fmean(g) for g in groups]
    if len(means) > 1:
        var += statistics.variance(means)
    sd = math.sqrt(var)
    return Bound(min(mean - Z * sd, min(values)), max(mean + Z * sd, max(values)), mean, sd,
                 len(values))


def problem(figure: str) -> str | None:
    """Why the figure's data cannot judge a test (None when it can)."""
    p = path(figure)
    if recording():
        return None
    if not p.exists():
        return f"no recorded spread for physics figure {figure!r}: {p} is missing " \
               f"(record it: scripts/record_physics.py -n {MIN_SAMPLES} TEST_ID)"
    try:
        n = len(samples(figure))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{p} is unreadable ({e})"
    if n < MIN_SAMPLES:
        return f"{p} holds {n} samples, fewer than {MIN_SAMPLES} " \
               f"(record more: scripts/record_physics.py -n {MIN_SAMPLES - n} TEST_ID)"
    k = len(sittings(figure))
    if k < MIN_SITTINGS:
        return f"{p} was recorded in {k} sitting(s), fewer than {MIN_SITTINGS} " \
               f"(record another at another time: scripts/record_physics.py -n 5 TEST_ID)"
    return None


def recording() -> bool:
    return os.environ.get(RECORD_ENV) == "1"


def forget(figures: set[str]) -> None:
    """Record mode with TUNBENCH_PHYSICS_FRESH=1: the figures' earlier samples are dropped."""
    if recording() and os.environ.get("TUNBENCH_PHYSICS_FRESH") == "1":
        for figure in figures:
            path(figure).unlink(missing_ok=True)


def _append(figure: str, value: float, model: str) -> None:
    p = path(figure)
    doc: dict[str, object] = (load(figure) if p.exists()
                              else {"figure": figure, "model": model, "samples": []})
    doc["model"] = model
    command = os.environ.get("TUNBENCH_PHYSICS_COMMAND", "")
    commands = doc.setdefault("recorded_with", [])
    if command and command not in commands:   # type: ignore[operator]
        commands.append(command)   # type: ignore[attr-defined]
    doc["samples"].append({"value": value,  # type: ignore[attr-defined]
                           "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "machine": os.environ.get("TUNBENCH_PHYSICS_MACHINE", ""),
                           "sitting": os.environ.get("TUNBENCH_PHYSICS_SITTING", "")})
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1) + "\n")


def check(figure: str, measured: float, model: float, *, side: str = "both",
          what: str = "", excess: bool = False) -> float:
    """Judge measured / model (with `excess`: measured - model) against the figure's recorded
    spread, or record it. Returns that figure. `what` says what the model is, for the record
    and the failure message."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}")
    if not (math.isfinite(measured) and math.isfinite(model) and (excess or model > 0)):
        raise AssertionError(f"{figure}: measured {measured!r} against model {model!r}")
    ratio = measured - model if excess else measured / model
    log = os.environ.get(LOG_ENV)
    if log:   # make test-repeat keeps what each run measured: a sitting to import later
        with open(log, "a") as f:
            f.write(json.dumps({"figure": figure, "value": ratio, "model": what,
                                "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                "test": os.environ.get("PYTEST_CURRENT_TEST", "")}) + "\n")
    if recording():
        _append(figure, ratio, what)
        return ratio
    why = problem(figure)
    assert why is None, why
    b = bound(sittings(figure))
    assert b.holds(ratio, side), (
        f"{figure}: measured {measured:.6g} is {ratio:.4f} {'over' if excess else 'of'} the "
        f"model ({what or model}), "
        f"outside [{b.low:.4f}, {b.high:.4f}] ({side}) from {b.n} recorded runs "
        f"(mean {b.mean:.4f}, sd {b.sd:.4f}; {path(figure).relative_to(DATA.parents[1])})")
    return ratio
