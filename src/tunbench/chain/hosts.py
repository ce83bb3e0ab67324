"""A chain between two sites on real hosts (`[sites]` a and b, and `[chain]`): docs/chains.md,
"Chains between hosts".

Placement: the functions up to and including the `wan` run on site a's host, the ones after it
on site b's host, each in a namespace of its own there; the sites themselves become namespaces
on their hosts (the chain's ends, as on the local chain), so a host's own stack, addresses,
routes and management interface are never changed. The segments are the local chain's (same
addresses, same function modules, run through the hosts' agents), except the one right of the
WAN, which crosses the real network between the hosts: the *carrier*, a kernel VXLAN device
made in each host's root namespace (its UDP socket stays there, on the host's underlay, towards
the other host's address) and then moved into the namespace at its end. The WAN's tbf shapes
both of its sides, the carrier one included; the carrier's overhead (50 bytes over IPv4) comes
off every segment's MTU, and the case records it.

Every namespace is created by the host's agent, which journals it first: teardown (the run's
ledger, through that agent), the agent's own EOF undo and `tunbench cleanup --site` delete it,
and with it every link, address, route, qdisc and nftables table inside. The carrier device is
journaled on its host before it exists (it lives in the host's root namespace until moved).
Each site namespace gets an agent of its own (started with `ip netns exec`), so tunnels and
workloads see a `RemoteSite` like any other; it is closed before its namespace is deleted.

Hosts that share one machine (topology.machine_groups: one kernel boot id) run the chain as
separate hosts do: every namespace name carries the run id and its function's or site's name,
each end's case directory is its own (/run/tunbench/<run id>-a, -b; the gateways'
<run id>-<function>), so one /run seen by both hosts (and by this controller) holds them side
by side; the case records `shares_cpus` and `shared_machine` as a pair of sites does.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import proc, tunnels
from ..errors import SpecError, TunbenchError
from ..remote.agent.client import Agent
from ..testbed import local, names
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger
from ..testbed.remote import LIVE_AGENTS, REMOTE_ROOT, RemoteSite
from . import build as build_mod
from . import gateway, get
from .base import Hop
from .build import addr4, addr6, place
from .spec import ChainSpec

CARRIER = "vxlan"
CARRIER_OVERHEAD = 50        # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
CARRIER_PORT = 4789


# ---- placement (pure) -----------------------------------------------------------------------
def wan_position(chain: ChainSpec) -> int:
    """1-based position of the chain's WAN (the segment right of it crosses the hosts)."""
    for j, hop in enumerate(chain.hops, 1):
        if hop.kind == "wan":
            return j
    raise SpecError("a chain between hosts needs a wan function: the segment that crosses "
                    "the network between them", 'add one to chain.path, e.g. "wan"')


def sides(chain: ChainSpec) -> list[str]:
    """The site whose host runs each function, in path order: up to the WAN a, after it b."""
    w = wan_position(chain)
    return ["a" if j <= w else "b" for j in range(1, len(chain.hops) + 1)]


def chain_mtu(mtu: int, underlay_mtu: int) -> int:
    """Every segment's MTU: the experiment's, at most what the carrier leaves of the hosts'
    underlay."""
    return min(mtu, underlay_mtu - CARRIER_OVERHEAD)


def vni(run_id: str) -> int:
    """The carrier's VXLAN id, from the run id (the hosts may carry other VXLANs)."""
    return 1 + int(hashlib.sha256(run_id.encode()).hexdigest()[:6], 16) % 16_000_000


