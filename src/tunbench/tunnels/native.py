"""native: no tunnel. Traffic goes over the underlay itself; the baseline of every ratio."""

from __future__ import annotations

from ..testbed.base import Testbed
from .base import Endpoints, TunnelDriver, TunnelParams


class Native(TunnelDriver[TunnelParams]):
    kind = "native"
    summary = "the underlay itself, no encapsulation (baseline)"
    hub_capable = True            # the hub's baseline: the spokes' underlay paths as they are
    chain_site_capable = True
    mesh_capable = True           # pair bring-up between two mesh sites (live-tested)

    @classmethod
    def overhead(cls, params: TunnelParams, family: int = 4) -> int:
        return 0

    def up(self, tb: Testbed, params: TunnelParams) -> Endpoints:
        return Endpoints(a4=tb.a.underlay4, b4=tb.b.underlay4, a6=tb.a.underlay6,
                         b6=tb.b.underlay6, mtu=tb.underlay_mtu, overhead=0,
                         a_ifname=tb.a.underlay_if, b_ifname=tb.b.underlay_if,
                         rx_ifnames=(tb.b.underlay_if,))


DRIVER = Native
