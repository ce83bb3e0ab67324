"""Shared pieces of the kernel point-to-point tunnel drivers (geneve, gre, gretap, ipip, sit, l2tp).

Not a driver itself (the leading underscore keeps it out of the registry). It holds:
- `kernel_needs`: the kernel options a kind needs, folded into ONE Missing record naming every
  absent option, so `tunbench list` / `run` say exactly which option this kernel lacks;
- `add_link`: create a link with netlink on a site (`site.links`) and register it in the ledger
  at once;
- `address_and_up`: MTU, inner addresses and link up, the same for every kind;
- `link_pair`: the whole `up` of a point-to-point kind whose tunnel is one kernel link per
  site (vxlan, geneve, gre, gretap, ipip, sit): the driver only says which attributes a site's
  link gets towards its peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..capabilities import Missing, kernel_missing
from ..testbed import names
from ..testbed.base import Site, Testbed
from .base import Endpoints, inner_addrs


def kernel_needs(feature: str, options: list[tuple[str, str | None]]) -> list[Missing]:
    """One Missing naming every absent kernel option of `options` ((CONFIG_X, module) pairs).

    Options are listed base first (e.g. CONFIG_L2TP before CONFIG_L2TP_ETH); the record's
    `what` names all missing ones, its `why`/`fix` come from the first.
    """
    missing = [m for m in (kernel_missing(opt, feature, mod) for opt, mod in options) if m]
    if not missing:
        return []
    if len(missing) == 1:
        return missing
    names = ", ".join(m.what.removeprefix("kernel ") for m in missing)
    return [Missing(f"kernel {names}", missing[0].why, missing[0].fix)]


def add_link(tb: Testbed, site: Site, ifname: str, kind: str, **attrs: Any) -> None:
    """Create a link on the site with netlink (here, or by its agent); it enters the ledger
    at once."""
    site.links.add_link(ifname, kind, **attrs)
    site.record_link(tb.ledger, ifname)


def underlay_index(site: Site) -> int:
    return site.links.index(site.underlay_if)


def address_and_up(site: Site, ifname: str, mtu: int, addr4: str | None,
                   addr6: str | None) -> None:
    links = site.links
    links.set_link(ifname, mtu=mtu)
    if addr4:
        links.add_addr(ifname, f"{addr4}/24")
    if addr6:
        links.add_addr(ifname, f"{addr6}/64")
    links.set_link(ifname, state="up")


def link_pair(tb: Testbed, kind: str, suffix: str, *, mtu: int, overhead: int,
              attrs: Callable[[Site, Site], dict[str, Any]], families: tuple[int, ...] = (4, 6),
              info: dict[str, Any] | None = None) -> Endpoints:
    """One `kind` link named tb-<run>-<suffix> in each site, `attrs(site, peer)` its netlink
    attributes; MTU, inner addresses of `families` and up. Returns the endpoints (an inner
    family left out has empty addresses)."""
    a4, b4, a6, b6 = inner_addrs(0)
    has4, has6 = 4 in families, 6 in families
    ifname = names.link_name(tb.run_id, suffix)
    for site, peer, my4, my6 in ((tb.a, tb.b, a4, a6), (tb.b, tb.a, b4, b6)):
        add_link(tb, site, ifname, kind, **attrs(site, peer))
        address_and_up(site, ifname, mtu, my4 if has4 else None, my6 if has6 else None)
    return Endpoints(a4=a4 if has4 else "", b4=b4 if has4 else "",
                     a6=a6 if has6 else None, b6=b6 if has6 else None, mtu=mtu,
                     overhead=overhead, a_ifname=ifname, b_ifname=ifname, rx_ifnames=(ifname,),
                     info={**(info or {}), "created_with": "pyroute2"})
