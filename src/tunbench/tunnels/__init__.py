"""Tunnel kinds: every module in this package that defines DRIVER is registered by its kind."""

from __future__ import annotations

import importlib
import pkgutil

from ..errors import SpecError
from .base import Endpoints, TunnelDriver, TunnelParams

_REGISTRY: dict[str, type[TunnelDriver]] = {}


def registry() -> dict[str, type[TunnelDriver]]:
    if not _REGISTRY:
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if mod.name.startswith("_") or mod.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{mod.name}")
            driver = getattr(module, "DRIVER", None)
            if driver is not None:
                _REGISTRY[driver.kind] = driver
    return _REGISTRY


def get(kind: str) -> type[TunnelDriver]:
    reg = registry()
    if kind not in reg:
        raise SpecError(f"unknown tunnel kind '{kind}'",
                        f"known kinds: {', '.join(sorted(reg))}; see `tunbench list`")
    return reg[kind]


__all__ = ["Endpoints", "TunnelDriver", "TunnelParams", "get", "registry"]