def problems(chain: ChainSpec, tunnel_kinds: list[str], *, shaped: bool,
             local_sites: list[str]) -> list[str]:
    """What a chain between hosts does not support, one line each (before anything is made)."""
    out = []
    if local_sites:
        out.append(f"[chain] with [sites]: site(s) {', '.join(local_sites)} are 'local'; a "
                   "chain between hosts needs both sites on hosts (or leave [sites] out: "
                   "the chain then runs in namespaces here)")
    if not any(h.kind == "wan" for h in chain.hops):
        out.append("[chain] with [sites] needs a wan function in chain.path: the segment that "
                   "crosses the network between the hosts (e.g. path = [\"router\", \"wan\"])")
    if shaped:
        out.append("[chain] with [sites]: --rate/--delay shape the sites' egress, which the "
                   "chain's wan function does between hosts (give the wan a rate instead)")
    site_kinds = tunnels.chain_site_kinds()   # what runs at sites that are namespaces on hosts
    other = sorted(set(tunnel_kinds) - set(site_kinds))
    if other:
        out.append(f"[chain] with [sites]: tunnel(s) {', '.join(other)} at the sites are not "
                   f"supported through a chain between hosts yet ({', '.join(site_kinds)} are)")
    return out


def tools(chain: ChainSpec) -> dict[str, list[str]]:
    """Tools the hosts need for the chain: tool -> the functions that need it."""
    out: dict[str, list[str]] = {"ip": ["chain"]}
    for hop in chain.hops:
        for tool in get(hop.kind).tools:
            out.setdefault(tool, []).append(f"function {hop.name}")
        if hop.kind == "gateway":   # what the gateway's tunnel driver runs there
            drv = tunnels.get(hop.params["tunnel"])
            p = gateway.tunnel_params(hop.params)
            for t in drv.declared(drv.resolve_impl(p)).tools:
                out.setdefault(t.name, []).append(f"function {hop.name}")
    return out


def kernel(chain: ChainSpec) -> dict[str, list[str]]:
    """Kernel options the hosts need for the chain: option -> what needs it (the carrier's
    VXLAN; netem for a WAN delay/jitter/loss; the gateways' tunnel, e.g. kernel ESP)."""
    out: dict[str, list[str]] = {"CONFIG_VXLAN": ["the chain's WAN carrier"]}
    for hop in chain.hops:
        if hop.kind == "wan" and any(hop.params.get(k) for k in ("delay", "jitter", "loss")):
            out.setdefault("CONFIG_NET_SCH_NETEM", []).append(f"function {hop.name}")
        if hop.kind == "gateway":
            drv = tunnels.get(hop.params["tunnel"])
            p = gateway.tunnel_params(hop.params)
            for k in drv.declared(drv.resolve_impl(p)).kernel:
                out.setdefault(k.option, []).append(f"function {hop.name}")
    return out


# ---- building -------------------------------------------------------------------------------
def in_netns(agent: Agent, netns: str) -> Any:
    """A `run` for a namespace on the agent's host (proc.run's keywords)."""
    def run(argv: list[str], **kw: Any) -> proc.Completed:
        kw.pop("netns", None)
        return agent.run(["ip", "netns", "exec", netns, *argv], **kw)
    return run


