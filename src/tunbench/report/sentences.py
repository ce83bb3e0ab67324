"""The pieces every take-away sentence is built from (report/takeaways.py and the modules whose
take-aways it gathers: vs_native, peers, hops): the Takeaway record and how numbers, metrics,
units and scenarios read in a sentence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import metrics
from .data import Campaign, Scenario


@dataclass(frozen=True)
class Takeaway:
    topic: str   # share-of-native, cpu-per-gbit, jumbo, scaling, scale-out, latency,
    #              on-wire, one-core, reordered, noisy, chain
    text: str
    facts: dict[str, Any] = field(default_factory=dict)


def _single(a: Any, b: Any) -> bool:
    """A single run on either side: no confidence interval, so nothing can be called
    (in)distinguishable; sentences then give the numbers and say so."""
    return bool(a.n < 2 or b.n < 2)


def num(v: float) -> str:
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def metric_name(c: Campaign, metric: str) -> str:
    """A metric as a sentence names it: the catalogue's name (report/metrics.py), never its
    key, lower-case inside a sentence unless it starts with an acronym ('TCP RTT p50')."""
    return metrics.in_sentence(c.display(metric))


def unit(c: Campaign, metric: str, recorded: str) -> str:
    """The unit as the tables show it (µs, packets/s, % of one core per Gbit/s)."""
    return c.unit_label(metric, recorded)


def times(pct: float) -> str:
    """A share of native (in %) as a multiple: what a cost or a delay reads as (2.36×)."""
    return f"{pct / 100:.2f}×"


def count(x: Any, param: str) -> str:
    """'1 stream', '4 streams'."""
    return f"{x} {param[:-1] if x == 1 and param.endswith('s') else param}"


def where(c: Campaign, scen: Scenario) -> str:
    wl, mtu, off = scen
    txt = f"{wl} at MTU {mtu}"
    return txt + ("" if off == "default" else f" with offloads {off}")
