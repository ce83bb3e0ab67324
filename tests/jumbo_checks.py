"""The MTU take-away's assertions, shared by the recorded MTU campaign's report test
(tests/report/test_report.py) and the live jumbo campaign (tests/netns/test_jumbo_live.py):
the MTU figures are drawn, the take-away states each tunnel's share of native at both MTUs as
the case files give it, and calls a ranking change significant only when the order flips
and the 95% confidence intervals are apart at both MTUs (a single run has none: never)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from scipy import stats as sps


def values(root: Path, tunnel: str, metric: str, mtu: int = 1500) -> list[float]:
    out = []
    for p in sorted((root / "cases").glob("*.json")):
        d = json.loads(p.read_text())
        if (d["status"] == "ok" and d["case"]["tunnel"]["label"] == tunnel
                and d["case"]["mtu"] == mtu):
            out.append(float(d["metrics"][metric]["value"]))
    return out


def paired(root: Path, tunnel: str, metric: str, mtu: int = 1500) -> dict[int, float]:
    """Round -> the value that round pairs against native's: a rate's best second when the
    case recorded its per-second series, else the value (docs/methodology.md, "Estimator")."""
    out = {}
    for p in sorted((root / "cases").glob("*.json")):
        d = json.loads(p.read_text())
        if (d["status"] == "ok" and d["case"]["tunnel"]["label"] == tunnel
                and d["case"]["mtu"] == mtu):
            series = (d.get("series") or {}).get(metric) or []
            out[d["case"]["repeat"]] = float(max(series) if len(series) >= 4
                                             else d["metrics"][metric]["value"])
    return out


def share(root: Path, tunnel: str, metric: str, mtu: int = 1500) -> float:
    """The share of native: the geometric mean over the rounds of the paired ratios."""
    n, v = paired(root, "native", metric, mtu), paired(root, tunnel, metric, mtu)
    return 100 * math.exp(statistics.fmean(math.log(x / n[r]) for r, x in v.items() if r in n))


def ci(v: list[float]) -> tuple[float, float]:
    m, s = statistics.fmean(v), statistics.stdev(v)
    h = sps.t.ppf(0.975, len(v) - 1) * s / len(v) ** 0.5
    return m - h, m + h


def overlap(a: list[float], b: list[float]) -> bool:
    """The 95% CIs of two means overlap; with fewer than 2 values there is no CI, so nothing
    is told apart (True)."""
    if len(a) < 2 or len(b) < 2:
        return True
    (la, ha), (lb, hb) = ci(a), ci(b)
    return not (ha < lb or hb < la)


def check_jumbo(root: Path, rep: Any, mtus: tuple[int, int] = (1500, 9000),
                workload: str = "stream") -> Any:
    """Assert the report `rep` built from campaign `root` shows the MTU comparison of
    native and vxlan; returns the jumbo take-away."""
    lo, hi = mtus
    names = {f.name for f in rep.figures}
    assert {f"mtu-{workload}-throughput", f"series-throughput-{workload}-{lo}",
            f"series-throughput-{workload}-{hi}"} <= names, sorted(names)
    jumbo = next(t for t in rep.takeaways if t.topic == "jumbo")
    assert jumbo.facts["mtus"] == (lo, hi) and jumbo.facts["workload"] == workload
    for mtu in mtus:
        assert f"{share(root, 'vxlan', 'throughput', mtu):.1f}% " \
               f"at MTU {mtu}" in jumbo.text.replace("of native at", "at"), jumbo.text
    a = {m: (values(root, "native", "throughput", m), values(root, "vxlan", "throughput", m))
         for m in mtus}
    flipped = (statistics.fmean(a[lo][0]) > statistics.fmean(a[lo][1])) != \
              (statistics.fmean(a[hi][0]) > statistics.fmean(a[hi][1]))
    significant = flipped and not overlap(*a[lo]) and not overlap(*a[hi])
    assert jumbo.facts["change"] == ("significant" if significant else
                                     "not-significant" if flipped else "none")
    return jumbo
