"""Experiment presets shipped with tunbench: TOML files reproducing the study's figures.

`tunbench run --preset NAME [--scale F]`; `tunbench list` shows them; copy one (its path is in
`tunbench list --json`) and edit it to make your own experiment file. `--scale` shrinks the
study's durations and repeats for a quick run, with sane minimums (and below 1 coarsens a loss
search's resolution, at most to 5 %).
"""

from __future__ import annotations

import copy
import math
import tomllib
from importlib import resources
from typing import Any

from ..errors import SpecError

MIN_DURATION = 2.0    # seconds per measurement after scaling
MIN_REPEATS = 1
MAX_QUICK_RESOLUTION_PCT = 5.0   # the coarsest loss-search resolution --scale makes


def names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".toml"))


def path(name: str) -> str:
    return str(resources.files(__name__) / f"{name}.toml")


def describe(name: str) -> str:
    """The preset's first comment line."""
    text = (resources.files(__name__) / f"{name}.toml").read_text()
    first = next((ln for ln in text.splitlines() if ln.startswith("#")), "# ")
    return first.lstrip("# ").strip()


def load(name: str) -> dict[str, Any]:
    if name not in names():
        raise SpecError(f"--preset: unknown preset {name!r}", f"known presets: {', '.join(names())}")
    return tomllib.loads((resources.files(__name__) / f"{name}.toml").read_text())


def scale(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """Durations and repeats times `factor` (duration >= 2 s, repeats >= 1; the warm-up stays
    but never exceeds half the measurement)."""
    if not (isinstance(factor, (int, float)) and 0 < factor <= 10):
        raise SpecError(f"--scale {factor!r} must be a number above 0 and at most 10",
                        "e.g. --scale 0.05 for a quick run, 1 for the study's full durations")
    out = copy.deepcopy(data)
    exp = out.setdefault("experiment", {})
    if not isinstance(exp, dict):
        return out   # spec.build names the problem
    dur, reps, warm = (exp.get("duration", 10.0), exp.get("repeats", 3),
                       exp.get("warmup", 1.0))
    if not (_finite(dur) and _finite(warm) and isinstance(reps, int)
            and not isinstance(reps, bool) and dur > 0
            and reps >= 1 and warm >= 0):
        return out   # invalid: left as written for spec.build to name, never clamped valid
    exp["duration"] = max(MIN_DURATION, round(float(dur) * factor, 1))
    exp["repeats"] = max(MIN_REPEATS, int(round(int(reps) * factor)))
    exp["warmup"] = float(min(float(warm), math.floor(exp["duration"] / 2)))
    if factor < 1:
        _coarser_searches(out.get("workload"), factor)
    return out


def _coarser_searches(workloads: Any, factor: float) -> None:
    """A quick run also searches coarser: a loss search's resolution divided by the factor
    (at most MAX_QUICK_RESOLUTION_PCT), so the binary search takes fewer trials (0.01 % at
    full scale is ~14 halvings, 1 % (--scale 0.01) ~7, 5 % (--scale 0.002 or less) ~5)."""
    if not isinstance(workloads, list):
        return
    for w in workloads:
        res = w.get("resolution_pct") if isinstance(w, dict) else None
        if isinstance(res, (int, float)) and _finite(res) and res > 0:
            w["resolution_pct"] = min(max(float(res), MAX_QUICK_RESOLUTION_PCT),
                                      round(float(res) / factor, 4))


def _finite(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
