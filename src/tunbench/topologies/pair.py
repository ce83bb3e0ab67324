"""pair: two sites, a and b, and the tunnel between them: two namespaces on one veth here
(testbed/local.py), or two hosts over SSH (testbed/topology.py, docs/remote.md)."""

from __future__ import annotations

from typing import Any

from .. import tunnels
from ..testbed import local
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger
from ..testbed.topology import BASE_TOOLS, SITE_KEYS
from .base import Topology, TopoNeeds, TopoParam

SITE_HELP = ("'local' (a namespace here) or USER@HOST, or a table of "
             + ", ".join(SITE_KEYS))


class Pair(Topology):
    name = "pair"
    summary = "two sites and the tunnel between them (the default)"
    chosen_by = "the default: no [testbed] kind, no [chain]"
    params = (
        TopoParam("[sites] a", "--site a=TARGET", "a namespace here", f"site a: {SITE_HELP}"),
        TopoParam("[sites] b", "--site b=TARGET", "a namespace here", f"site b: {SITE_HELP}"),
    )

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds(tools=BASE_TOOLS, kernel=("CONFIG_NET_NS", "CONFIG_VETH"),
                         hosts="none (two namespaces here), or 2 hosts over SSH")

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        return tuple(k for k, drv in sorted(tunnels.registry().items())
                     if not (on_hosts and drv.not_on_hosts))

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        return exp.hub is None and getattr(exp, "mesh", None) is None and (exp.chain is None or not through_chain)

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger,
              hosts: Any = None) -> Testbed:
        """Two namespaces on one veth here (testbed/local.py), or the two hosts' own
        underlay (testbed/topology.py), shaped as the experiment says."""
        cls.check(exp, case, hosts)
        if hosts is not None:
            tb: Testbed = hosts.build(run_id, ledger, mtu=case.mtu, rate=exp.rate,
                                      netem=exp.case_netem(case.rtt, case.loss), chain=None)
            return tb
        return local.build(run_id, ledger, mtu=case.mtu, rate=exp.rate, netem=exp.case_netem(case.rtt, case.loss))


TOPOLOGY = Pair
