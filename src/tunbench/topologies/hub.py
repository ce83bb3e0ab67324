"""hub: one hub site and N spoke sites, the tunnel kind brought up hub <-> every spoke, TCP
measured to one spoke and to all at once (hubcase.py, testbed/hub.py, testbed/hubhosts.py)."""

from __future__ import annotations

from typing import Any

from .. import tunnels
from ..testbed import hubspec
from ..testbed.hub import MAX_SPOKES
from .base import Topology, TopoNeeds, TopoParam


class Hub(Topology):
    name = "hub"
    summary = "one hub and N spokes: the hub's side of N tunnels (setup, memory, TCP)"
    chosen_by = '[testbed] kind = "hub" (--testbed hub)'
    params = (
        TopoParam("[testbed] kind", "--testbed", "pair", '"hub" for this topology'),
        TopoParam("[testbed] spokes", "--spokes", str(hubspec.DEFAULT_SPOKES),
                  f"spoke sites, 1..{MAX_SPOKES} (on hosts: the number of sN sites given, "
                  f"at most {hubspec.MAX_HOST_SPOKES})"),
        TopoParam("[sites] hub, s1..sN", "--site hub=TARGET --site s1=TARGET ...",
                  "namespaces here", "the hub and each spoke on a host of its own, over SSH"),
    )

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds(tools=("ip", "ping", "iperf3"),
                         kernel=("CONFIG_NET_NS", "CONFIG_VETH", "CONFIG_VXLAN"),
                         hosts="none (1 + N namespaces here), or 1 + N hosts over SSH")

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        return tunnels.hub_kinds()

    @classmethod
    def workloads(cls) -> tuple[str, ...] | None:
        return hubspec.HUB_WORKLOADS

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        return exp.hub is not None


TOPOLOGY = Hub
