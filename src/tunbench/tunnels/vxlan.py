"""vxlan: Linux kernel VXLAN (RFC 7348), point to point between the two sites' underlays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..params import out_of_range
from ..tbtun import hub as tbhub
from ..testbed.base import Site, Testbed
from ..testbed.hub import Hub
from ._kernel import link_pair, underlay_index
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

VXLAN_HEADER = 8


@dataclass(frozen=True)
class VxlanParams(TunnelParams):
    vni: int = field(default=42, metadata={"help": "VXLAN network identifier (1..16777215)"})
    port: int = field(default=4789, metadata={"help": "UDP destination port (IANA: 4789)"})
    underlay: Literal[4, 6] = field(default=4, metadata={"help": "underlay IP family: 4 or 6"})
    udp_csum: bool = field(default=False, metadata={
        "help": "compute outer UDP checksums (IPv4 underlay; IPv6 always sends zero)"})

    def validate(self) -> list[str]:
        return out_of_range(vni=(self.vni, 1, 2**24 - 1), port=(self.port, 1, 65535))


class Vxlan(TunnelDriver[VxlanParams]):
    kind = "vxlan"
    native_beside = True   # native beside it stays native (docs/methodology.md)
    carries = ("tcp", "udp", "l2")   # an Ethernet device (bridgeable)
    summary = "kernel VXLAN over UDP (RFC 7348)"
    Params = VxlanParams
    needs = {"": Needs(kernel=(KernelOption("CONFIG_VXLAN", "vxlan", "VXLAN tunnels"),))}
    hub_capable = True            # N kernel VXLAN devices on the hub, one per spoke
    chain_site_capable = True
    mesh_capable = True           # pair bring-up between two mesh sites (live-tested)
    chain_gateway = "device"

    @classmethod
    def hub_up(cls, h: Hub, params: VxlanParams, obj: str | None) -> dict[str, Any]:
        devs = tbhub.kernel_vxlan(h)
        return {"devices": len(devs), "created_with": "ip -batch (one vxlan device per spoke)"}

    @classmethod
    def overhead(cls, params: VxlanParams, family: int = 4) -> int:
        outer = IPV4_HEADER if family == 4 else IPV6_HEADER
        return ETH_HEADER + VXLAN_HEADER + UDP_HEADER + outer

    def up(self, tb: Testbed, params: VxlanParams) -> Endpoints:
        fam = params.underlay

        def attrs(site: Site, peer: Site) -> dict[str, str | int]:
            local, remote = self.underlay_addr(site, fam), self.underlay_addr(peer, fam)
            ends: dict[str, str | int] = (
                {"vxlan_local": local, "vxlan_group": remote} if fam == 4 else
                {"vxlan_local6": local, "vxlan_group6": remote,
                 "vxlan_udp_zero_csum6_tx": 0, "vxlan_udp_zero_csum6_rx": 0})
            return {"vxlan_id": params.vni, "vxlan_port": params.port,
                    "vxlan_udp_csum": int(params.udp_csum), "vxlan_link": underlay_index(site),
                    **ends}

        return link_pair(tb, "vxlan", "vx", mtu=self.tunnel_mtu(params, tb.underlay_mtu),
                         overhead=self.overhead(params, fam), attrs=attrs,
                         info={"vni": params.vni, "port": params.port, "underlay": fam})


DRIVER = Vxlan
