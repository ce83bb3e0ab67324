"""router: a namespace that forwards IPv4 and IPv6 between its two segments (static routes),
decrementing the TTL / hop limit like any router. Nothing else: the reference hop."""

from __future__ import annotations

from .base import Function


class Router(Function):
    kind = "router"
    summary = "IP forwarding with static routes (TTL decremented)"


FUNCTION = Router
