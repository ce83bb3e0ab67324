"""Several parallel tunnels between the two sites, with flows spread over them by ECMP.

One encrypted tunnel (one WireGuard interface, one IPsec SA, one userspace daemon) is handled
by one core. To use several cores, build N tunnels and spread flows over them: each site gets
a "service" address on its loopback, and the route to the other site's service address is a
multipath route with one next hop per tunnel. With fib_multipath_hash_policy=1 (L4 hash) in
the site namespaces, every TCP connection (5-tuple) picks one tunnel, so parallel streams of
one iperf3 process spread over all of them. The route carries `src <own service address>` so
the return path is spread the same way (the far side has the mirror route).

The workload targets the service addresses: `up` returns them as the Endpoints' a4/b4/a6/b6.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..testbed.base import Site, Testbed

# Service addresses: outside every per-tunnel subnet (inner_addrs(i) for i < MAX_TUNNELS).
SERVICE4 = ("198.19.255.1", "198.19.255.2")
SERVICE6 = ("2001:2:0:ffff::1", "2001:2:0:ffff::2")
MAX_TUNNELS = 16

HASH_SYSCTLS = ("net.ipv4.fib_multipath_hash_policy=1", "net.ipv6.fib_multipath_hash_policy=1")


@dataclass(frozen=True)
class Hop:
    """One tunnel as seen from one site: its device and the far end's inner addresses."""

    ifname: str
    peer4: str
    peer6: str | None = None


def validate_tunnels(n: int) -> list[str]:
    if not 1 <= n <= MAX_TUNNELS:
        return [f"tunnels {n} out of range (1..{MAX_TUNNELS}); tunnels=1 is a single tunnel, "
                "tunnels=N builds N parallel tunnels with flows spread by ECMP"]
    return []


def multipath_argv(dst: str, src: str, hops: list[tuple[str, str]], family: int) -> list[str]:
    """`ip route add` argv of a multipath route to `dst` (pure; hops = [(gateway, dev)])."""
    plen = "32" if family == 4 else "128"
    argv = ["ip", f"-{family}", "route", "add", f"{dst}/{plen}", "src", src]
    for gw, dev in hops:
        argv += ["nexthop", "via", gw, "dev", dev, "weight", "1"]
    return argv


def setup(tb: Testbed, hops: dict[str, list[Hop]], ipv6: bool = True
          ) -> tuple[str, str, str | None, str | None]:
    """Service addresses and multipath routes in both sites; returns (a4, b4, a6, b6).

    `hops[site.name]` lists the tunnels seen from that site. Routes and addresses vanish with
    the namespaces; each is also registered for undo (flush, which tolerates a route the
    kernel already removed with a dead tunnel device).
    """
    add_service_addrs(tb, ipv6)
    return add_routes(tb, hops, ipv6)


def add_service_addrs(tb: Testbed, ipv6: bool = True) -> None:
    """The service address of each site on its loopback (IKE needs them before the SAs)."""
    for me, site in enumerate(tb.sites()):
        _run(site, ["sysctl", "-qw", *HASH_SYSCTLS])
        _add_service_addr(tb, site, f"{SERVICE4[me]}/32")
        if ipv6:
            _add_service_addr(tb, site, f"{SERVICE6[me]}/128")


def add_routes(tb: Testbed, hops: dict[str, list[Hop]], ipv6: bool = True
               ) -> tuple[str, str, str | None, str | None]:
    for me, site in enumerate(tb.sites()):
        peer = 1 - me
        _add_route(tb, site, multipath_argv(SERVICE4[peer], SERVICE4[me],
                                            [(h.peer4, h.ifname) for h in hops[site.name]], 4))
        if ipv6:
            _add_route(tb, site, multipath_argv(
                SERVICE6[peer], SERVICE6[me],
                [(str(h.peer6), h.ifname) for h in hops[site.name]], 6))
    if ipv6:
        return SERVICE4[0], SERVICE4[1], SERVICE6[0], SERVICE6[1]
    return SERVICE4[0], SERVICE4[1], None, None


def _run(site: Site, argv: list[str]) -> None:
    site.run(argv, timeout=15)


def _add_service_addr(tb: Testbed, site: Site, cidr: str) -> None:
    argv = ["ip", "addr", "add", cidr, "dev", "lo"]
    if ":" in cidr:
        argv.append("nodad")
    _run(site, argv)
    site.record_command(tb.ledger, ["ip", "addr", "flush", "dev", "lo", "to", cidr])


def _add_route(tb: Testbed, site: Site, argv: list[str]) -> None:
    _run(site, argv)
    fam, dst = argv[1], argv[4]
    site.record_command(tb.ledger, ["ip", fam, "route", "flush", dst])


def describe(n: int) -> dict[str, object]:
    return {"tunnels": n, "spread": "ECMP multipath, L4 hash (fib_multipath_hash_policy=1)",
            "service4": list(SERVICE4), "service6": list(SERVICE6)} if n > 1 else {"tunnels": 1}

