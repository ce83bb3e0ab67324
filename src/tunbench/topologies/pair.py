"""pair: two sites, a and b, and the tunnel between them: two namespaces on one veth here
(testbed/local.py), or two hosts over SSH (testbed/topology.py, docs/remote.md)."""

from __future__ import annotations

from typing import Any

from .. import implchoice, tunnels, workloads
from ..remote.transport import SshOptions
from ..testbed import local, topology
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger
from ..testbed.topology import BASE_TOOLS, SITE_KEYS
from .base import Topology, TopoNeeds, TopoParam

Needed = dict[str, list[str]]   # tool or kernel option -> what needs it

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
    def native_beside(cls, exp: Any) -> bool:
        """Not the direct cases of a chain campaign: they compare with its chain cases by
        round (report/hops.py)."""
        return exp.chain is None

    @classmethod
    def open(cls, exp: Any, ssh: SshOptions) -> topology.Topology:
        """Sites a and b over SSH (testbed/topology.py), each checked for what the tunnels and
        workloads need there, the underlay MTUs and shaping the experiment asks of them."""
        return open_sites(exp, ssh)

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger,
              hosts: Any = None) -> Testbed:
        """Two namespaces on one veth here (testbed/local.py), or the two hosts' own
        underlay (testbed/topology.py), shaped as the experiment says."""
        cls.check(exp, case, hosts)
        if hosts is not None:
            tb: Testbed = hosts.build(run_id, ledger, mtu=case.mtu,
                                      rate=exp.case_rate(case.rate),
                                      netem=exp.case_netem(case.rtt, case.loss), chain=None)
            return tb
        return local.build(run_id, ledger, mtu=case.mtu, rate=exp.case_rate(case.rate),
                           netem=exp.case_netem(case.rtt, case.loss))


def open_sites(exp: Any, ssh: SshOptions, *, tools: Needed | None = None,
               kernel: Needed | None = None, own_links: bool = True) -> topology.Topology:
    """Connect to sites a and b and check them before anything is changed on either: the
    tools and kernel options the tunnels (with the implementations chosen from the sites
    themselves) and workloads need there, plus `tools` / `kernel` (a chain's functions and
    carrier); with `own_links` also the underlay MTUs the experiment sets on the hosts' own
    links (a chain whose every case runs through it never changes them)."""
    topo = topology.Topology(exp.sites, ssh)
    moving = [tunnels.get(t.kind).display(t.params, t.label) for t in exp.tunnels
              if tunnels.get(t.kind).moves_underlay(t.params)]
    ipv6 = [tunnels.get(t.kind).display(t.params, t.label) for t in exp.tunnels
            if tunnels.get(t.kind).family(t.params) == 6]

    def plan(t: topology.Topology) -> tuple[Needed, Needed]:
        t.impls = implchoice.choose(exp, {n: t.view(n) for n in ("a", "b")})
        need_tools, need_kernel = site_tools(exp, t.impls), site_kernel(exp, t.impls)
        for tool, what in (tools or {}).items():
            need_tools.setdefault(tool, []).extend(what)
        for option, what in (kernel or {}).items():
            need_kernel.setdefault(option, []).extend(what)
        return need_tools, need_kernel

    changing = [o.name for o in exp.offloads if o.settings]
    topo.open(mtus=exp.all_mtus() if own_links else (), shaping=exp.shaped,
              takes_underlay=", ".join(moving), needs_ipv6=", ".join(ipv6), plan=plan,
              offloads=", ".join(changing))
    return topo


def site_tools(exp: Any, impls: dict[str, implchoice.Choice] | None = None) -> Needed:
    """Tools every site must have for this experiment: tool -> what needs it (`impls`: the
    implementations chosen from the sites themselves, for tunnels left on auto)."""
    out: Needed = {}
    for t in exp.tunnels:
        t = implchoice.apply(t, impls or {})
        drv = tunnels.get(t.kind)
        for tool in drv.declared(drv.resolve_impl(t.params)).tools:
            out.setdefault(tool.name, []).append(f"tunnel {t.kind}")
    for w in exp.workloads:
        for name in workloads.get(w.name).tools:
            out.setdefault(name, []).append(f"workload {w.name}")
    if exp.shaped:
        out.setdefault("tc", []).append("underlay shaping")
    return out


def site_kernel(exp: Any, impls: dict[str, implchoice.Choice] | None = None) -> Needed:
    """Kernel options every site must have: option -> the tunnels that need it."""
    out: Needed = {}
    for t in exp.tunnels:
        t = implchoice.apply(t, impls or {})
        drv = tunnels.get(t.kind)
        for k in drv.declared(drv.resolve_impl(t.params)).kernel:
            out.setdefault(k.option, []).append(drv.display(t.params, t.label))
    return out


TOPOLOGY = Pair
