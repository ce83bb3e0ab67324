"""Test "hosts": network namespaces each running a real sshd, reached only over SSH.

Layout (every name tb-prefixed, every object in a ledger, removed at teardown):

    root namespace (the test process, tunbench)            tb<rid>m0  198.18.N.1/24
        | veth
    tb-<rid>-m: bridge tb<rid>br  -- ports tb<rid>m1, tb<rid>p1, tb<rid>p2 ...
        | veth                     | veth
    tb-<rid>-h1 (tb<rid>h1 .11)   tb-<rid>-h2 (tb<rid>h2 .12)   each: sshd with its own host key

N is the first of 198.18.200..249 (RFC 2544 benchmarking range) that has no route here yet;
each host also has fd54:6200:N::1x/64 (ULA) on its link: the IPv6 underlay for srv6;
the local testbed uses 198.18.0.0/24 and 198.18.1.0/24 inside its namespaces only.
Each sshd runs with a private tmpfs on /run (tunbench.privrun), so /run/tunbench on a "host"
is that host's own and invisible from the root namespace, and one on /root, so a session
starts like on a fresh host (this machine's root .bashrc runs `pyenv init`: +0.5 s a command). The client side uses a private ssh
config (-F) with its own key and known_hosts: the user's ~/.ssh is never read or written.
`build(..., private_run=False)` gives hosts that share this machine's /run (two sites on one
machine, as sshd in containers of one box): /run/tunbench there is this machine's own.

`orchestrator(hosts)`: a namespace of its own on the hosts' bridge (tb-<rid2>-o, its link
tb<rid2>o0 at 198.18.N.5, the bridge's port tb<rid2>o1), in which a test runs tunbench
itself (`ip netns exec`): a site `local` of that run is this namespace, so a test of a
site "here" never changes the machine's root namespace. Its own ledger; removed on success
and failure.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tunbench import proc
from tunbench.remote.transport import SshOptions
from tunbench.testbed import names, netlink
from tunbench.testbed.ledger import Ledger

SSHD = "/usr/sbin/sshd"


def free_subnet() -> ipaddress.IPv4Network:
    used = proc.run(["ip", "-4", "route", "show", "table", "all"], timeout=10).stdout
    for third in range(200, 250):
        net = ipaddress.IPv4Network(f"198.18.{third}.0/24")
        if f"198.18.{third}." not in used:
            return net
    raise RuntimeError("no free /24 in 198.18.200-249 for the test hosts")


def keygen(path: Path, comment: str) -> str:
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
             timeout=20)
    os.chmod(path, 0o600)
    return Path(f"{path}.pub").read_text().strip()


@dataclass
class Host:
    name: str            # "h1": also its Host alias in the private ssh config
    netns: str
    addr: str
    addr6: str           # on the same link (the underlay of IPv6 tunnels: srv6)
    dir: Path            # private 0700 directory with this host's key, config and log
    ledger: Ledger
    sshd: proc.Process | None = None
    private_run: bool = True

    @property
    def host_key(self) -> Path:
        return self.dir / "host_ed25519_key"

    @property
    def sshd_log(self) -> Path:
        return self.dir / "sshd.log"

    def start_sshd(self, authorized_keys: Path) -> None:
        cfg = self.dir / "sshd_config"
        cfg.write_text("\n".join([
            "Port 22", "Port 2222", f"ListenAddress {self.addr}", f"HostKey {self.host_key}",
            "PidFile none", f"AuthorizedKeysFile {authorized_keys}",
            "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
            "AllowTcpForwarding local", "X11Forwarding no", "PermitTTY no", "PrintMotd no",
            "UseDNS no", "StrictModes no", "LogLevel VERBOSE", "MaxSessions 50",
            "MaxStartups 50", "ClientAliveInterval 0", ""]))
        self.sshd_log.unlink(missing_ok=True)
        private = ["--tmpfs", "/run"] if self.private_run else []
        if not self.private_run and not os.path.exists("/run/sshd"):
            os.makedirs("/run/sshd", mode=0o755)   # sshd's privilege separation directory
            self.ledger.path("/run/sshd")
        argv = [sys.executable, "-m", "tunbench.privrun", *private,
                "--tmpfs", "/root", "--mkdir", "/run/sshd", "--", SSHD, "-D", "-f", str(cfg),
                "-E", str(self.sshd_log)]
        self.sshd = proc.spawn(argv, netns=self.netns, log_path=self.dir / "privrun.log",
                               label=f"sshd-{self.name}")
        self.ledger.process(self.sshd)
        listening = f"Server listening on {self.addr} port 22"
        proc.wait_ready(self.sshd, timeout=15, ready=lambda: listening in self.log())

    def stop_sshd(self) -> None:
        """Stop the listener and every session it forked (all started by this fixture)."""
        if self.sshd is None:
            return
        for pid in self.session_pids():
            proc.kill_pid(pid, proc.proc_starttime(pid), grace=1.0)
        self.sshd.stop()
        self.sshd = None

    def log(self) -> str:
        try:
            return self.sshd_log.read_text(errors="replace")
        except OSError:
            return ""

    def session_pids(self) -> list[int]:
        """PIDs of the sshd processes serving connections (children of our listener that
        are sshd itself, not the commands they run)."""
        if self.sshd is None:
            return []
        return [pid for pid in proc.descendants(self.sshd.pid) if _exe(pid) == SSHD]

    def kill_sessions(self) -> list[int]:
        """SIGKILL the sshd processes of open connections: a connection dropped mid-use."""
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids


def comms_in(netns: str) -> set[str]:
    """Command names of the processes in a host's network namespace, read as they are: one
    that ends between the listing and the read (ProcessLookupError, FileNotFoundError) is gone,
    not an error."""
    out = set()
    for pid in proc.run(["ip", "netns", "pids", netns], timeout=10).stdout.split():
        try:
            out.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return out


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


@dataclass
class SshHosts:
    """N sshd "hosts" and the private client config that reaches them."""

    run_id: str
    dir: Path
    ledger: Ledger
    subnet: ipaddress.IPv4Network
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def client_key(self) -> Path:
        return self.dir / "client_ed25519_key"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def authorized_keys(self) -> Path:
        return self.dir / "authorized_keys"

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    def options(self, **kw: object) -> SshOptions:
        args: dict[str, object] = {"config_file": self.ssh_config, "control_dir": self.dir / "ctl",
                                   **kw}
        return SshOptions(**args)  # type: ignore[arg-type]

    def write_known_hosts(self, names_: list[str] | None = None) -> None:
        """known_hosts with the real host keys of `names_` (all hosts by default)."""
        lines = []
        for h in self.hosts.values():
            if names_ is None or h.name in names_:
                pub = Path(f"{h.host_key}.pub").read_text().split()
                lines.append(f"{h.addr},[{h.addr}]:2222 {pub[0]} {pub[1]}\n")
        self.known_hosts.write_text("".join(lines))

    def write_config(self) -> None:
        blocks = []
        for h in self.hosts.values():
            blocks.append("\n".join([
                f"Host {h.name}", f"  HostName {h.addr}", "  User root",
                f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes",
                "  IdentityAgent none", f"  UserKnownHostsFile {self.known_hosts}",
                "  GlobalKnownHostsFile /dev/null", "  CheckHostIP no", ""]))
        # ~/.ssh/config features: another Port, a ProxyJump, the key only in an ssh-agent
        h1, h2 = self.hosts["h1"], self.hosts.get("h2")
        common = [f"  UserKnownHostsFile {self.known_hosts}", "  GlobalKnownHostsFile /dev/null",
                  "  User root", "  CheckHostIP no"]
        blocks.append("\n".join([
            "Host h1-port", f"  HostName {h1.addr}", "  Port 2222", *common,
            f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes", "  IdentityAgent none",
            ""]))
        blocks.append("\n".join([
            "Host h1-agent", f"  HostName {h1.addr}", *common,
            f"  IdentityAgent {self.dir / 'agent.sock'}", ""]))
        if h2 is not None:
            blocks.append("\n".join([
                "Host h2-via-h1", f"  HostName {h2.addr}", "  ProxyJump h1", *common,
                f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes",
                "  IdentityAgent none", ""]))
        # a host no one listens on (refused) and a name that does not resolve (DNS)
        blocks.append("\n".join([
            "Host tb-nosshd", f"  HostName {self.subnet.network_address + 99}", "  User root",
            f"  IdentityFile {self.client_key}", "  IdentitiesOnly yes", "  IdentityAgent none",
            f"  UserKnownHostsFile {self.known_hosts}", "  GlobalKnownHostsFile /dev/null", ""]))
        self.ssh_config.write_text("\n".join(blocks))

    def close(self) -> list[str]:
        for h in self.hosts.values():
            h.stop_sshd()
        return self.ledger.close()


TOOLS = ("ssh", "sshd", "ssh-keygen", "ping")


def missing_tool(tools: tuple[str, ...] = TOOLS) -> str | None:
    """The first of `tools` not installed, as a skip reason naming its package; else None."""
    for tool in tools:
        if proc.which(tool) is None:
            return f"{tool} is not installed (apt-get install {proc.package_for(tool)})"
    return None


@contextmanager
def hosts_for(tmp: Path, count: int = 2, *, tools: tuple[str, ...] = TOOLS,
              private_run: bool = True) -> Iterator[SshHosts]:
    """A module's hosts (the body of every remote fixture): skipped with the missing tool
    named, built, and closed on success and failure, asserting that closing raised nothing
    and that no namespace or root link of theirs is left."""
    import pytest
    reason = missing_tool(tools)
    if reason:
        pytest.skip(reason)
    h = build(tmp, count=count, private_run=private_run)
    rid = h.run_id
    try:
        yield h
    finally:
        errors = h.close()
        left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
        links = [n for n in netlink.link_names(None) if n.startswith(f"tb{rid}")]
        assert not errors, errors
        assert not left, f"namespaces left behind: {left}"
        assert not links, f"root links left behind: {links}"


def build(tmp: Path, count: int = 2, private_run: bool = True) -> SshHosts:
    """Create the management network and `count` sshd hosts (h1, h2, ...); with
    `private_run` False they share this machine's /run."""
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    hosts = SshHosts(rid, tmp, ledger, free_subnet())
    try:
        _build_network(hosts, count)
        for h in hosts.hosts.values():
            h.private_run = private_run
        keygen(hosts.client_key, "tunbench-test-client")
        hosts.authorized_keys.write_text(Path(f"{hosts.client_key}.pub").read_text())
        for h in hosts.hosts.values():
            keygen(h.host_key, f"tunbench-test-{h.name}")
        hosts.write_known_hosts()
        hosts.write_config()
        for h in hosts.hosts.values():
            h.start_sshd(hosts.authorized_keys)
    except BaseException:
        hosts.close()
        raise
    return hosts


