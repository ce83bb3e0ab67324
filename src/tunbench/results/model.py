"""The result file format, as typed records. docs/results.md documents every field; bump
FORMAT_VERSION on any incompatible change, say so there, and add the upgrader from the old
version to results/upgrade.py (the one reader, reader.py, refuses newer versions and
upgrades older ones).

Version 2 (this one) makes a case file describe itself: each metric is a record with a base
name and structured dimensions (`{"goal": "ndr", "size": "imix"}`, `{"q": 50}`) instead of
dimensions packed into its name, and the case records what its workload is judged by
(headline metrics, sweep parameter) and what its tunnel is (resolved implementation, display
name, whether it encrypts), so a reader never asks a live registry what a result means.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

FORMAT_VERSION = 2
CASE_FORMAT = "tunbench-case"
INDEX_FORMAT = "tunbench-campaign"

CASE_STATUSES = ("ok", "failed", "skipped")
# the label suffix of the cases a chain measures next to direct ones (topologies/chain.py sets
# it; sequential.py and the report read it: neither imports a topology): a native through the
# chain is a method measured against native direct, not the reference itself
VIA_CHAIN = " via chain"

# Dimension keys that qualify a measurement (which percentile, which search goal, frame size,
# layer, load); any other dimension of a metric is a point on an x axis (a sweep, e.g.
# {"streams": 8}) and has a number as its value. docs/results.md lists their meanings.
QUALIFIER_DIMS = ("q", "stat", "goal", "size", "layer", "load_pct")
Bound = Literal["lower"] | None


@dataclass(frozen=True)
class MetricRecord:
    """One metric of a case: `base` names what is measured ("throughput", "rate_pps",
    "tcp_rtt"), `dims` says at which point (`{"q": 99}`); the key under which the case stores
    it is an identifier only, never parsed."""
    base: str
    value: float | None
    unit: str
    higher_is_better: bool = True
    # "lower": the measurement reached its tool's limit, the true value is at least `value`
    bound: Bound = None
    dims: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "value": self.value, "unit": self.unit,
                "higher_is_better": self.higher_is_better, "bound": self.bound,
                "dims": dict(self.dims)}

    @classmethod
    def from_dict(cls, key: str, d: dict[str, Any]) -> MetricRecord:
        value = d.get("value")
        return cls(str(d.get("base") or key),
                   None if value is None or not math.isfinite(float(value)) else float(value),
                   str(d.get("unit", "")), bool(d.get("higher_is_better", True)),
                   "lower" if d.get("bound") == "lower" else None, dict(d.get("dims") or {}))

    @property
    def direction(self) -> Literal["higher", "lower"]:
        """Which way is better: 'higher' (a rate) or 'lower' (a delay, a cost)."""
        return "higher" if self.higher_is_better else "lower"

    @property
    def qualifiers(self) -> dict[str, Any]:
        return {k: v for k, v in self.dims.items() if k in QUALIFIER_DIMS}

    @property
    def points(self) -> dict[str, Any]:
        """The sweep dimensions: {"streams": 8} of a metric measured at 8 streams."""
        return {k: v for k, v in self.dims.items() if k not in QUALIFIER_DIMS}


@dataclass(frozen=True)
class WorkloadRecord:
    """What a case's workload is judged by, recorded at write time from its driver."""
    headline: tuple[str, ...]       # metric keys the summary shows first, best first
    sweep_param: str | None         # the parameter an experiment may give as a list
    # numeric parameters that place a case on a sweep's x axis when they vary across a
    # campaign (streams, processes, ...): the report splits and plots by them
    axes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"headline": list(self.headline), "sweep_param": self.sweep_param,
                "axes": list(self.axes)}


@dataclass(frozen=True)
class TunnelRecord:
    """What a case's tunnel is, resolved on the host that ran it."""
    impl: str | None                # "go", "libipsec", "netdev"; None: a kind with one
    encrypts: bool
    display: str                    # the name every table shows: "wireguard (go)"
    carries: tuple[str, ...] = ("tcp", "udp")   # tunnels.base.CARRIES: tcp, udp, l2
    kernel_datapath: bool = True    # False: the datapath is a userspace process
    # an aggregating kind: {"param": its flush-timeout parameter, "baseline": the kind its
    # trade-off is measured against} (TunnelDriver.aggregates); None for any other kind
    aggregation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"impl": self.impl, "encrypts": self.encrypts, "display": self.display,
                "carries": list(self.carries), "kernel_datapath": self.kernel_datapath,
                "aggregation": self.aggregation}


BEST_OF_SECONDS = 4


def paired_value(value: float | None, higher_is_better: bool,
                 series: list[Any] | None) -> float | None:
    """The value a share of native pairs per round (docs/methodology.md, "Estimator"): for a
    rate recorded with its per-second series (iperf3's 1 s intervals, tunbench-rpc's
    transactions each second), the best second; otherwise the value itself.

    Why the best second: on a shared host (a cloud VM) the whole machine runs at about half
    speed for stretches of 0.5 s to tens of seconds, whatever runs; a sender's CPU profile in
    a slow second is the same as in a fast one, it only moves half the bytes. A case that
    falls into such a stretch pulls its round's share 30-50 points down, and which case it hits
    decides the ranking. The best second of each case is what the method does when the host
    lets it; the mean over the window stays the case's throughput in every table.

    Only over a window of at least BEST_OF_SECONDS seconds: the best of 2 or 3 seconds that
    swing both ways (no slow stretch, just noise) spreads more than their mean (recorded
    campaign `basic`, 2 s: sd of the per-round log share 0.077 against 0.010)."""
    if value is None or not by_best_second(higher_is_better, series):
        return value
    return max(_finite(series))


