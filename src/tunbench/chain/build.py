"""A chain testbed: site a, one namespace per function, site b, joined segment by segment.

Segment i (0 = site a's, n = site b's, for n functions) is a veth pair on 198.18.i.0/24 and
2001:2:1:i::/64: its left end (.1, towards site a) and right end (.2). Every namespace has
static routes to every other segment through its neighbours, so the path is the only path.
Sites keep their names and roles (tunnels and workloads see a Testbed like any other; the
sites are simply not on one link any more); with no function this is the plain testbed.
Every namespace enters the ledger the moment it exists; its links and rules go with it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .. import proc
from ..testbed import local, names, netlink
from ..testbed.base import Site, Testbed
from ..testbed.ledger import Ledger
from ..testbed.netem import Netem
from . import gateway, get
from .base import FRAG_HIGH_THRESH, FRAG_TIMEOUT_S, Hop, addr4, addr6, nets
from .spec import ChainSpec

__all__ = ["addr4", "addr6", "nets"]   # the segments' addresses (chain/base.py), used from here


def place(run_id: str, chain: ChainSpec) -> list[Hop]:
    """The hops with their namespaces, interfaces and addresses (pure: no system change)."""
    out = []
    for j, hop in enumerate(chain.hops, 1):
        out.append(replace(hop, netns=names.netns_name(run_id, hop.name),
                           left_if=names.link_name(run_id, f"s{j - 1}r"),
                           right_if=names.link_name(run_id, f"s{j}l"),
                           left4=addr4(j - 1, 2), right4=addr4(j, 1),
                           left6=addr6(j - 1, 2), right6=addr6(j, 1)))
    return out


def build(run_id: str, ledger: Ledger, chain: ChainSpec, *, mtu: int = 1500,
          rate: str | None = None, workdir: Path | None = None,
          netem: Netem | None = None) -> Testbed:
    """Create the sites, the functions and the segments; configure each function."""
    if not chain.hops:
        return local.build(run_id, ledger, mtu=mtu, rate=rate, workdir=workdir, netem=netem)
    hops = place(run_id, chain)
    n = len(hops)
    gw = chain.gateways()
    seg_mtu = segment_mtus(chain, n, mtu)
    a = Site("a", names.netns_name(run_id, "a"), names.link_name(run_id, "ua"),
             addr4(0, 1), addr6(0, 1))
    b = Site("b", names.netns_name(run_id, "b"), names.link_name(run_id, "ub"),
             addr4(n, 2), addr6(n, 2))
    spaces = [str(a.netns), *[h.netns for h in hops], str(b.netns)]
    for ns in spaces:
        netlink.create_netns(ns)
        ledger.netns(ns)
    for seg in range(n + 1):   # segment seg: spaces[seg] (left end) -- spaces[seg + 1]
        left = a.underlay_if if seg == 0 else hops[seg - 1].right_if
        right = hops[seg].left_if if seg < n else b.underlay_if
        netlink.add_veth(left, spaces[seg], right, spaces[seg + 1])
        _address(spaces[seg], left, seg, 1, seg_mtu[seg])
        _address(spaces[seg + 1], right, seg, 2, seg_mtu[seg])
    for pos, ns in enumerate(spaces):
        _routes(ns, pos, n)
    _shape_sites(a, b, rate, netem, ledger)
    for hop in hops:
        get(hop.kind)().configure(hop, ledger)
    workdir = local.make_workdir(run_id, ledger, workdir)
    # the sites see the inner path's MTU (the tunnel's, through gateways)
    tb = Testbed("local-chain", run_id, a, b, seg_mtu[0], ledger, workdir, rate=rate)
    tb.hops = hops
    tb.notes["chain"] = {"path": chain.arrow(), "routed_hops": chain.routed_hops,
                         "hops": [h.describe() for h in hops], "segment_mtus": seg_mtu}
    if gw:
        tb.notes["chain"]["gateway_tunnel"] = gateway.tunnel_up(
            tb, hops[gw[0] - 1], hops[gw[1] - 1], gw[0], gw[1], n, ledger, mtu)
    if netem is not None and netem.active:
        tb.notes["netem"] = netem.describe()
    return tb


def segment_mtus(chain: ChainSpec, n: int, mtu: int) -> list[int]:
    """MTU of every segment (pure): the experiment's, except on the site sides of a gateway
    pair, which get the gateways' tunnel MTU (its overhead taken off the WAN's MTU)."""
    gw = chain.gateways()
    if not gw:
        return [mtu] * (n + 1)
    inner = gateway.inner_mtu(chain.hops[gw[0] - 1].params, mtu, chain.hops)
    return [mtu if gw[0] <= seg < gw[1] else inner for seg in range(n + 1)]


# Every namespace of a chain: the sites' settings, and fragment reassembly that cannot carry
# one trial's incomplete datagrams into the next (docs/chains.md, "Fragments in a chain").
# Whoever reassembles (site b; a stateful firewall or a NAT, whose conntrack defragments every
# datagram it forwards) keeps the fragments of a datagram that lost one of them on the way (an
# overloaded trial: libipsec's ESP socket at gwb overflows) until ipfrag_time. Linux (>= 4.17)
# never evicts them: once a namespace's fragment memory exceeds ipfrag_high_thresh it refuses
# every fragment, even one that would complete a datagram, and each expiry only makes room for
# one more incomplete datagram while fragmented traffic flows. Measured in the sdwan chain with
# the kernel's 30 s and 4 MB: three overloaded IMIX trials left 3,664 incomplete datagrams
# (4,194,880 bytes) in fwb, and then every 3,000 pps trial lost all of its 1500 B packets
# there (ReasmReqds 1000 = ReasmFails 1000), 40 and 576 B none. Hence queues that expire after
# 1 s instead of 30 (IPv4) / 60 (IPv6), and room for what 1 s of a chain's traffic can leave
# (fwb held up to 7.8 MB of it in overloaded trials of 1500 B packets); the next trial starts
# 0.2-0.7 s after the last one. Conntrack's IPv6 reassembly has its own settings
# (firewall.CONNTRACK_FRAG_SYSCTLS).
CHAIN_SYSCTLS = (*local.SITE_SYSCTLS,
                 f"net.ipv4.ipfrag_time={FRAG_TIMEOUT_S}",
                 f"net.ipv6.ip6frag_time={FRAG_TIMEOUT_S}",
                 f"net.ipv4.ipfrag_high_thresh={FRAG_HIGH_THRESH}",
                 f"net.ipv6.ip6frag_high_thresh={FRAG_HIGH_THRESH}")


def link_sysctls(ifname: str) -> tuple[str, ...]:
    """The sysctls of a chain namespace with its link `ifname` (locally and on hosts): the
    chain's fragment settings, and no DAD on the link. The link came into the namespace
    before `default.accept_dad=0` was set there, so it would still run DAD on its link-local
    address when it comes up: for about a second neighbour discovery through it stalls (an
    IPv6 ping right after the chain was built lost all 3 packets, a neighbour left INCOMPLETE
    on the router behind an SRv6 gateway)."""
    return (*CHAIN_SYSCTLS, f"net.ipv6.conf.{ifname}.accept_dad=0")


def _address(ns: str, ifname: str, seg: int, end: int, mtu: int) -> None:
    proc.run(["sysctl", "-qw", *link_sysctls(ifname)], netns=ns, timeout=10)
    netlink.set_link(ns, "lo", state="up")
    netlink.set_link(ns, ifname, mtu=mtu)
    netlink.add_addr(ns, ifname, f"{addr4(seg, end)}/24")
    netlink.add_addr(ns, ifname, f"{addr6(seg, end)}/64")
    netlink.set_link(ns, ifname, state="up")


def route_plan(pos: int, n: int) -> list[tuple[str, str]]:
    """(destination, next hop) of the namespace at position pos (0 = site a, n + 1 = site b):
    every segment left of its left segment via the left neighbour, every one right of its
    right segment via the right; IPv4 and IPv6."""
    out = []
    for seg in range(n + 1):
        if seg < pos - 1:
            via4, via6 = addr4(pos - 1, 1), addr6(pos - 1, 1)
        elif seg > pos:
            via4, via6 = addr4(pos, 2), addr6(pos, 2)
        else:
            continue   # a segment this namespace is on
        n4, n6 = nets(seg)
        out += [(n4, via4), (n6, via6)]
    return out


def _routes(ns: str, pos: int, n: int) -> None:
    for dst, via in route_plan(pos, n):
        netlink.add_route(ns, dst, gateway=via)


def _shape_sites(a: Site, b: Site, rate: str | None, netem: Netem | None,
                 ledger: Ledger) -> None:
    """The experiment's own --rate/netem, on the sites' egress as on the plain testbed."""
    from ..testbed.netem import qdisc_argvs
    for site in (a, b):
        for argv in qdisc_argvs(site.underlay_if, netem, rate,
                                local.tbf_args(rate) if rate else []):
            proc.run(argv, netns=site.netns, timeout=10)
