"""router: a namespace that forwards IPv4 and IPv6 between its two segments (static routes),
decrementing the TTL / hop limit like any router. Nothing else: the reference hop.

`srv6_end = true` (between two gateways with tunnel = "srv6") makes it an SRv6 transit node:
it owns a `seg6local End` SID that the gateways list in their SRH, so the packets are steered
through it and the outer hop limit counts it (chain/srv6.py configures it with the gateways).
What the host lacks for SRv6 is asked once, of the gateway pair (a transit router without
one is refused as such).
"""

from __future__ import annotations

from . import srv6
from .base import Function, Hop, Param


class Router(Function):
    kind = "router"
    summary = "IP forwarding with static routes (TTL decremented); optionally an SRv6 End node"
    params = {
        "srv6_end": Param(bool, False, None, "true or false (true: an SRv6 transit End SID "
                          "between srv6 gateways)", "true"),
    }

    def counters(self, hop: Hop) -> dict[str, int]:
        if not hop.params.get("srv6_end"):
            return {}
        return srv6.counters(hop)


FUNCTION = Router