def own_share(paired_native: Mapping[str, Any] | None, metric: str) -> float | None:
    """The share of native a case measured itself (docs/methodology.md, "Native beside the
    method"): the ratio of the means of its method's bursts and of native's bursts, taken in
    turn within seconds of each other with the tunnel up (the case file's `paired_native`,
    workloads/stream.py). None when the case did not pair native beside it for `metric`,
    or a side has no positive mean."""
    p = (paired_native or {}).get(metric)
    if not isinstance(p, Mapping):
        return None
    method, native = _finite(p.get("method")), _finite(p.get("native"))
    if not method or not native:
        return None
    m, n = statistics.fmean(method), statistics.fmean(native)
    return m / n if m > 0 and n > 0 else None


def log_share(value: float | None, reference: float | None,
              own: float | None = None) -> float | None:
    """A round's ln(share of native) for one case: its own share (own_share) when it paired
    native beside it, else ln(value / the round's native reference); None when neither has
    two positive sides. The one rule every reader pairs by."""
    if own is not None:
        return math.log(own) if own > 0 else None
    if value is None or reference is None or value <= 0 or reference <= 0:
        return None
    return math.log(value / reference)


def round_reference(values: Sequence[float]) -> float:
    """Native's figure in one round from its runs in that round (plan.spread_natives): their
    geometric mean, the mean on the log scale each share of native is taken on; the
    arithmetic mean if one is not positive."""
    if len(values) == 1:
        return values[0]
    if all(v > 0 for v in values):
        return math.exp(statistics.fmean(math.log(v) for v in values))
    return statistics.fmean(values)


def _finite(series: list[Any] | None) -> list[float]:
    return [float(x) for x in series or () if isinstance(x, (int, float)) and math.isfinite(x)]


def by_best_second(higher_is_better: bool, series: list[Any] | None) -> bool:
    """Whether paired_value takes this figure's best second (a rate with its per-second
    series over at least BEST_OF_SECONDS seconds). Not a delay: a round trip's lowest 1-s p50
    spreads as much between methods as its p50 over the window (docs/methodology.md, "What a
    round pairs")."""
    return higher_is_better and len(_finite(series)) >= BEST_OF_SECONDS


# A case whose best second is below SLOWED_BELOW of the median of the same case's best
# seconds over the campaign's rounds ran slowed by the host for its whole window (every
# second of it, or the best second would be a fast one): left out of every share of native,
# so one such case cannot move a ranking, and named in the decision summary (its Mbit/s
# stays in the tables). Needs SLOWED_MIN_ROUNDS rounds of that case: with two, which one is
# slow cannot be told. Measured here (make run mr13/mr14, 2026-11-28): a round's best second
# is within 10 % of its case's median but for the slow stretches of the host, at 0.5-0.65 of
# it ("What a round pairs", docs/methodology.md).
SLOWED_BELOW = 0.75
SLOWED_MIN_ROUNDS = 3
K = TypeVar("K", bound=Hashable)


def slowed_rounds(values: Mapping[K, float]) -> set[K]:
    """The rounds (keys) of one case, by its best seconds over the campaign's rounds, that
    the host slowed for the whole window (SLOWED_BELOW of the median); empty with fewer
    than SLOWED_MIN_ROUNDS rounds."""
    vals = [v for v in values.values() if v > 0]
    if len(vals) < SLOWED_MIN_ROUNDS:
        return set()
    limit = SLOWED_BELOW * statistics.median(vals)
    return {r for r, v in values.items() if 0 < v < limit}


_INDEX, _ROUND = re.compile(r"^\d+-"), re.compile(r"-r\d+$")


def case_stem(case_id: str) -> str:
    """A case's id without its index and round ('0026-native-stream-mtu1500-r2' ->
    'native-stream-mtu1500'): the same case in every round (plan.py names them)."""
    return _ROUND.sub("", _INDEX.sub("", case_id))


def metric_records(doc: dict[str, Any]) -> dict[str, MetricRecord]:
    """A case document's metrics as typed records, by key."""
    return {k: MetricRecord.from_dict(k, m) for k, m in (doc.get("metrics") or {}).items()
            if isinstance(m, dict)}


def case_document(*, case: dict[str, Any], status: str, started: float, ended: float,
                  testbed: dict[str, Any] | None, tunnel: dict[str, Any] | None,
                  metrics: dict[str, MetricRecord], series: dict[str, list[float]],
                  cpu: dict[str, Any] | None, counters: dict[str, Any] | None,
                  raw: dict[str, Any], notes: list[str], error: str | None,
                  error_log: str | None, offloads: dict[str, Any] | None) -> dict[str, Any]:
    """`case` carries `workload` with a WorkloadRecord's fields and `tunnel` with a
    TunnelRecord's (the runner merges them in)."""
    assert status in CASE_STATUSES
    return {
        "format": CASE_FORMAT, "format_version": FORMAT_VERSION,
        "case": case, "status": status, "error": error, "error_log": error_log,
        "started": started, "ended": ended,
        "testbed": testbed, "tunnel": tunnel,
        "metrics": {k: m.to_dict() for k, m in metrics.items()}, "series": series,
        "cpu": cpu, "datapath_counters": counters, "offloads": offloads,
        "raw": raw, "notes": notes,
    }