def _build_network(hosts: SshHosts, count: int) -> None:
    rid, ledger, net = hosts.run_id, hosts.ledger, hosts.subnet
    mgmt = names.netns_name(rid, "m")
    netlink.create_netns(mgmt)
    ledger.netns(mgmt)
    br, m0, m1 = (names.link_name(rid, s) for s in ("br", "m0", "m1"))
    netlink.add_link(mgmt, br, "bridge")
    with netlink.ipr(None) as ip:   # the one root-namespace object: our end of the mgmt link
        ip.link("add", ifname=m0, kind="veth", peer={"ifname": m1, "net_ns_fd": mgmt})
    ledger.link(m0, None)
    with netlink.ipr(None) as ip:
        idx = netlink.index(ip, m0)
        ip.addr("add", index=idx, address=str(net.network_address + 1), prefixlen=24)
        ip.link("set", index=idx, state="up")
    netlink.set_link(mgmt, m1, master=_idx(mgmt, br), state="up")
    netlink.set_link(mgmt, br, state="up")
    for i in range(1, count + 1):
        name = f"h{i}"
        ns = names.netns_name(rid, name)
        netlink.create_netns(ns)
        ledger.netns(ns)
        inner, port = names.link_name(rid, f"h{i}"), names.link_name(rid, f"p{i}")
        netlink.add_veth(inner, ns, port, mgmt)
        netlink.set_link(mgmt, port, master=_idx(mgmt, br), state="up")
        addr = str(net.network_address + 10 + i)
        netlink.add_addr(ns, inner, f"{addr}/24")
        # a ULA: outside the tunnels' inner range 2001:2::/48, so no inner route shadows it
        addr6 = f"fd54:6200:{net.network_address.packed[2]}::{10 + i}"
        netlink.add_addr(ns, inner, f"{addr6}/64")
        netlink.set_link(ns, inner, state="up")
        netlink.set_link(ns, "lo", state="up")
        hdir = hosts.dir / name
        hdir.mkdir(mode=0o700)
        hosts.hosts[name] = Host(name, ns, addr, addr6, hdir, ledger)
    _wait_reachable(hosts)


