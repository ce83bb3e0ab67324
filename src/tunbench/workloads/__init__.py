"""Workloads: every module in this package that defines WORKLOAD is registered by its name."""

from __future__ import annotations

from ..errors import SpecError
from ..registry import discover
from .base import Context, Metric, Output, Workload, WorkloadParams

_REGISTRY: dict[str, type[Workload]] = {}


def registry() -> dict[str, type[Workload]]:
    if not _REGISTRY:
        _REGISTRY.update(discover(__name__, __path__, "WORKLOAD", "name"))
    return _REGISTRY


def get(name: str) -> type[Workload]:
    reg = registry()
    if name not in reg:
        raise SpecError(f"unknown workload {name!r}",
                        f"known workloads: {', '.join(sorted(reg))}")
    return reg[name]


__all__ = ["Context", "Metric", "Output", "Workload", "WorkloadParams", "get", "registry"]
