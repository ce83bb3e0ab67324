"""Workloads: every module in this package that defines WORKLOAD is registered by its name."""

from __future__ import annotations

import importlib
import pkgutil

from ..errors import SpecError
from .base import Context, Metric, Output, Workload, WorkloadParams

_REGISTRY: dict[str, type[Workload]] = {}


def registry() -> dict[str, type[Workload]]:
    if not _REGISTRY:
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if mod.name.startswith("_") or mod.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{mod.name}")
            wl = getattr(module, "WORKLOAD", None)
            if wl is not None:
                _REGISTRY[wl.name] = wl
    return _REGISTRY


def get(name: str) -> type[Workload]:
    reg = registry()
    if name not in reg:
        raise SpecError(f"unknown workload '{name}'",
                        f"known workloads: {', '.join(sorted(reg))}")
    return reg[name]


__all__ = ["Context", "Metric", "Output", "Workload", "WorkloadParams", "get", "registry"]