def build(topo: Any, run_id: str, ledger: Ledger, chain: ChainSpec, *, mtu: int,
          workdir: Path | None = None) -> Testbed:
    """The sites' and functions' namespaces on both hosts, their segments and the carrier;
    each function configured; an agent in each site's namespace."""
    side = sides(chain)
    w = wan_position(chain)
    agents = {s: topo.endpoints[s].agent for s in ("a", "b")}
    for s, ag in agents.items():
        if ag is None or not ag.alive:
            raise TunbenchError(f"site {s} ({topo.target(s)}) is not connected",
                                "a tunbench bug: report it")
    under = {s: topo.link_mtu(s, topo.resolved[s].dev) for s in ("a", "b")}
    seg_mtu = chain_mtu(mtu, min(under.values()))
    if seg_mtu < 576:
        raise SpecError(f"the hosts' underlay MTU {min(under.values())} leaves {seg_mtu} "
                        f"bytes inside the chain's {CARRIER} carrier",
                        "use hosts whose underlay MTU is at least 1280")
    n = len(chain.hops)
    gw = chain.gateways()
    seg_mtus = build_mod.segment_mtus(chain, n, seg_mtu)   # gateways: their tunnel's MTU
    hops: list[Hop] = []
    for hop, s in zip(place(run_id, chain), side, strict=True):
        hops.append(replace(hop, host=topo.target(s), runner=in_netns(agents[s], hop.netns)))
    ns_a, ns_b = names.netns_name(run_id, "a"), names.netns_name(run_id, "b")
    if_a, if_b = names.link_name(run_id, "ua"), names.link_name(run_id, "ub")
    spaces = [ns_a, *[h.netns for h in hops], ns_b]
    where = ["a", *side, "b"]
    for ns, s in zip(spaces, where, strict=True):
        ag = agents[s]
        ag.call("netns_add", wait=30, name=ns)
        ledger.add("remote", agent=ag.agent_id, op="netns_del", name=ns, args={"name": ns})
    carrier: dict[str, Any] = {}
    for seg in range(n + 1):
        left = if_a if seg == 0 else hops[seg - 1].right_if
        right = hops[seg].left_if if seg < n else if_b
        if seg == w:
            carrier = _carrier(topo, run_id, (spaces[seg], spaces[seg + 1]), (left, right),
                               ledger)
        else:   # both ends on one host: a veth pair made straight inside its namespaces
            agents[where[seg]].run(["ip", "link", "add", "name", left, "netns", spaces[seg],
                                    "type", "veth", "peer", "name", right, "netns",
                                    spaces[seg + 1]], timeout=20)
        for ns, s, ifname, end in ((spaces[seg], where[seg], left, 1),
                                   (spaces[seg + 1], where[seg + 1], right, 2)):
            _address(agents[s], ns, ifname, seg, end, seg_mtus[seg])
    for pos, (ns, s) in enumerate(zip(spaces, where, strict=True)):
        _routes(agents[s], ns, pos, n)
    for hop in hops:
        get(hop.kind)().configure(hop, ledger)
    # per-site case directories: the hosts may share one /run (and with it this machine's)
    a = _site(topo, "a", ns_a, if_a, addr4(0, 1), addr6(0, 1), f"{run_id}-a", ledger)
    b = _site(topo, "b", ns_b, if_b, addr4(n, 2), addr6(n, 2), f"{run_id}-b", ledger)
    wd = local.make_workdir(run_id, ledger, workdir)
    tb = Testbed("hosts-chain", run_id, a, b, seg_mtus[0], ledger, wd,
                 shares_cpus=topo.shared is not None)
    if topo.shared is not None:   # one machine: one set of CPUs for both ends
        tb.notes["shared_machine"] = dict(topo.shared)
    tb.hops = hops
    carrier.update(kind=CARRIER, overhead=CARRIER_OVERHEAD, underlay_mtus=under,
                   mtu=seg_mtu, segment=w, requested_mtu=mtu)
    tb.notes["chain"] = {"path": chain.arrow(), "routed_hops": chain.routed_hops,
                         "hops": [h.describe() for h in hops],
                         "segment_mtus": seg_mtus, "carrier": carrier,
                         "hosts": {"a": topo.target("a"), "b": topo.target("b")}}
    if gw and not gateway.style_of(hops[gw[0] - 1].params).gateways_as_sites:   # routes only
        tb.notes["chain"]["gateway_tunnel"] = gateway.tunnel_up(
            tb, hops[gw[0] - 1], hops[gw[1] - 1], gw[0], gw[1], n, ledger, seg_mtu)
    elif gw:   # the gateways as sites of their own tunnel: an agent in each one's namespace
        first, second = hops[gw[0] - 1], hops[gw[1] - 1]
        ga = _site(topo, "a", first.netns, first.right_if, first.right4, first.right6,
                   f"{run_id}-{first.name}", ledger)
        gb = _site(topo, "b", second.netns, second.left_if, second.left4, second.left6,
                   f"{run_id}-{second.name}", ledger)
        tb.notes["chain"]["gateway_tunnel"] = gateway.tunnel_up(
            tb, first, second, gw[0], gw[1], n, ledger, seg_mtu, sites=(ga, gb))
    return tb


