"""Hub-and-spokes testbed: one hub site and N spoke sites, namespaces on this host.

Why a router namespace in the middle rather than one bridge: the hub has ONE underlay device
(tbtun's single attach point), every remote is reached through the same next hop (so the outer
Ethernet destination that routing gives tbtun is right for every spoke), and the path is the
same for every hub variant compared (kernel VXLAN devices or tbtun rules).

    hub (tb-<rid>-h) --veth-- router (tb-<rid>-r) --veth-- spoke i (tb-<rid>-s<i>), i = 1..N

Underlay: site i (0 = hub) owns 198.18.0.0 + 4i /30, router side .1, site side .2. Overlay:
site i's inner address is 198.19.0.0 + i + 1 (hub 198.19.0.1). Every spoke runs a kernel
VXLAN device (VNI i, towards the hub, static neighbour for the hub's inner address, fixed
MACs), so the hub variants (tbtun/hub.py) differ only on the hub. Links and addresses are made
with one `ip -batch` per namespace (a 1000-spoke testbed is ~1000 processes, not ~10000).
Everything lives in namespaces that the ledger deletes; nothing is created in the root
namespace. The same Hub and Spoke shapes describe the hub testbed on hosts (testbed/hubhosts.py):
every site is then a RemoteSite, reached through its agent, and `site` is what runs there.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from .. import proc
from ..errors import SpecError
from . import names, netlink
from .base import Site
from .ledger import Ledger
from .remote import RemoteSite

MAX_SPOKES = 1000
VXLAN_PORT = 4789
OVERHEAD = 50          # VXLAN over IPv4, bytes added to the inner packet
INNER_MTU = 1500 - OVERHEAD
UNDERLAY = "198.18.0.0/16"
HUB_MAC = "02:74:62:00:00:01"        # inner MAC of the hub (every hub variant)
SITE_SYSCTLS = ("net.ipv4.ip_forward=1", "net.ipv6.conf.all.accept_dad=0")


def underlay(i: int) -> tuple[str, str]:
    """(router side, site side) underlay addresses of site i (0: the hub)."""
    base = int(ipaddress.IPv4Address("198.18.0.0")) + 4 * i
    return str(ipaddress.IPv4Address(base + 1)), str(ipaddress.IPv4Address(base + 2))


def inner(i: int) -> str:
    return str(ipaddress.IPv4Address(int(ipaddress.IPv4Address("198.19.0.0")) + i + 1))


def spoke_mac(i: int) -> str:
    return f"02:74:62:01:{i >> 8:02x}:{i & 0xff:02x}"


@dataclass(frozen=True)
class Spoke:
    index: int                # 1..N, also its VNI
    netns: str | None         # its namespace (None: a host of its own)
    underlay4: str
    inner4: str
    mac: str                  # its VXLAN device's MAC (the inner destination towards it)
    vxlan_if: str
    site: Site                # where it runs (a namespace here, or a host: RemoteSite)
    nexthop4: str = ""        # hosts: the hub's next hop towards it ("": the router)


@dataclass(frozen=True)
class Hub:
    run_id: str
    netns: str | None         # the hub's namespace (None: a host of its own)
    router: str               # the router namespace ("" on hosts)
    underlay_if: str
    underlay4: str
    gateway4: str             # the router's address on the hub's link ("" on hosts)
    inner4: str
    spokes: tuple[Spoke, ...]
    ledger: Ledger
    site: Site                # where the hub runs
    inner_mtu: int = INNER_MTU
    underlay_mtu: int = 1500

    def run(self, argv: list[str], timeout: float = 30, check: bool = True) -> proc.Completed:
        return self.site.run(argv, timeout=timeout, check=check)

    @property
    def on_hosts(self) -> bool:
        return bool(self.site.remote)


def check_spokes(n: int) -> None:
    """Bad input is refused before anything is created."""
    if not 1 <= n <= MAX_SPOKES:
        raise SpecError(f"spokes {n} is not within 1..{MAX_SPOKES}",
                        f"give 1..{MAX_SPOKES} spokes (underlay /30s fit 198.18.0.0/16)")


def batch(where: str | Site, lines: list[str], timeout: float = 300) -> None:
    """Many `ip` commands in one process in a namespace or on a site (argv lines; no shell
    involved)."""
    if not lines:
        return
    text = "\n".join(lines) + "\n"
    if isinstance(where, str):
        proc.run(["ip", "-batch", "-"], netns=where, input=text, timeout=timeout)
    else:
        where.run(["ip", "-batch", "-"], input=text, timeout=timeout)


def spoke_lines(i: int, vx: str, addr: str, hub_addr: str, dev: str,
                mtu: int = INNER_MTU) -> list[str]:
    """Spoke i's kernel VXLAN device towards the hub, with its inner address, the route to
    the hub's inner address and a static neighbour for it."""
    return [f"link add {vx} address {spoke_mac(i)} type vxlan id {i} local {addr} "
            f"remote {hub_addr} dstport {VXLAN_PORT} dev {dev} nolearning",
            f"link set {vx} addrgenmode none",     # no IPv6 chatter (RS, MLD)
            f"link set {vx} mtu {mtu} up", f"addr add {inner(i)}/32 dev {vx}",
            f"route add {inner(0)}/32 dev {vx} src {inner(i)}",
            f"neigh add {inner(0)} lladdr {HUB_MAC} dev {vx} nud permanent"]


