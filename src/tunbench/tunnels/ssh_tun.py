"""ssh-tun: OpenSSH layer-3 tunnel (`ssh -w 0:0`, `PermitTunnel point-to-point`).

ssh in site a and sshd in site b each open a tun device (OpenSSH names them tun0; we rename
them to tb<rid>s while still down) and relay packets as SSH channel data over one TCP
connection on the underlay. Inner addresses go on the tun devices in both sites.

Overhead, honestly: SSH runs over TCP, a byte stream, so there is no fixed per-packet header on
the wire. What each inner packet gains is the tun address-family header (4), the SSH channel
data framing (9), the SSH packet length/padding (5 + 4..block+3) and the AEAD tag (16); the
TCP/IP headers (20 + 20 + 12 timestamps) are then shared by however many packets TCP puts in a
segment. The tunnel MTU is underlay MTU minus all of that (worst case), so one full inner packet
never needs more than one underlay segment; the real cost is TCP-in-TCP (two congestion
controls, retransmission of retransmissions) and the user-space copy, not the header bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2.netlink.exceptions import NetlinkError

from ..capabilities import Missing
from ..errors import CommandFailed
from ..testbed import names
from ..testbed.base import Testbed
from . import _ssh
from .base import IPV4_HEADER, IPV6_HEADER, Endpoints, TunnelDriver, inner_addrs

TCP_HEADER = 20 + 12   # with timestamps


@dataclass(frozen=True)
class SshTunParams(_ssh.SshParams):
    pass


class SshTun(TunnelDriver[SshTunParams]):
    kind = "ssh-tun"
    native_beside = True   # native beside it stays native (docs/methodology.md)
    fingerprint_tools = ("ssh", "sshd")
    summary = "OpenSSH layer-3 tun tunnel (ssh -w), IP over SSH over TCP"
    Params = SshTunParams
    encrypts = True
    userspace = ("",)              # ssh and sshd copy packets between TUN devices
    needs = {"": _ssh.TUN_NEEDS}

    @classmethod
    def requirements(cls, params: SshTunParams) -> list[Missing]:
        return _ssh.ssh_requirements() + _ssh.tun_requirements()

    @classmethod
    def overhead(cls, params: SshTunParams, family: int = 4) -> int:
        outer = IPV4_HEADER if family == 4 else IPV6_HEADER
        return outer + TCP_HEADER + _ssh.framing_overhead(params.cipher)

    def up(self, tb: Testbed, params: SshTunParams) -> Endpoints:
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        files = _ssh.make_keys(tb)
        sshd = _ssh.start_sshd(tb, files, params, permit_tunnel="point-to-point")
        client = _ssh.start_client(tb, files, params,
                                   ["Tunnel point-to-point", "TunnelDevice 0:0"])

        def both_tuns() -> bool:
            return all("tun0" in s.links.names() for s in (tb.a, tb.b))

        _ssh.wait_for(client, both_tuns, "ssh -w did not open tun0 in both sites", files)
        sessions = _ssh.register_sessions(tb, sshd)
        ifname = names.link_name(tb.run_id, "s")
        try:
            self._configure(tb, ifname, mtu)
        except (OSError, NetlinkError, CommandFailed) as exc:  # gone when ssh or sshd exits
            state = "running" if client.poll() is None else f"exited with {client.poll()}"
            raise CommandFailed(f"ssh-tun: tun device setup failed ({exc}); ssh {state}; "
                                f"sshd log: {_ssh._tail(files)}",
                                "see the case's error_log") from None
        a4, b4, a6, b6 = inner_addrs(0)
        return Endpoints(a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params),
                         a_ifname=ifname, b_ifname=ifname, rx_ifnames=(ifname,),
                         datapath_pids={"a": [client.pid], "b": [sshd.pid, *sessions]},
                         info={"cipher": params.cipher, "port": params.port,
                               "transport": "TCP (stream): overhead is per-packet framing "
                                            "worst case incl. TCP/IP headers",
                               "framing": _ssh.framing_overhead(params.cipher)})

    @staticmethod
    def _configure(tb: Testbed, ifname: str, mtu: int) -> None:
        a4, b4, a6, b6 = inner_addrs(0)
        for site, my4, my6 in ((tb.a, a4, a6), (tb.b, b4, b6)):
            # rename while down (ssh/sshd keep their fd): `ip`, as the agent of a remote
            # site changes netlink attributes only of links already named tb...
            site.run(["ip", "link", "set", "dev", "tun0", "name", ifname], timeout=10)
            site.record_link(tb.ledger, ifname)
            links = site.links
            links.set_link(ifname, mtu=mtu)
            links.add_addr(ifname, f"{my4}/24")
            links.add_addr(ifname, f"{my6}/64")
            links.set_link(ifname, state="up")

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Tun device counters plus the TCP counters of the SSH connection on the underlay."""
        out = super().counters(tb, ep)
        port = int(ep.info.get("port", 22))
        out["a"].update(_ssh.ssh_tcp_counters(tb.a, port, server_side=False))
        out["b"].update(_ssh.ssh_tcp_counters(tb.b, port, server_side=True))
        return out


DRIVER = SshTun
