"""ssh-forward: an OpenSSH TCP port forward (`ssh -L`) from site a to a service port in site b.

This is a stream relay, not a packet tunnel: TCP connections to the forwarded port in site a
are terminated by ssh there, their bytes carried as SSH channel data over one TCP connection on
the underlay, and re-originated by sshd in site b. Endpoints therefore have relay=True and
loopback addresses: the forward listens on 127.0.0.1:PORT and [::1]:PORT in site a and connects
to 127.0.0.1:PORT / [::1]:PORT in site b (every namespace has its own loopback). A workload
that binds its server to ep.b4 in site b and connects its client to ep.b4 from site a (as the
stream workload does, on ctx.port_base = 5201) goes through the forward. iperf3's control
connection uses the same port, so one -L per port carries both. `ports` forwards PORT ..
PORT+ports-1 for workloads that use several, and sockperf's port (PORT + 6000, ports.py)
unless sockperf = false, so the TCP latency workloads cross it too.

There is no per-packet overhead or MTU: mtu is the loopback MTU the workload's TCP sees, and
overhead 0. The cost is two extra TCP terminations plus SSH's encryption in user space.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ports as service_ports
from ..capabilities import Missing
from ..testbed.base import Testbed
from . import _ssh
from .base import Endpoints, TunnelDriver


@dataclass(frozen=True)
class SshForwardParams(_ssh.SshParams):
    forward_port: int = field(default=service_ports.PORT_BASE, metadata={
        "help": "first forwarded port (the stream workload's port_base)"})
    ports: int = field(default=4, metadata={
        "help": "consecutive ports forwarded (4: 512 streams over 4 processes)"})
    sockperf: bool = field(default=True, metadata={
        "help": "also forward sockperf's port (forward_port + 6000), so the latency "
                "workloads run over TCP through the relay"})

    def validate(self) -> list[str]:
        problems = super().validate()
        if not 1 <= self.ports <= 64:
            problems.append(f"ports {self.ports} out of range (1..64)")
        if self.forward_port < 1 or self.forward_port + self.ports - 1 > 65535:
            problems.append(f"forward_port {self.forward_port} (+{self.ports}) out of range")
        elif self.sockperf and service_ports.sockperf_port(self.forward_port) > 65535:
            problems.append(f"forward_port {self.forward_port}: sockperf's port "
                            f"{service_ports.sockperf_port(self.forward_port)} is out of range "
                            "(a lower forward_port, or sockperf = false)")
        return problems

    def forwarded(self) -> list[int]:
        """The TCP ports the relay carries: forward_port .. +ports-1, and sockperf's."""
        out = list(range(self.forward_port, self.forward_port + self.ports))
        if self.sockperf:
            out.append(service_ports.sockperf_port(self.forward_port))
        return out


def listening(text: str) -> set[str]:
    """Local addresses of `ss -ltnH` output (pure): {'127.0.0.1:5201', '[::1]:5201', ...}."""
    out = set()
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0] == "LISTEN":
            out.add(cols[3])
        elif len(cols) >= 3 and cols[0].isdigit():   # -H with a state filter drops State
            out.add(cols[2])
    return out


class SshForward(TunnelDriver[SshForwardParams]):
    kind = "ssh-forward"
    fingerprint_tools = ("ssh", "sshd")
    summary = "OpenSSH TCP port forward (ssh -L): a stream relay, not a packet tunnel"
    Params = SshForwardParams
    encrypts = True
    carries = ("tcp",)            # a TCP port relay: no UDP, no packets, no MTU
    userspace = ("",)
    needs = {"": _ssh.NEEDS}

    @classmethod
    def requirements(cls, params: SshForwardParams) -> list[Missing]:
        return _ssh.ssh_requirements()

    @classmethod
    def overhead(cls, params: SshForwardParams, family: int = 4) -> int:
        return 0   # a stream relay: no per-packet header (see the module doc)

    @classmethod
    def tunnel_mtu(cls, params: SshForwardParams, underlay_mtu: int) -> int:
        return underlay_mtu   # nominal: the workload's packets never enter the underlay

    def up(self, tb: Testbed, params: SshForwardParams) -> Endpoints:
        files = _ssh.make_keys(tb)
        sshd = _ssh.start_sshd(tb, files, params, tcp_forwarding="local")
        ports = params.forwarded()
        extra = []
        for port in ports:
            extra.append(f"LocalForward 127.0.0.1:{port} 127.0.0.1:{port}")
            extra.append(f"LocalForward [::1]:{port} [::1]:{port}")
        client = _ssh.start_client(tb, files, params, extra)
        want = {f"127.0.0.1:{p}" for p in ports} | {f"[::1]:{p}" for p in ports}

        def forwards_listen() -> bool:
            r = tb.a.run(["ss", "-ltnH"], timeout=10)
            return want <= listening(r.stdout)

        _ssh.wait_for(client, forwards_listen, "ssh -L forwards not listening", files)
        sessions = _ssh.register_sessions(tb, sshd)
        mtu = tb.a.links.mtu("lo")
        return Endpoints(a4="127.0.0.1", b4="127.0.0.1", a6="::1", b6="::1", mtu=mtu,
                         overhead=0, relay=True, relay_ports=tuple(ports),
                         datapath_pids={"a": [client.pid], "b": [sshd.pid, *sessions]},
                         info={"cipher": params.cipher, "port": params.port,
                               "forwarded_ports": list(ports),
                               "relay": "ssh -L 127.0.0.1:P:127.0.0.1:P and [::1]:P:[::1]:P"})

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """TCP counters of the SSH connection on the underlay: the forwarded bytes cross it
        encrypted, so bytes_acked (a) and bytes_received (b) grow by at least the payload."""
        port = int(ep.info.get("port", 22))
        return {"a": _ssh.ssh_tcp_counters(tb.a, port, server_side=False),
                "b": _ssh.ssh_tcp_counters(tb.b, port, server_side=True)}


DRIVER = SshForward
