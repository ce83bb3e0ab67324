"""geneve: Linux kernel Geneve (RFC 8926), point to point between the two sites' underlays.

Created with pyroute2 (kind "geneve": IFLA_GENEVE_ID / REMOTE / REMOTE6 / PORT). The kernel's
Geneve device has no local-address attribute: it listens on the port on every address of the
site and sends to `remote`. No options are sent, so the header is the fixed 8 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..params import out_of_range
from ..testbed.base import Site, Testbed
from ._kernel import link_pair
from .base import (
    ETH_HEADER,
    IPV4_HEADER,
    IPV6_HEADER,
    UDP_HEADER,
    Endpoints,
    KernelOption,
    Needs,
    TunnelDriver,
    TunnelParams,
)

GENEVE_HEADER = 8  # without options


@dataclass(frozen=True)
class GeneveParams(TunnelParams):
    vni: int = field(default=42, metadata={"help": "Geneve virtual network identifier "
                                                   "(0..16777215)"})
    port: int = field(default=6081, metadata={"help": "UDP destination port (IANA: 6081)"})
    underlay: Literal[4, 6] = field(default=4, metadata={"help": "underlay IP family: 4 or 6"})

    def validate(self) -> list[str]:
        return out_of_range(vni=(self.vni, 0, 2**24 - 1), port=(self.port, 1, 65535))


class Geneve(TunnelDriver[GeneveParams]):
    kind = "geneve"
    carries = ("tcp", "udp", "l2")   # an Ethernet device (bridgeable)
    summary = "kernel Geneve over UDP (RFC 8926), no options"
    Params = GeneveParams
    needs = {"": Needs(kernel=(KernelOption("CONFIG_GENEVE", "geneve", "Geneve tunnels"),))}

    @classmethod
    def overhead(cls, params: GeneveParams, family: int = 4) -> int:
        outer = IPV4_HEADER if family == 4 else IPV6_HEADER
        return ETH_HEADER + GENEVE_HEADER + UDP_HEADER + outer

    def up(self, tb: Testbed, params: GeneveParams) -> Endpoints:
        fam = params.underlay

        def attrs(site: Site, peer: Site) -> dict[str, str | int]:
            remote = self.underlay_addr(peer, fam)
            ends: dict[str, str | int] = (
                {"geneve_remote": remote} if fam == 4 else
                {"geneve_remote6": remote, "geneve_udp_zero_csum6_tx": 0,
                 "geneve_udp_zero_csum6_rx": 0})
            return {"geneve_id": params.vni, "geneve_port": params.port, **ends}

        return link_pair(tb, "geneve", "gnv", mtu=self.tunnel_mtu(params, tb.underlay_mtu),
                         overhead=self.overhead(params, fam), attrs=attrs,
                         info={"vni": params.vni, "port": params.port, "underlay": fam})


DRIVER = Geneve