def describe(h: Any) -> dict[str, Any]:
    """The namespace testbed's record (hubcase: the case's `testbed`)."""
    return {"kind": "hub", "spokes": len(h.spokes), "hub": h.netns, "router": h.router,
            "underlay_mtu": 1500, "underlay_if": h.underlay_if,
            "hub_underlay4": h.underlay4, "hub_inner4": h.inner4,
            "spoke_tunnel": "kernel vxlan (VNI = spoke index)", "shared_by_sites": True}


def _netns(run_id: str, ledger: Ledger, site: str) -> str:
    ns = names.netns_name(run_id, site)
    netlink.create_netns(ns)
    ledger.netns(ns)
    for setting in SITE_SYSCTLS:
        proc.run(["sysctl", "-qw", setting], netns=ns, timeout=10)
    return ns


def build(run_id: str, ledger: Ledger, spokes: int) -> Hub:
    """The hub, the router and `spokes` spokes with their kernel VXLAN devices."""
    check_spokes(spokes)
    router = _netns(run_id, ledger, "r")
    hub_ns = _netns(run_id, ledger, "h")
    rlines, ends = ["link set lo up"], []
    for i in range(spokes + 1):
        ns = hub_ns if i == 0 else _netns(run_id, ledger, f"s{i}")
        rif, sif = names.link_name(run_id, f"r{i}"), names.link_name(run_id, f"s{i}")
        gw, addr = underlay(i)
        rlines += [f"link add {rif} type veth peer name {sif} netns {ns}",
                   f"addr add {gw}/30 dev {rif}", f"link set {rif} up"]
        ends.append((ns, sif, addr, gw))
    batch(router, rlines)
    hub_gw = ends[0][3]
    batch(hub_ns, ["link set lo up", f"addr add {ends[0][2]}/30 dev {ends[0][1]}",
                   f"link set {ends[0][1]} up", f"route add {UNDERLAY} via {hub_gw}"])
    out = []
    for i, (ns, sif, addr, gw) in enumerate(ends[1:], start=1):
        vx = names.link_name(run_id, "x")
        batch(ns, ["link set lo up", f"addr add {addr}/30 dev {sif}", f"link set {sif} up",
                   f"route add default via {gw}",
                   *spoke_lines(i, vx, addr, ends[0][2], sif)])
        out.append(Spoke(i, ns, addr, inner(i), spoke_mac(i), vx,
                         Site(f"s{i}", ns, sif, addr, "")))
    return Hub(run_id, hub_ns, router, ends[0][1], ends[0][2], hub_gw, inner(0), tuple(out),
               ledger, Site("hub", hub_ns, ends[0][1], ends[0][2], ""))


def own_links(site: Site, ledger: Ledger, ifnames: list[str]) -> None:
    """Links about to be made on a remote site by one command (`ip -batch`): journaled there
    by its agent first (so the host removes them if this process dies: EOF, `cleanup
    --site`) and in the ledger (teardown deletes them through the agent). A namespace's
    links go with the namespace: nothing to record."""
    if not isinstance(site, RemoteSite):
        return
    site._agent().call("link_journal", ifnames=ifnames)
    for ifname in ifnames:
        site.record_link(ledger, ifname)
