"""What `tunbench advise` can rank by and what it knows of a method beyond its figures.

- FIGURES: every figure a ranking can be by (`--by`), what it compares, which way is better,
  and what to run when a campaign did not measure it (the one line of a refusal).
- declared(): what a method carries, whether it encrypts and whether its datapath is in the
  kernel, from the tunnel drivers' declarations (tunnels/base.py: `carries`, `encrypts`,
  `userspace`) as every case records them (caserecord.tunnel_identity; older files:
  results/upgrade.fill_v2), never from a list kept here; a chain's gateway tunnel counts too.
Pure functions over recorded case documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..results.records import CaseRecord
from .advise_names import CARRIES, LOSS_GOALS


@dataclass(frozen=True)
class FigureSpec:
    basis: str             # what the ranking compares, as the verdict names it
    higher_is_better: bool
    unit: str              # "%" of native, "×" native, "latency" (the metric's unit, added)
    run: str               # what to run to measure it (the hint of a refusal)


STREAM_RUN = "run the stream workload: tunbench run --workloads stream"
FIGURES: dict[str, FigureSpec] = {
    "throughput": FigureSpec("share of native throughput", True, "%", STREAM_RUN),
    "throughput-best": FigureSpec(
        "share of native throughput at its best stream count", True, "%",
        "run the stream workload at several stream counts: tunbench run --preset "
        "parallel-streams, or one [[workload]] per `streams` in an experiment file"),
    "ndr": FigureSpec("NDR packets/s as share of native", True, "%",
                      "run a loss search: tunbench run --workloads loss-search"),
    "pdr": FigureSpec("PDR packets/s as share of native", True, "%",
                      "run a loss search: tunbench run --workloads loss-search"),
    "rfc2544": FigureSpec("RFC 2544 loss-free packets/s as share of native", True, "%",
                          "run a loss search with method rfc2544 or both: tunbench run "
                          "--workloads loss-search"),
    "latency-p50": FigureSpec("latency added (p50)", False, "latency",
                              "run the latency workload: tunbench run --workloads latency"),
    "latency-p99": FigureSpec("latency added (p99)", False, "latency",
                              "run the latency workload: tunbench run --workloads latency"),
    "cpu": FigureSpec("CPU per Gbit/s against native's", False, "×", STREAM_RUN),
}
ALIASES = {"latency": "latency-p50"}


def canonical(by: str) -> str:
    return ALIASES.get(by, by)


# -- what a method is, from the drivers' declarations as the cases recorded them ----------------

@dataclass(frozen=True)
class Declared:
    encrypts: bool
    carries: tuple[str, ...] | None    # None: not recorded
    kernel: bool | None
    gateways: str | None = None        # a chain's gateway tunnel, as the report names it
    gateway_encrypts: bool = False
    gateway_kernel: bool | None = None


def gateway_of(case: CaseRecord) -> dict[str, Any] | None:
    """The tunnel a chain's gateways run between them (testbed.chain.gateway_tunnel), if any."""
    chain = case.testbed.get("chain") or {}
    gw = chain.get("gateway_tunnel")
    return gw if isinstance(gw, dict) and gw.get("kind") else None


def _record(t: dict[str, Any]) -> tuple[tuple[str, ...] | None, bool | None]:
    carries = t.get("carries")
    kernel = t.get("kernel_datapath")
    return (tuple(str(c) for c in carries) if isinstance(carries, list) else None,
            kernel if isinstance(kernel, bool) else None)


def declared(case: CaseRecord) -> Declared:
    """A case's method as its tunnel record says (written from the driver's `encrypts`,
    `carries` and `userspace` declarations; older files filled by results/upgrade.py), and a
    chain's gateway tunnel: a chain encrypts when its gateways do, carries what both carry,
    and runs in the kernel only when both do. The report asks no registry."""
    t = case.tunnel
    carries, kernel = t.carries, t.kernel_datapath
    base = Declared(t.encrypts, carries, kernel)
    gw = gateway_of(case)
    if gw is None:
        return base
    g_enc = bool(gw.get("encrypts"))
    g_carries, g_kernel = _record(gw)
    both = None if carries is None or g_carries is None else tuple(
        c for c in CARRIES if c in carries and c in g_carries)
    kern = None if kernel is None or g_kernel is None else kernel and g_kernel
    return Declared(base.encrypts or g_enc, both, kern, str(gw.get("label") or gw["kind"]),
                    g_enc, g_kernel)


# -- loss-search figures -----------------------------------------------------------------------

def loss_metrics(c: Any, case: CaseRecord) -> dict[str, tuple[str, str]]:
    """metric name -> (goal, frame size) of a case's loss-search packet rates (NDR, PDR,
    RFC 2544; dims goal and size, packets/s, no layer or percentile)."""
    out = {}
    for name in case.metrics:
        rec = c.metric(name)
        if rec is None or rec.base != "rate_pps" or rec.dims.get("goal") not in LOSS_GOALS \
                or "q" in rec.dims or "layer" in rec.dims:
            continue
        out[name] = (str(rec.dims["goal"]), str(rec.dims.get("size", "all")))
    return out
