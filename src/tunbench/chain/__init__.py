"""Chains of network functions between the two sites (docs/chains.md).

`site a -> [functions] -> wan -> [functions] -> site b`, each function its own namespace:
spec.py reads `[chain]` of an experiment file, build.py makes the namespaces, segments and
routes (the two-site testbed with no function is the existing one), hops.py measures each
hop (counters, TTL, latency). One module per function kind, registered here.
"""

from __future__ import annotations

from ..errors import SpecError
from .base import Function
from .firewall import Firewall
from .gateway import Gateway
from .nat import Nat
from .router import Router
from .wan import Wan

REGISTRY: dict[str, type[Function]] = {f.kind: f for f in (Router, Firewall, Nat, Wan,
                                                             Gateway)}


def get(kind: str) -> type[Function]:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise SpecError(f"unknown function kind {kind!r}",
                        f"known: {', '.join(sorted(REGISTRY))}") from None
