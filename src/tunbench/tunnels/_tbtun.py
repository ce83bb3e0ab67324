"""Shared driver of the tbtun kinds (ebpf-vxlan, ebpf-geneve): our eBPF tunnel, one attach
point per site.

Not a driver itself (the leading underscore keeps it out of the registry). Per site it loads
bpf/tbtun.bpf.o once (pinned under /sys/fs/bpf/tb-<run>/<site> on that site's host; a
remote host gets the object copied into its case directory first), writes the site's settings
into tb_config, installs the rule towards the peer (plus `rules - 1` filler rules, so a
campaign can measure a full rule table), attaches tb_encap/tb_decap to the underlay device,
puts the inner address on that device (/32) and routes the overlay prefix onto it with the
tbtun route realm and the tunnel MTU. The realm is what tells the program "encapsulate this":
the underlay's own traffic carries none and passes untouched.
"""

from __future__ import annotations

import ipaddress
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..capabilities import Missing
from ..params import out_of_range
from ..tbtun import loader, maps
from ..testbed.base import Site, Testbed
from .base import Endpoints, KernelOption, Needs, Tool, TunnelDriver, TunnelParams, inner_addrs

REALM = 116          # route realm of tunnel-bound IPv4 routes (tb_config.realm)
DECAPS = ("tc", "xdp")
MARKER_HOP = "fe80::7462:fffe"   # next hop of tunnel-bound IPv6 routes (-> maps.MARKER_MAC)
TOOLS = (Tool("bpftool", "bpftool", "loads and pins tbtun, edits its rule maps",
              ("version",)),
         Tool("tc", "iproute2", "attaches tbtun to the underlay device", ("-V",)),
         Tool("nsenter", "util-linux", "runs tc in a site's network namespace"))
KERNEL = (KernelOption("CONFIG_BPF_SYSCALL", None, "eBPF programs and maps"),
          KernelOption("CONFIG_NET_CLS_BPF", None, "tc bpf filters (tbtun attach)"),
          KernelOption("CONFIG_NET_SCH_INGRESS", None, "clsact qdisc (tc egress/ingress)"),
          KernelOption("CONFIG_IP_ROUTE_CLASSID", None, "route realms mark tunnel traffic"))


@dataclass(frozen=True)
class TbtunParams(TunnelParams):
    vni: int = field(default=42, metadata={"help": "network identifier (1..16777215)"})
    port: int = field(default=0, metadata={
        "help": "outer UDP destination port (0: the IANA port, 4789 VXLAN / 6081 Geneve)"})
    rules: int = field(default=2, metadata={
        "help": "rules per site: the peer's two (IPv4, IPv6) plus filler prefixes"})
    decap: str = field(default="tc", metadata={
        "help": "ingress hook of decapsulation: tc (keeps veth's 64 KB GSO skbs) or xdp "
                "(native XDP, before any skb; one wire frame at a time, GRO rebuilds)"})

    attach: str = field(default="tc", metadata={
        "help": "how the tc programs attach: tc (clsact + cls_bpf, any kernel), tcx (bpf "
                "links, Linux >= 6.6: no qdisc, no classifier layer) or auto (tcx where the "
                "kernel has it); single-stream throughput measured alike (docs/tbtun.md)"})

    def validate(self) -> list[str]:
        bad = [] if self.decap in DECAPS else [
            f"decap {self.decap!r} is not one of {', '.join(DECAPS)}"]
        if self.attach not in loader.ATTACHES:
            bad.append(f"attach {self.attach!r} is not one of {', '.join(loader.ATTACHES)}")
        return bad + out_of_range(vni=(self.vni, 1, 2**24 - 1), port=(self.port, 0, 65535),
                                  rules=(self.rules, 2, maps.MAX_RULES))


def filler_rules(n: int, remote: str, vni: int, encap: maps.Encap, port: int) -> list[maps.Rule]:
    """n /32 rules in 10.0.0.0/8 that no traffic uses: a full table for scaling runs."""
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    return [maps.Rule(f"{ipaddress.IPv4Address(base + 4 * i + 1)}/32", remote, vni, encap, port)
            for i in range(n)]


