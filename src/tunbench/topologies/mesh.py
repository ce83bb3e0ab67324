"""mesh: N sites (namespaces here on one underlay bridge), every listed pair measured in turn,
each pair with every tunnel kind and workload and its own native (testbed/meshspec.py for the
spec and the schedule, testbed/mesh.py for the testbed; docs/topologies.md)."""

from __future__ import annotations

from typing import Any

from .. import tunnels
from ..testbed import meshspec
from .base import Topology, TopoNeeds, TopoParam


class Mesh(Topology):
    name = "mesh"
    summary = "N sites, every pair measured one at a time; one N x N grid per figure"
    chosen_by = '[testbed] kind = "mesh" (--testbed mesh --sites N)'
    params = (
        TopoParam("[testbed] kind", "--testbed", "pair", '"mesh" for this topology'),
        TopoParam("[testbed] sites", "--sites", "none (required)",
                  f"sites s1..sN, 3..{meshspec.MAX_SITES}: namespaces here on one bridge"),
        TopoParam("[testbed] pairs", None, "all",
                  '"all" (N(N-1)/2 pairs) or a list like ["s1-s2", "s2-s3"]'),
        TopoParam("[testbed] directions", None, "one",
                  '"both": each pair also measured from its second site to its first'),
    )

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds(tools=("ip", "ping", "sysctl"),
                         kernel=("CONFIG_NET_NS", "CONFIG_VETH", "CONFIG_BRIDGE"),
                         hosts="none (N namespaces and a bridge namespace here); sites on "
                               "hosts over SSH are not built yet")

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        """The kinds whose drivers declare mesh_capable (none on hosts yet)."""
        return () if on_hosts else tunnels.mesh_kinds()

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        return getattr(exp, "mesh", None) is not None


TOPOLOGY = Mesh