def _idx(netns: str, ifname: str) -> int:
    with netlink.ipr(netns) as ip:
        return netlink.index(ip, ifname)


def _wait_reachable(hosts: SshHosts, timeout: float = 10.0) -> None:
    """The bridge forwards once its ports leave the listening state: wait for a ping."""
    deadline = time.monotonic() + timeout
    for h in hosts.hosts.values():
        while proc.run(["ping", "-c1", "-W1", h.addr], check=False, timeout=5).returncode:
            if time.monotonic() > deadline:
                raise RuntimeError(f"test host {h.name} ({h.addr}) not reachable")


@dataclass
class Orchestrator:
    """A network namespace on the hosts' bridge where a test runs tunbench itself: the
    `local` site of that run (orchestrator(hosts))."""

    run_id: str
    netns: str
    link: str            # its end of the veth to the hosts' bridge
    addr: str

    def tunbench(self, *args: str | Path, timeout: float = 900) -> proc.Completed:
        """`python -m tunbench ARGS` inside the namespace (`ip netns exec`, through proc.run),
        this interpreter and environment (PYTHONPATH: the code under test)."""
        return proc.run([sys.executable, "-m", "tunbench", *map(str, args)], netns=self.netns,
                        timeout=timeout, check=False)

    def leftovers(self) -> list[str]:
        """What is in the namespace beyond what orchestrator() made: links, addresses (its
        own, loopback and link-local aside), routes, processes."""
        out = [f"link {n}" for n in netlink.link_names(self.netns) if n not in ("lo", self.link)]
        for line in proc.run(["ip", "-o", "addr", "show"], netns=self.netns).stdout.splitlines():
            fields = line.split()
            addr = fields[3] if len(fields) > 3 else ""
            if addr.split("/")[0] not in (self.addr, "127.0.0.1", "::1") \
                    and not addr.startswith("fe80:"):
                out.append(f"address {addr} on {fields[1]}")
        for fam in ("-4", "-6"):
            for line in proc.run(["ip", fam, "route", "show", "table", "all"],
                                 netns=self.netns).stdout.splitlines():
                if " dev lo " not in f"{line} " and f" dev {self.link} " not in f"{line} ":
                    out.append(f"route {line}")
        out += [f"process {pid}" for pid in
                proc.run(["ip", "netns", "pids", self.netns], timeout=10).stdout.split()]
        return out


