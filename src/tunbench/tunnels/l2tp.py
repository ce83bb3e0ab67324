"""l2tp: Linux kernel L2TPv3 (RFC 3931) Ethernet pseudowire, over UDP or directly over IP.

pyroute2 0.9.7 has no L2TP support (it is a generic-netlink family, not a link kind), so the
tunnel and its session are made with `ip l2tp add tunnel` / `ip l2tp add session` through
proc.run, each registered in the ledger with its delete command the moment it exists. The
session creates the l2tp_eth device that carries inner traffic.

Header bytes added to an inner IP packet (IPv4 underlay), as the kernel builds them
(l2tp_session_set_header_len):
  encap udp: IPv4 20 + UDP 8 + L2TPv3-over-UDP flags/version/reserved 4 + session id 4
             + cookie (0/4/8) + L2-specific sublayer (4 with l2spec "default") + Ethernet 14
             = 50 with no cookie and no sublayer;
  encap ip:  IPv4 20 + session id 4 + cookie + sublayer + Ethernet 14 = 38.
The sublayer is always set explicitly (`l2spec_type none|default`), never left to the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..capabilities import Missing
from ..testbed import names
from ..testbed.base import Testbed
from ._kernel import address_and_up, kernel_needs
from .base import (
    ETH_HEADER,
    IPV4_HEADER,
    UDP_HEADER,
    Endpoints,
    KernelOption,
    Needs,
    Tool,
    TunnelDriver,
    TunnelParams,
    inner_addrs,
)

L2TP_UDP_FLAGS = 4     # T/L/ver + reserved, only when carried over UDP
SESSION_ID = 4
L2SPEC_DEFAULT = 4
IPPROTO_L2TP = 115
# Cookies are not secrets (RFC 3931 §8.1: a guard against misdelivery); fixed per direction.
COOKIES = {4: ("4c32a001", "4c32b002"), 8: ("4c32a0014c32a001", "4c32b0024c32b002")}


@dataclass(frozen=True)
class L2tpParams(TunnelParams):
    encap: Literal["udp", "ip"] = field(default="udp", metadata={
        "help": "L2TPv3 over UDP or directly over IP (protocol 115)"})
    port: int = field(default=1701, metadata={"help": "UDP port on both ends (encap udp)"})
    tunnel_id: int = field(default=1000, metadata={"help": "L2TP tunnel id (1..4294967295)"})
    session_id: int = field(default=2000, metadata={"help": "L2TP session id (1..4294967295)"})
    cookie: Literal[0, 4, 8] = field(default=0, metadata={
        "help": "cookie length in bytes: 0, 4 or 8"})
    l2spec: Literal["none", "default"] = field(default="none", metadata={
        "help": "L2-specific sublayer: none or default (4 bytes)"})

    def validate(self) -> list[str]:
        problems = []
        for name in ("tunnel_id", "session_id"):
            v = getattr(self, name)
            if not 0 < v < 2**32:
                problems.append(f"{name} {v} out of range (1..4294967295)")
        if not 0 < self.port < 65536:
            problems.append(f"port {self.port} out of range (1..65535)")
        return problems


class L2tp(TunnelDriver[L2tpParams]):
    kind = "l2tp"
    carries = ("tcp", "udp", "l2")   # an Ethernet pseudowire (l2tp_eth)
    summary = "kernel L2TPv3 Ethernet pseudowire over UDP or IP (ip l2tp)"
    Params = L2tpParams
    needs = {"": Needs(
        tools=(Tool("ip", "iproute2", "ip l2tp tunnels and sessions", ("-V",)),),
        kernel=(KernelOption("CONFIG_L2TP", "l2tp_core"),
                KernelOption("CONFIG_L2TP_V3", "l2tp_netlink", "ip l2tp's generic netlink"),
                KernelOption("CONFIG_L2TP_ETH", "l2tp_eth"),
                KernelOption("CONFIG_L2TP_IP", "l2tp_ip", "L2TPv3 over IP (encap ip)"),
                KernelOption("CONFIG_L2TP_IP", "l2tp_ip6", "L2TPv3 over IPv6 (encap ip)")))}

    @classmethod
    def family(cls, params: L2tpParams) -> int:
        return 4

    @classmethod
    def requirements(cls, params: L2tpParams) -> list[Missing]:
        opts: list[tuple[str, str | None]] = [
            ("CONFIG_L2TP", "l2tp_core"), ("CONFIG_L2TP_V3", None),
            ("CONFIG_L2TP_ETH", "l2tp_eth")]
        if params.encap == "ip":
            opts.append(("CONFIG_L2TP_IP", "l2tp_ip"))
        return kernel_needs(f"L2TPv3 Ethernet pseudowires (encap {params.encap})", opts)

    @classmethod
    def overhead(cls, params: L2tpParams, family: int = 4) -> int:
        encap = UDP_HEADER + L2TP_UDP_FLAGS if params.encap == "udp" else 0
        l2spec = L2SPEC_DEFAULT if params.l2spec == "default" else 0
        return IPV4_HEADER + encap + SESSION_ID + params.cookie + l2spec + ETH_HEADER

    def up(self, tb: Testbed, params: L2tpParams) -> Endpoints:
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        a4, b4, a6, b6 = inner_addrs(0)
        ifname = names.link_name(tb.run_id, "l2tp")
        tid, sid = str(params.tunnel_id), str(params.session_id)
        for i, (site, peer, my4, my6) in enumerate(((tb.a, tb.b, a4, a6),
                                                    (tb.b, tb.a, b4, b6))):
            argv = ["ip", "l2tp", "add", "tunnel", "tunnel_id", tid, "peer_tunnel_id", tid,
                    "encap", params.encap, "local", site.underlay4, "remote", peer.underlay4]
            if params.encap == "udp":
                argv += ["udp_sport", str(params.port), "udp_dport", str(params.port)]
            site.run(argv, timeout=20)
            site.record_command(tb.ledger, ["ip", "l2tp", "del", "tunnel", "tunnel_id", tid])
            argv = ["ip", "l2tp", "add", "session", "name", ifname, "tunnel_id", tid,
                    "session_id", sid, "peer_session_id", sid, "l2spec_type", params.l2spec]
            if params.cookie:
                mine, theirs = COOKIES[params.cookie][i], COOKIES[params.cookie][1 - i]
                argv += ["cookie", mine, "peer_cookie", theirs]
            site.run(argv, timeout=20)
            site.record_command(tb.ledger, ["ip", "l2tp", "del", "session", "tunnel_id", tid,
                                            "session_id", sid])
            address_and_up(site, ifname, mtu, my4, my6)
        return Endpoints(a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params),
                         a_ifname=ifname, b_ifname=ifname, rx_ifnames=(ifname,),
                         info={"encap": params.encap, "port": params.port,
                               "tunnel_id": params.tunnel_id, "session_id": params.session_id,
                               "cookie": params.cookie, "l2spec": params.l2spec,
                               "ip_proto": IPPROTO_L2TP if params.encap == "ip" else None,
                               "created_with": "ip l2tp"})


DRIVER = L2tp