def _carrier(topo: Any, run_id: str, spaces: tuple[str, str], ifnames: tuple[str, str],
             ledger: Ledger) -> dict[str, Any]:
    """The WAN segment between the hosts: on each, a VXLAN device towards the other host,
    made in its root namespace (journaled there first) and moved into the segment's end."""
    v = vni(run_id)
    out: dict[str, Any] = {"vni": v, "port": CARRIER_PORT, "ends": {}}
    for s, other, ns, ifname in (("a", "b", spaces[0], ifnames[0]),
                                 ("b", "a", spaces[1], ifnames[1])):
        ag = topo.endpoints[s].agent
        r, peer = topo.resolved[s], topo.resolved[other].addr4
        ag.call("link_journal", ifnames=[ifname])
        # deleted from the host's own namespace at teardown if it never left it (once moved,
        # it goes with its namespace and this finds nothing there)
        ledger.add("remote", agent=ag.agent_id, op="link_del", name=ifname,
                   args={"ifname": ifname})
        ag.run(["ip", "link", "add", ifname, "type", "vxlan", "id", str(v), "local", r.addr4,
                "remote", peer, "dstport", str(CARRIER_PORT), "dev", r.dev], timeout=20)
        ag.run(["ip", "link", "set", "dev", ifname, "netns", ns], timeout=20)
        out["ends"][s] = {"host": topo.target(s), "dev": r.dev, "local": r.addr4,
                          "remote": peer, "netns": ns, "ifname": ifname}
    return out


def _address(agent: Agent, ns: str, ifname: str, seg: int, end: int, mtu: int) -> None:
    agent.run(["ip", "netns", "exec", ns, "sysctl", "-qw", *build_mod.link_sysctls(ifname)],
              timeout=20)
    batch = ["link set dev lo up", f"link set dev {ifname} mtu {mtu}",
             f"addr add {addr4(seg, end)}/24 dev {ifname}",
             f"addr add {addr6(seg, end)}/64 dev {ifname}", f"link set dev {ifname} up"]
    agent.run(["ip", "-n", ns, "-batch", "-"], input="\n".join(batch) + "\n", timeout=20)


def _routes(agent: Agent, ns: str, pos: int, n: int) -> None:
    """As build._routes: every other segment through the neighbour on its side."""
    lines = [f"route add {dst} via {via}" for dst, via in build_mod.route_plan(pos, n)]
    if lines:
        agent.run(["ip", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n", timeout=20)


def _site(topo: Any, name: str, ns: str, ifname: str, a4: str, a6: str, dirname: str,
          ledger: Ledger) -> RemoteSite:
    """A chain end (or a gateway) on site `name`'s host: an agent of its own inside the
    namespace (closed before the namespace is deleted), with a case directory there
    (/run/tunbench/<dirname>)."""
    ep = topo.endpoints[name]
    agent = Agent.start(ep.conn, netlink=True, prefix=("ip", "netns", "exec", ns), tag="ns")
    LIVE_AGENTS[agent.agent_id] = agent
    ledger.add("remote_agent", agent=agent.agent_id, name=f"agent in {ns}")
    agent.call("links", wait=300)   # pyroute2's first import, as Endpoint.connect
    wd = f"{REMOTE_ROOT}/{dirname}"
    agent.mkdir(wd)
    ledger.add("remote", agent=agent.agent_id, op="remove", name=wd, args={"path": wd})
    return RemoteSite(name, ns, ifname, a4, a6, host=topo.target(name), agent=agent,
                      workdir=wd, mgmt_if="")
