"""ipip: Linux kernel IPv4-in-IPv4 (RFC 2003), 20 bytes per packet, inner IPv4 only.

Created with pyroute2 (kind "ipip": IFLA_IPIP_LOCAL / REMOTE / LINK / TTL).
`sit` (IPv6 in IPv4) reuses this module with kind "sit".
"""

from __future__ import annotations

from typing import ClassVar

from ..capabilities import Missing
from ..testbed import names
from ..testbed.base import Testbed
from ._kernel import add_link, address_and_up, kernel_needs, underlay_index
from .base import IPV4_HEADER, Endpoints, TunnelDriver, TunnelParams, inner_addrs

TTL = 64


class Ipip(TunnelDriver):
    kind = "ipip"
    summary = "kernel IPv4-in-IPv4 (RFC 2003), inner IPv4 only"
    link_kind: ClassVar[str] = "ipip"
    suffix: ClassVar[str] = "ipip"
    option: ClassVar[tuple[str, str]] = ("CONFIG_NET_IPIP", "ipip")
    feature: ClassVar[str] = "IPIP tunnels"
    inner_families = (4,)

    @classmethod
    def family(cls, params: TunnelParams) -> int:
        return 4

    @classmethod
    def requirements(cls, params: TunnelParams) -> list[Missing]:
        return kernel_needs(cls.feature, [cls.option])

    @classmethod
    def overhead(cls, params: TunnelParams, family: int = 4) -> int:
        return IPV4_HEADER

    def up(self, tb: Testbed, params: TunnelParams) -> Endpoints:
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        a4, b4, a6, b6 = inner_addrs(0)
        ifname = names.link_name(tb.run_id, self.suffix)
        k = self.link_kind
        for site, peer, my4, my6 in ((tb.a, tb.b, a4, a6), (tb.b, tb.a, b4, b6)):
            add_link(tb, site, ifname, k, **{f"{k}_local": site.underlay4,
                                             f"{k}_remote": peer.underlay4,
                                             f"{k}_link": underlay_index(site), f"{k}_ttl": TTL})
            address_and_up(site, ifname, mtu, my4 if 4 in self.inner_families else None,
                           my6 if 6 in self.inner_families else None)
        if 4 in self.inner_families:
            return Endpoints(a4=a4, b4=b4, mtu=mtu, overhead=IPV4_HEADER, a_ifname=ifname,
                             b_ifname=ifname, info={"underlay": 4, "inner": [4],
                                                    "created_with": "pyroute2"})
        # IPv6 inside only: no inner IPv4 addresses (a4/b4 empty); runs use inner family 6
        return Endpoints(a4="", b4="", a6=a6, b6=b6, mtu=mtu, overhead=IPV4_HEADER,
                         a_ifname=ifname, b_ifname=ifname,
                         info={"underlay": 4, "inner": [6], "created_with": "pyroute2"})


DRIVER = Ipip
