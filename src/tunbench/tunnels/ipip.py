"""ipip: Linux kernel IPv4-in-IPv4 (RFC 2003), 20 bytes per packet, inner IPv4 only.

Created with pyroute2 (kind "ipip": IFLA_IPIP_LOCAL / REMOTE / LINK / TTL).
`sit` (IPv6 in IPv4) reuses this module with kind "sit".
"""

from __future__ import annotations

from typing import ClassVar

from ..testbed.base import Site, Testbed
from ._kernel import link_pair, underlay_index
from .base import IPV4_HEADER, Endpoints, KernelOption, Needs, TunnelDriver, TunnelParams

TTL = 64


class Ipip(TunnelDriver[TunnelParams]):
    kind = "ipip"
    summary = "kernel IPv4-in-IPv4 (RFC 2003), inner IPv4 only"
    link_kind: ClassVar[str] = "ipip"
    suffix: ClassVar[str] = "ipip"
    needs = {"": Needs(kernel=(KernelOption("CONFIG_NET_IPIP", "ipip", "IPIP tunnels"),))}
    inner_families = (4,)

    @classmethod
    def family(cls, params: TunnelParams) -> int:
        return 4

    @classmethod
    def overhead(cls, params: TunnelParams, family: int = 4) -> int:
        return IPV4_HEADER

    def up(self, tb: Testbed, params: TunnelParams) -> Endpoints:
        k = self.link_kind

        def attrs(site: Site, peer: Site) -> dict[str, object]:
            return {f"{k}_local": site.underlay4, f"{k}_remote": peer.underlay4,
                    f"{k}_link": underlay_index(site), f"{k}_ttl": TTL}

        # one inner family only (ipip: IPv4, sit: IPv6); the other's addresses stay empty
        return link_pair(tb, k, self.suffix, mtu=self.tunnel_mtu(params, tb.underlay_mtu),
                         overhead=IPV4_HEADER, attrs=attrs, families=self.inner_families,
                         info={"underlay": 4, "inner": list(self.inner_families)})


DRIVER = Ipip
