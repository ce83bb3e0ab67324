"""Netlink on the site, through pyroute2 shipped inside the agent's zipapp (runs THERE).

Only what the drivers' netlink helpers will need first: list links with counters, create and
delete links, add addresses. Names must carry the project prefix: the agent never creates or
deletes an interface that is not tunbench's.
"""

from __future__ import annotations

import ipaddress
from typing import Any

PREFIX = "tb"
STATS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped")
_IPR: Any = None


def _ipr() -> Any:
    global _IPR
    if _IPR is None:
        from pyroute2 import IPRoute  # imported on first use: ~1 s from a zip
        _IPR = IPRoute()
    return _IPR


def ours(ifname: str) -> str:
    if not ifname.startswith(PREFIX) or len(ifname) > 15:
        raise ValueError(f"refusing interface {ifname!r}: not a tunbench name "
                         f"({PREFIX}..., at most 15 characters)")
    return ifname


def _index(ifname: str) -> int | None:
    found = _ipr().link_lookup(ifname=ifname)
    return int(found[0]) if found else None


def links() -> list[dict[str, Any]]:
    out = []
    for link in _ipr().get_links():
        info = link.get_attr("IFLA_LINKINFO")
        st = link.get_attr("IFLA_STATS64") or {}
        out.append({"ifname": link.get_attr("IFLA_IFNAME"), "index": link["index"],
                    "mtu": link.get_attr("IFLA_MTU"), "state": link.get_attr("IFLA_OPERSTATE"),
                    "kind": info.get_attr("IFLA_INFO_KIND") if info else None,
                    "address": link.get_attr("IFLA_ADDRESS"),
                    "stats": {k: int(st[k]) for k in STATS if k in st}})
    return out


def add(ifname: str, kind: str, attrs: dict[str, Any]) -> None:
    _ipr().link("add", ifname=ours(ifname), kind=kind, **attrs)


def delete(ifname: str) -> None:
    """Delete a link of ours; one already gone is fine."""
    idx = _index(ours(ifname))
    if idx is not None:
        _ipr().link("del", index=idx)


def add_addr(ifname: str, cidr: str) -> None:
    iface = ipaddress.ip_interface(cidr)
    idx = _index(ours(ifname))
    if idx is None:
        raise ValueError(f"no link {ifname}")
    kw: dict[str, Any] = {"flags": 0x02} if iface.version == 6 else {}   # IFA_F_NODAD
    _ipr().addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen,
                **kw)


SETTABLE = {"mtu", "state", "txqlen"}   # txqlen: a userspace datapath's TUN queue


def set_link(ifname: str, attrs: dict[str, Any], keep: str = "") -> dict[str, Any]:
    """Set MTU/state/queue length of a link. A tunbench link: anything in SETTABLE. Another
    link (an underlay the user named): only its MTU, never the one carrying the SSH session
    (`keep`), and the value it had is returned so the caller can journal the way back."""
    bad = set(attrs) - SETTABLE
    if bad:
        raise ValueError(f"refusing to set {sorted(bad)} on {ifname}: only {sorted(SETTABLE)}")
    idx = _index(ifname)
    if idx is None:
        raise ValueError(f"no link {ifname}")
    old = _ipr().get_links(idx)[0].get_attr("IFLA_MTU")
    if not ifname.startswith(PREFIX):
        if set(attrs) != {"mtu"}:
            raise ValueError(f"refusing to change {ifname}: not a tunbench interface")
        if ifname == keep and int(attrs["mtu"]) != int(old):
            raise ValueError(f"refusing to change the MTU of {ifname}: it carries the SSH "
                             "session")
    if attrs:
        _ipr().link("set", index=idx, **attrs)
    return {"old_mtu": old}
