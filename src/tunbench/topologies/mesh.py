"""mesh: N sites (namespaces here on one underlay bridge), every listed pair measured in turn,
each pair with every tunnel kind and workload and its own native (testbed/meshspec.py for the
spec and the schedule, testbed/mesh.py for the testbed; docs/topologies.md)."""

from __future__ import annotations

from typing import Any

from .. import tunnels
from ..errors import SpecError
from ..testbed import mesh, meshspec
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger
from .base import Topology, TopoNeeds, TopoParam


class Mesh(Topology):
    name = "mesh"
    summary = "N sites, every pair measured one at a time; one N x N grid per figure"
    chosen_by = '[testbed] kind = "mesh" (--testbed mesh --sites N)'
    resume_reruns_failed = True   # a failed pair is a hole in the grid: --resume fills it
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

    @classmethod
    def check(cls, exp: Any, case: Any, hosts: Any = None) -> None:
        """N within 3..MAX_SITES, the case's pair two of its sites, MTU 1500, no hosts."""
        spec = exp.mesh
        if not 3 <= spec.sites <= meshspec.MAX_SITES:
            raise SpecError(f"a mesh of {spec.sites} sites cannot be built",
                            f"give --sites 3..{meshspec.MAX_SITES}")
        names = spec.site_names()
        pair = tuple(case.pair or ())
        if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(names):
            raise SpecError(f"mesh pair {'-'.join(map(str, pair)) or 'none'} is not two "
                            f"sites of s1..s{spec.sites}",
                            "measure the pairs the mesh's schedule plans")
        if case.mtu != mesh.MTU:
            raise SpecError(f"the mesh's underlay MTU is {mesh.MTU}, not {case.mtu}",
                            "leave --mtu / experiment.mtus out")
        if hosts is not None:
            raise SpecError("a mesh runs on this host's namespaces only so far",
                            "leave [sites] / --site out")

    @classmethod
    def sections(cls, exp: Any, case: Any) -> dict[str, Any]:
        """The case's pair and its slot in the schedule."""
        if case.pair is None:
            return {}
        return {"mesh": {"pair": list(case.pair), "colour": case.colour, "parallel": False,
                         "sites": exp.mesh.sites}}

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger,
              hosts: Any = None) -> Testbed:
        """The whole mesh (bridge + every site), the case's pair as sites a and b."""
        cls.check(exp, case, hosts)
        return mesh.build(run_id, ledger, exp.mesh, case.pair, mtu=case.mtu)


TOPOLOGY = Mesh
