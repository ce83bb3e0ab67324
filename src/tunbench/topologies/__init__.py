"""Topologies: every module in this package that defines TOPOLOGY is registered by its name
(as tunnel kinds and workloads are: registry.discover). See base.py for the contract."""

from __future__ import annotations

from typing import Any

from ..errors import SpecError
from ..registry import discover
from .base import Topology, TopoNeeds, TopoParam

_REGISTRY: dict[str, type[Topology]] = {}


def registry() -> dict[str, type[Topology]]:
    if not _REGISTRY:
        _REGISTRY.update(discover(__name__, __path__, "TOPOLOGY", "name"))
    return _REGISTRY


def get(name: str) -> type[Topology]:
    reg = registry()
    if name not in reg:
        raise SpecError(f"unknown topology {name!r}",
                        f"known topologies: {', '.join(sorted(reg))}; see `tunbench list "
                        "--topologies`")
    return reg[name]


def of(exp: Any, through_chain: bool = True) -> type[Topology]:
    """The one topology a case of `exp` runs on (`through_chain`: the case goes through the
    experiment's chain; False for a chain campaign's direct cases)."""
    found = [t for _, t in sorted(registry().items()) if t.chosen(exp, through_chain)]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} topologies claim the case: "
                             f"{', '.join(t.name for t in found) or 'none'}")
    return found[0]


__all__ = ["TopoNeeds", "TopoParam", "Topology", "get", "of", "registry"]
