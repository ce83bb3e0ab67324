"""gre: Linux kernel GRE over IPv4 (RFC 2784/2890), L3 (IP in GRE), optional key.

Created with pyroute2 (kind "gre": IFLA_GRE_LOCAL / REMOTE / LINK / TTL, and with a key
IFLA_GRE_IKEY / OKEY with the KEY bit in IFLA_GRE_IFLAGS / OFLAGS). `gretap` (L2 GRE) reuses
this module with kind "gretap", which adds an inner Ethernet header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..testbed.base import Site, Testbed
from ._kernel import link_pair, underlay_index
from .base import IPV4_HEADER, Endpoints, KernelOption, Needs, TunnelDriver, TunnelParams

GRE_HEADER = 4      # flags + protocol type
GRE_KEY_FIELD = 4   # present when a key is set
GRE_KEY_FLAG = 0x2000  # GRE_KEY in the flags word (pyroute2 encodes it big-endian)
GRE_TTL = 64


@dataclass(frozen=True)
class GreParams(TunnelParams):
    key: int | None = field(default=None, metadata={
        "help": "GRE key (RFC 2890), 0..4294967295; unset: no key field"})

    def validate(self) -> list[str]:
        if self.key is not None and not 0 <= self.key < 2**32:
            return [f"key {self.key} out of range (0..4294967295)"]
        return []


def gre_overhead(params: GreParams) -> int:
    return IPV4_HEADER + GRE_HEADER + (GRE_KEY_FIELD if params.key is not None else 0)


def gre_needs(feature: str) -> dict[str, Needs]:
    return {"": Needs(kernel=(KernelOption("CONFIG_NET_IPGRE_DEMUX", "gre", feature),
                              KernelOption("CONFIG_NET_IPGRE", "ip_gre", feature)))}


class Gre(TunnelDriver[GreParams]):
    kind = "gre"
    summary = "kernel GRE over IPv4, L3 (IP in GRE), optional key"
    Params = GreParams
    link_kind: ClassVar[str] = "gre"
    suffix: ClassVar[str] = "gre"
    inner_eth: ClassVar[int] = 0
    needs = gre_needs("GRE tunnels (ip_gre)")

    @classmethod
    def family(cls, params: GreParams) -> int:
        return 4

    @classmethod
    def overhead(cls, params: GreParams, family: int = 4) -> int:
        return cls.inner_eth + gre_overhead(params)

    def up(self, tb: Testbed, params: GreParams) -> Endpoints:
        key = params.key

        def attrs(site: Site, peer: Site) -> dict[str, object]:
            out: dict[str, object] = {
                "gre_local": site.underlay4, "gre_remote": peer.underlay4,
                "gre_link": underlay_index(site), "gre_ttl": GRE_TTL}
            if key is not None:
                out.update(gre_ikey=key, gre_okey=key,
                           gre_iflags=GRE_KEY_FLAG, gre_oflags=GRE_KEY_FLAG)
            return out

        return link_pair(tb, self.link_kind, self.suffix,
                         mtu=self.tunnel_mtu(params, tb.underlay_mtu),
                         overhead=self.overhead(params), attrs=attrs,
                         info={"key": key, "underlay": 4})


DRIVER = Gre
