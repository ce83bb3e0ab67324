"""Shared pieces of the kernel point-to-point tunnel drivers (geneve, gre, gretap, ipip, sit, l2tp).

Not a driver itself (the leading underscore keeps it out of the registry). It holds:
- `kernel_needs`: the kernel options a kind needs, folded into ONE Missing record naming every
  absent option, so `tunbench list` / `run` say exactly which option this kernel lacks;
- `add_link`: create a link with pyroute2 in a site's namespace and register it in the ledger
  at once;
- `address_and_up`: MTU, inner addresses and link up, the same for every kind.
"""

from __future__ import annotations

from typing import Any

from ..capabilities import Missing, kernel_missing
from ..testbed import netlink
from ..testbed.base import Site, Testbed


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
    """Create a link in the site's namespace with pyroute2; it enters the ledger at once."""
    ns = str(site.netns)
    netlink.add_link(ns, ifname, kind, **attrs)
    tb.ledger.link(ifname, ns)


def underlay_index(site: Site) -> int:
    with netlink.ipr(site.netns) as ip:
        return netlink.index(ip, site.underlay_if)


def address_and_up(site: Site, ifname: str, mtu: int, addr4: str | None,
                   addr6: str | None) -> None:
    ns = str(site.netns)
    netlink.set_link(ns, ifname, mtu=mtu)
    if addr4:
        netlink.add_addr(ns, ifname, f"{addr4}/24")
    if addr6:
        netlink.add_addr(ns, ifname, f"{addr6}/64")
    netlink.set_link(ns, ifname, state="up")
