"""chain: network functions between the two sites (router, firewall, nat, wan, gateway), each
in its own namespace (chain/, docs/chains.md); here, or between two hosts across a wan."""

from __future__ import annotations

from typing import Any

from .. import chain as functions
from .. import tunnels
from ..chain import build as chain_build
from ..chain import gateway
from ..chain import hops as chain_hops
from ..chain import hosts as chain_hosts
from ..errors import SpecError
from ..remote.transport import SshOptions
from ..results.model import VIA_CHAIN
from ..testbed import topology
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger
from .base import Slot, Topology, TopoNeeds, TopoParam, check_mtu
from .pair import open_sites


class Chain(Topology):
    name = "chain"
    summary = "functions between the sites, each a namespace; gateway pairs terminate a tunnel"
    chosen_by = "[chain] path = [...]"
    params = (
        TopoParam("[chain] path", None, "none",
                  "the functions from site a to site b, by name or kind ("
                  + ", ".join(sorted(functions.REGISTRY)) + "); [chain.NAME] tables set "
                  "their kind and parameters"),
        TopoParam("[chain] direct", None, "false",
                  "also run every case without the chain, to set the chain against it"),
        TopoParam("[sites] a, b", "--site a=TARGET --site b=TARGET", "namespaces here",
                  "between two hosts: the path needs a wan function (the segment between "
                  "the hosts)"),
    )

    @classmethod
    def needs(cls) -> TopoNeeds:
        tools = ["ip", *(t for f in functions.REGISTRY.values() for t in f.tools)]
        return TopoNeeds(tools=tuple(dict.fromkeys(tools)),
                         kernel=("CONFIG_NET_NS", "CONFIG_VETH"),
                         hosts="none (namespaces here), or 2 hosts over SSH with a wan "
                               "between them")

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        """At the sites; a gateway pair terminates gateway_kinds()."""
        if on_hosts:
            return tunnels.chain_site_kinds()
        return tuple(sorted(tunnels.registry()))

    @classmethod
    def gateway_kinds(cls) -> tuple[str, ...]:
        return gateway.built()

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        return exp.hub is None and getattr(exp, "mesh", None) is None and exp.chain is not None and through_chain

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {**super().describe(), "gateway_kinds": list(cls.gateway_kinds())}

    @classmethod
    def requirements(cls, exp: Any) -> list[str]:
        """The tools of the path's functions, here (on hosts: asked of them in `open`)."""
        return chain_hops.requirements([h.kind for h in exp.chain.hops])

    @classmethod
    def open(cls, exp: Any, ssh: SshOptions) -> topology.Topology:
        """Sites a and b over SSH as the pair opens them, each also checked for the chain's
        functions and its carrier between the hosts. A chain between hosts never changes a
        host's own links (its segments are namespaces); its direct reference (`direct =
        true`) is the plain hosts testbed, which may."""
        if not exp.chain.hops:
            return open_sites(exp, ssh)
        return open_sites(exp, ssh, tools=chain_hosts.tools(exp.chain),
                          kernel=chain_hosts.kernel(exp.chain), own_links=exp.chain.direct)

    @classmethod
    def slots(cls, exp: Any) -> tuple[Slot, ...]:
        """With `direct = true` each round twice: first direct (the plain two-site testbed,
        the pair's; tunnels under their own labels), then through the chain (labels
        "<label> via chain"), so every table shows the chain as a share of direct measured in
        the same round."""
        if exp.chain.direct:
            return (Slot("direct"), Slot("chain", label_suffix=VIA_CHAIN))
        return (Slot(),)

    @classmethod
    def check(cls, exp: Any, case: Any, hosts: Any = None) -> None:
        """The MTU, and every function of the path one this tunbench has."""
        check_mtu(case.mtu)
        unknown = [h.kind for h in exp.chain.hops if h.kind not in functions.REGISTRY]
        if unknown:
            raise SpecError(f"chain function kind(s) {', '.join(unknown)} unknown",
                            f"known: {', '.join(sorted(functions.REGISTRY))}")

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger,
              hosts: Any = None) -> Testbed:
        """Site a, one namespace per function, site b (chain/build.py); between hosts the
        sites and functions as namespaces there (chain/hosts.py)."""
        cls.check(exp, case, hosts)
        if hosts is not None:
            tb: Testbed = hosts.build(run_id, ledger, mtu=case.mtu,
                                      rate=exp.case_rate(case.rate),
                                      netem=exp.case_netem(case.rtt, case.loss), chain=exp.chain)
            return tb
        return chain_build.build(run_id, ledger, exp.chain, mtu=case.mtu,
                                 rate=exp.case_rate(case.rate),
                                 netem=exp.case_netem(case.rtt, case.loss))


TOPOLOGY = Chain
