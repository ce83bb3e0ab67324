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
namespace.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .. import proc
from ..errors import SpecError
from . import names, netlink
from .ledger import Ledger

MAX_SPOKES = 1000
VXLAN_PORT = 4789
INNER_MTU = 1450
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
    netns: str
    underlay4: str
    inner4: str
    mac: str                  # its VXLAN device's MAC (the inner destination towards it)
    vxlan_if: str


@dataclass(frozen=True)
class Hub:
    run_id: str
    netns: str
    router: str               # the router namespace
    underlay_if: str
    underlay4: str
    gateway4: str             # the router's address on the hub's link
    inner4: str
    spokes: tuple[Spoke, ...]
    ledger: Ledger

    def run(self, argv: list[str], timeout: float = 30, check: bool = True) -> proc.Completed:
        return proc.run(argv, netns=self.netns, timeout=timeout, check=check)


def check_spokes(n: int) -> None:
    """Bad input is refused before anything is created."""
    if not 1 <= n <= MAX_SPOKES:
        raise SpecError(f"spokes {n} is not within 1..{MAX_SPOKES}",
                        f"give 1..{MAX_SPOKES} spokes (underlay /30s fit 198.18.0.0/16)")


def batch(netns: str, lines: list[str], timeout: float = 300) -> None:
    """Many `ip` commands in one process in `netns` (argv lines; no shell involved)."""
    if lines:
        proc.run(["ip", "-batch", "-"], netns=netns, input="\n".join(lines) + "\n",
                 timeout=timeout)


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
                   f"link add {vx} address {spoke_mac(i)} type vxlan id {i} local {addr} "
                   f"remote {ends[0][2]} dstport {VXLAN_PORT} dev {sif} nolearning",
                   f"link set {vx} addrgenmode none",     # no IPv6 chatter (RS, MLD)
                   f"link set {vx} mtu {INNER_MTU} up", f"addr add {inner(i)}/32 dev {vx}",
                   f"route add {inner(0)}/32 dev {vx} src {inner(i)}",
                   f"neigh add {inner(0)} lladdr {HUB_MAC} dev {vx} nud permanent"])
        out.append(Spoke(i, ns, addr, inner(i), spoke_mac(i), vx))
    return Hub(run_id, hub_ns, router, ends[0][1], ends[0][2], hub_gw, inner(0), tuple(out),
               ledger)