class TbtunDriver(TunnelDriver[TbtunParams]):
    """tbtun with the encapsulation of `encap`."""

    encap: ClassVar[maps.Encap] = "vxlan"
    Params = TbtunParams
    inner_families = (4, 6)
    needs = {"": Needs(tools=TOOLS, kernel=KERNEL)}

    min_kernel = loader.MIN_KERNEL

    @classmethod
    def requirements(cls, params: TbtunParams) -> list[Missing]:
        tcx = loader.tcx_missing(platform.release()) if params.attach == "tcx" else ""
        return super().requirements(params) + loader.missing() + (
            [Missing(f"kernel {platform.release()}", tcx, "use attach=auto or attach=tc")]
            if tcx else [])

    @classmethod
    def orchestrator_requirements(cls, params: TbtunParams) -> list[Missing]:
        """Remote sites need no compiler: the object built here is copied to them."""
        return loader.object_missing()

    @classmethod
    def overhead(cls, params: TbtunParams, family: int = 4) -> int:
        return maps.OVERHEAD

    def up(self, tb: Testbed, params: TbtunParams) -> Endpoints:
        a4, b4, a6, b6 = inner_addrs(0)
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        port = params.port or maps.DEFAULT_PORTS[self.encap]
        pins: dict[str, str] = {}
        limits: dict[str, str] = {}   # per site: why its tc decap cannot carry IPv6 inside
        releases = {s.name: s.run(["uname", "-r"], timeout=10).stdout.strip()
                    for s in tb.sites()}
        # before anything is made: attach=tcx on a kernel without tcx is refused here
        how = {n: loader.attach_method(params.attach, r, f"{self.kind} on site {n}")
               for n, r in releases.items()}
        for site, peer, mine, theirs, mine6, theirs6 in ((tb.a, tb.b, a4, b4, a6, b6),
                                                         (tb.b, tb.a, b4, a4, b6, a6)):
            where = loader.load(tb.ledger, tb.run_id, site.name, site,
                                loader.ship_object(tb, site))
            pins[site.name] = str(where)
            if params.decap == "tc":
                why = loader.tc_decap_ipv6(releases[site.name])
                if why:
                    limits[site.name] = why
            ports = {"vxlan": maps.DEFAULT_PORTS["vxlan"], "geneve": maps.DEFAULT_PORTS["geneve"],
                     self.encap: port}
            loader.configure(where, local4=site.underlay4, realm=REALM, mtu=tb.underlay_mtu,
                             vxlan_port=ports["vxlan"], geneve_port=ports["geneve"],
                             site=site)
            peer_rules = [maps.Rule(f"{theirs}/32", peer.underlay4, params.vni, self.encap, port),
                          maps.Rule(f"{theirs6}/128", peer.underlay4, params.vni, self.encap,
                                    port)]
            loader.add_rules(where, [*peer_rules, *filler_rules(
                params.rules - len(peer_rules), peer.underlay4, params.vni, self.encap, port)],
                site)
            loader.attach(tb.ledger, site.netns, site.underlay_if, where, params.decap, site,
                          how[site.name])
            self._inner(tb, site, peer, mine, mtu)
            self._inner6(tb, site, mine6, mtu)
        return Endpoints(a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params),
                         a_ifname=tb.a.underlay_if, b_ifname=tb.b.underlay_if,
                         # decapsulated in tc ingress of the underlay device: a capture
                         # there sees the outer packets, so loss-search counts by sockets
                         rx_ifnames=(),
                         info={"encap": self.encap, "vni": params.vni, "port": port,
                               "rules": params.rules, "decap": params.decap, "realm": REALM,
                               "pins": pins, "attach": how,
                               **({"ipv6_inside_not_carried": limits} if limits else {}),
                               "created_with": "bpftool+" + "+".join(sorted(set(
                                   how.values())))})

    @staticmethod
    def _inner(tb: Testbed, site: Site, peer: Site, mine: str, mtu: int) -> None:
        """Inner address (/32) on the underlay device and the overlay route onto it: via the
        peer's underlay address (its MAC becomes the outer Ethernet destination), tbtun realm,
        tunnel MTU (so TCP's MSS and PMTU fit the encapsulated packet)."""
        dev = site.underlay_if
        net = str(ipaddress.ip_network(f"{mine}/{tb.prefix4}", strict=False))
        site.run(["ip", "addr", "add", f"{mine}/32", "dev", dev], timeout=10)
        site.record_command(tb.ledger, ["ip", "addr", "del", f"{mine}/32", "dev", dev])
        site.run(["ip", "route", "add", net, "via", peer.underlay4, "dev", dev, "onlink",
                  "realm", str(REALM), "mtu", str(mtu), "src", mine], timeout=10)
        site.record_command(tb.ledger, ["ip", "route", "del", net, "dev", dev])

    @staticmethod
    def _inner6(tb: Testbed, site: Site, mine: str, mtu: int) -> None:
        """IPv6 routes carry no realm: the overlay route goes via a link-local next hop whose
        permanent neighbour entry is the marker MAC, which tb_encap recognises (and replaces
        with the real next hop's MAC from the FIB)."""
        dev = site.underlay_if
        net = str(ipaddress.ip_network(f"{mine}/{tb.prefix6}", strict=False))
        site.run(["ip", "-6", "addr", "add", f"{mine}/128", "dev", dev, "nodad"], timeout=10)
        site.record_command(tb.ledger, ["ip", "-6", "addr", "del", f"{mine}/128", "dev", dev])
        site.run(["ip", "-6", "neigh", "add", MARKER_HOP, "lladdr", maps.MARKER_MAC, "dev", dev,
                  "nud", "permanent"], timeout=10)
        site.record_command(tb.ledger, ["ip", "-6", "neigh", "del", MARKER_HOP, "dev", dev])
        site.run(["ip", "-6", "route", "add", net, "via", MARKER_HOP, "dev", dev, "mtu",
                  str(mtu), "src", mine], timeout=10)
        site.record_command(tb.ledger, ["ip", "-6", "route", "del", net, "dev", dev])

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """The datapath's own counters, read on each site's host: packets encapsulated,
        decapsulated, dropped, and per rule (`rule<slot>_packets`: slot 0 is the peer's IPv4
        address, 1 its IPv6 address) for the slots that moved."""
        out: dict[str, dict[str, int]] = {}
        for site in tb.sites():
            where = ep.info.get("pins", {}).get(site.name)
            if where and site.exists(where):
                out[site.name] = {k: v["packets"]
                                  for k, v in loader.stats(Path(where), site).items()}
                out[site.name].update({f"rule{slot}_packets": pk for slot, (pk, _) in
                                       loader.rule_counters(Path(where), site).items()})
        return out
