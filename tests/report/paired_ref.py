"""The reference computation of a share of native, straight from the case files and
independent of report/decide.py: per round, ln(method / native in that round) of the value a
round pairs (a rate recorded with its per-second series: its best second; otherwise the
metric's value); the geometric mean and the back-transformed Student-t 95% interval
(docs/methodology.md, "Estimator")."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from scipy import stats as sps


def docs(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]


def _streams(d: dict[str, Any]) -> int:
    return int((d["case"]["workload"].get("params") or {}).get("streams", 1))


def paired(d: dict[str, Any], metric: str) -> float:
    """The value a case's round pairs against native's, from the case file alone."""
    m = d["metrics"][metric]
    series = (d.get("series") or {}).get(metric) or []
    if m.get("higher_is_better", True) and len(series) >= 4:
        return float(max(series))
    return float(m["value"])


def own(d: dict[str, Any], metric: str) -> float | None:
    """The share a case measured itself, native's bursts beside its own (the case file's
    `paired_native`): the mean of its bursts over the mean of native's; None without."""
    p = (d.get("paired_native") or {}).get(metric)
    if not p:
        return None
    return statistics.fmean(p["method"]) / statistics.fmean(p["native"])


def slowed(ok: list[dict[str, Any]], metric: str) -> set[str]:
    """Ids of the cases whose best second is below 0.75 of the median best second of the same
    case (its id without index and round) over the rounds, given at least 3 rounds: the host
    slowed them for the whole window and they pair with nothing."""
    by: dict[str, dict[str, float]] = {}
    for d in ok:
        series = (d.get("series") or {}).get(metric) or []
        if (d["metrics"][metric].get("higher_is_better", True) and len(series) >= 4
                and own(d, metric) is None):   # its own share does not rest on its window
            stem = d["case"]["id"].split("-", 1)[1].rsplit("-r", 1)[0]
            by.setdefault(stem, {})[d["case"]["id"]] = float(max(series))
    return {i for vals in by.values() if len(vals) >= 3
            for i, v in vals.items() if v < 0.75 * statistics.median(vals.values())}


def log_ratios(root: Path, label: str, metric: str, mtu: int = 1500,
               streams: int | None = None) -> dict[int, float]:
    """Round (repeat) -> ln(value / native's value in that round), for the cases of the
    recorded tunnel `label`, or ln(its own share) where it measured native beside it (`own`,
    with or without native's case in that round); a case the host slowed throughout
    (`slowed`) is left out."""
    ok = [d for d in docs(root) if d["status"] == "ok" and d["case"]["mtu"] == mtu
          and metric in d["metrics"] and (streams is None or _streams(d) == streams)]
    gone = slowed(ok, metric)
    ok = [d for d in ok if d["case"]["id"] not in gone]
    nat = {d["case"]["repeat"]: paired(d, metric) for d in ok
           if d["case"]["tunnel"]["kind"] == "native"
           and not d["case"]["tunnel"]["label"].endswith(" via chain")}
    out = {}
    for d in ok:
        rep, mine = d["case"]["repeat"], own(d, metric)
        if d["case"]["tunnel"]["label"] != label:
            continue
        if mine is not None:
            out[rep] = math.log(mine)
        elif rep in nat:
            out[rep] = math.log(paired(d, metric) / nat[rep])
    return out


def share(logs: list[float], scale: float = 100.0) -> tuple[float, float | None, float | None]:
    """(geometric mean, CI low, CI high) × scale; no interval for a single round."""
    m = statistics.fmean(logs)
    if len(logs) < 2:
        return scale * math.exp(m), None, None
    h = sps.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return scale * math.exp(m), scale * math.exp(m - h), scale * math.exp(m + h)


def of(root: Path, label: str, metric: str, mtu: int = 1500, streams: int | None = None,
       scale: float = 100.0) -> tuple[float, float | None, float | None]:
    return share(list(log_ratios(root, label, metric, mtu, streams).values()), scale)
