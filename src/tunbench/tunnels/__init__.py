"""Tunnel kinds: every module in this package that defines DRIVER is registered by its kind."""

from __future__ import annotations

from ..errors import SpecError
from ..registry import discover
from .base import Endpoints, TunnelDriver, TunnelParams

_REGISTRY: dict[str, type[TunnelDriver]] = {}


def registry() -> dict[str, type[TunnelDriver]]:
    if not _REGISTRY:
        _REGISTRY.update(discover(__name__, __path__, "DRIVER", "kind"))
    return _REGISTRY


def get(kind: str) -> type[TunnelDriver]:
    reg = registry()
    if kind not in reg:
        raise SpecError(f"unknown tunnel kind '{kind}'",
                        f"known kinds: {', '.join(sorted(reg))}; see `tunbench list`")
    return reg[kind]


__all__ = ["Endpoints", "TunnelDriver", "TunnelParams", "get", "registry"]
