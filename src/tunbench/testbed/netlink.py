"""Thin helpers over pyroute2 for namespaces, links, addresses and routes.

pyroute2 opens its netlink socket inside a namespace from a short-lived child process, so the
orchestrating process itself never changes namespace. Every helper here takes the namespace
name (None = the root namespace) and never creates a namespace implicitly.
"""

from __future__ import annotations

import errno
import ipaddress
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyroute2 import IPRoute
from pyroute2 import netns as pr_netns
from pyroute2.netlink.exceptions import NetlinkError

GONE = {errno.ENODEV, errno.ENOENT, errno.ESRCH, errno.EADDRNOTAVAIL}


def list_netns() -> list[str]:
    return sorted(pr_netns.listnetns())


def create_netns(name: str) -> None:
    if name in list_netns():
        raise FileExistsError(f"network namespace {name} already exists")
    pr_netns.create(name)


def remove_netns(name: str) -> None:
    _drop(name)
    if name not in list_netns():
        return
    pr_netns.remove(name)


# One netlink socket per namespace, opened on first use and kept until the namespace is
# removed: opening a socket inside a namespace costs a fork, so reusing it keeps tunnel setup
# and teardown fast.
_CONNS: dict[str | None, IPRoute] = {}
_CONN_LOCK = threading.Lock()


def _drop(netns: str | None) -> None:
    with _CONN_LOCK:
        ip = _CONNS.pop(netns, None)
    if ip is not None:
        ip.close()


def close_all() -> None:
    for ns in list(_CONNS):
        _drop(ns)


@contextmanager
def ipr(netns: str | None = None) -> Iterator[IPRoute]:
    """An IPRoute bound to a namespace that must already exist (flags=0: never create one)."""
    with _CONN_LOCK:
        ip = _CONNS.get(netns)
        if ip is None:
            if netns is not None and netns not in list_netns():
                raise FileNotFoundError(f"network namespace {netns} does not exist")
            ip = IPRoute(netns=netns, flags=0) if netns else IPRoute()
            _CONNS[netns] = ip
    try:
        yield ip
    except OSError:
        _drop(netns)  # a socket in a bad state is not reused
        raise


def index(ip: IPRoute, ifname: str) -> int:
    found = ip.link_lookup(ifname=ifname)
    if not found:
        raise NetlinkError(errno.ENODEV, f"no link {ifname}")
    return int(found[0])


def delete_link(name: str, netns: str | None) -> None:
    """Delete a link; a link (or namespace) that is already gone is fine."""
    if netns is not None and netns not in list_netns():
        _drop(netns)
        return
    with ipr(netns) as ip:
        found = ip.link_lookup(ifname=name)
        if not found:
            return
        try:
            ip.link("del", index=found[0])
        except NetlinkError as exc:
            if exc.code not in GONE:
                raise


def add_veth(name_a: str, ns_a: str, name_b: str, ns_b: str) -> None:
    """A veth pair with one end in each namespace, created directly there (never in root)."""
    with ipr(ns_a) as ip:
        ip.link("add", ifname=name_a, kind="veth", peer={"ifname": name_b, "net_ns_fd": ns_b})


def add_link(netns: str, ifname: str, kind: str, **attrs: Any) -> None:
    with ipr(netns) as ip:
        ip.link("add", ifname=ifname, kind=kind, **attrs)


def set_link(netns: str | None, ifname: str, **attrs: Any) -> None:
    with ipr(netns) as ip:
        ip.link("set", index=index(ip, ifname), **attrs)


def add_addr(netns: str | None, ifname: str, cidr: str) -> None:
    iface = ipaddress.ip_interface(cidr)
    with ipr(netns) as ip:
        kw: dict[str, Any] = {}
        if iface.version == 6:
            kw["flags"] = 0x02  # IFA_F_NODAD: usable at once, no duplicate-address wait
        ip.addr("add", index=index(ip, ifname), address=str(iface.ip),
                prefixlen=iface.network.prefixlen, **kw)


def add_route(netns: str, dst: str, *, gateway: str | None = None, oif: str | None = None,
              **attrs: Any) -> None:
    with ipr(netns) as ip:
        kw: dict[str, Any] = dict(attrs)
        if gateway:
            kw["gateway"] = gateway
        if oif:
            kw["oif"] = index(ip, oif)
        ip.route("add", dst=dst, **kw)


def link_names(netns: str | None) -> list[str]:
    with ipr(netns) as ip:
        return [str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links()]


def link_mtu(netns: str | None, ifname: str) -> int:
    with ipr(netns) as ip:
        return int(ip.get_links(index(ip, ifname))[0].get_attr("IFLA_MTU"))


STAT_KEYS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped",
             "rx_errors", "tx_errors")


def link_stats(netns: str | None, ifname: str) -> dict[str, int]:
    """Interface counters (IFLA_STATS64)."""
    with ipr(netns) as ip:
        st = ip.get_links(index(ip, ifname))[0].get_attr("IFLA_STATS64")
        return {k: int(st[k]) for k in STAT_KEYS}


class NetnsLinks:
    """The netlink operations of one site reached in this process (a namespace here, or this
    host's root namespace): what `Site.links` returns for a local site. A remote site returns
    an object with the same methods that forwards them to its agent (testbed/remote.py), so a
    driver calls `site.links.add_link(...)` without knowing which one it has."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns

    def add_link(self, ifname: str, kind: str, **attrs: Any) -> None:
        with ipr(self.netns) as ip:
            ip.link("add", ifname=ifname, kind=kind, **attrs)

    def set_link(self, ifname: str, **attrs: Any) -> None:
        set_link(self.netns, ifname, **attrs)

    def add_addr(self, ifname: str, cidr: str) -> None:
        add_addr(self.netns, ifname, cidr)

    def delete_link(self, ifname: str) -> None:
        delete_link(ifname, self.netns)

    def index(self, ifname: str) -> int:
        with ipr(self.netns) as ip:
            return index(ip, ifname)

    def names(self) -> list[str]:
        return link_names(self.netns)

    def mtu(self, ifname: str) -> int:
        return link_mtu(self.netns, ifname)

    def stats(self, ifname: str) -> dict[str, int]:
        return link_stats(self.netns, ifname)