@contextmanager
def orchestrator(hosts: SshHosts, host_part: int = 5) -> Iterator[Orchestrator]:
    """A namespace of its own (run id apart from the hosts') with a veth to the hosts'
    bridge and 198.18.N.<host_part>, every object in its own ledger; removed when the block
    ends, a test's failure or not (and then checked gone)."""
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken | {hosts.run_id})
    ns = names.netns_name(rid, "o")
    inner, port = names.link_name(rid, "o0"), names.link_name(rid, "o1")
    mgmt = names.netns_name(hosts.run_id, "m")
    addr = str(hosts.subnet.network_address + host_part)
    ledger = Ledger(rid)
    try:
        netlink.create_netns(ns)
        ledger.netns(ns)
        netlink.add_veth(inner, ns, port, mgmt)
        ledger.link(port, mgmt)
        netlink.set_link(mgmt, port, master=_idx(mgmt, names.link_name(hosts.run_id, "br")),
                         state="up")
        netlink.add_addr(ns, inner, f"{addr}/{hosts.subnet.prefixlen}")
        netlink.set_link(ns, inner, state="up")
        netlink.set_link(ns, "lo", state="up")
        deadline = time.monotonic() + 10
        for h in hosts.hosts.values():   # the bridge port forwards once out of listening
            while proc.run(["ping", "-c1", "-W1", h.addr], netns=ns, check=False,
                           timeout=5).returncode:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"test host {h.name} ({h.addr}) not reachable from {ns}")
        yield Orchestrator(rid, ns, inner, addr)
    finally:
        errors = ledger.close()
    left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
    ports = [n for n in netlink.link_names(mgmt) if n.startswith(f"tb{rid}")]
    assert not errors, errors
    assert not left and not ports, (left, ports)
