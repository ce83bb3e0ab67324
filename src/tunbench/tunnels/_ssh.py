"""Shared parts of the SSH kinds (ssh-tun, ssh-forward): keys, sshd in site b, ssh in site a.

Per run: an ed25519 host key made by site b's own ssh-keygen and an ed25519 client key made
by site a's (files 0600 in a private 0700 directory of the case directory on the host that
uses them: a private key never crosses hosts), a known_hosts line we write on a, our own
sshd_config (on b) and ssh config (on a). sshd runs in site b in the foreground (-D, so we hold
its PID), listening only on site b's underlay address, logging to a file there (-E), with
a private tmpfs on /run (privrun) holding /run/sshd, and `PidFile none`: it never reads
/etc/ssh host keys or writes the system's /run/sshd.pid. The client runs in site a with `-F`
(so neither /etc/ssh/ssh_config nor ~/.ssh is read or created), BatchMode, no agent, strict
host key checking against our known_hosts.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..capabilities import Missing, kernel_missing, tool_missing
from ..errors import CommandFailed
from ..testbed.base import Site, Testbed
from . import daemon
from .base import KernelOption, Needs, Tool, TunnelParams

DEFAULT_CIPHER = "aes128-gcm@openssh.com"
HOST_ALIAS = "tunbench-b"
# Ciphers offered when `ssh -Q cipher` cannot be asked (ssh not installed: requirements says so)
KNOWN_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
                 "chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr")


@functools.lru_cache(maxsize=1)
def supported_ciphers() -> tuple[str, ...]:
    """`ssh -Q cipher` of this host (read-only)."""
    if not proc.which("ssh"):
        return KNOWN_CIPHERS
    r = proc.run(["ssh", "-Q", "cipher"], timeout=10, check=False)
    return tuple(line.strip() for line in r.stdout.splitlines() if line.strip()) or KNOWN_CIPHERS


@dataclass(frozen=True)
class SshParams(TunnelParams):
    cipher: str = field(default=DEFAULT_CIPHER, metadata={
        "help": "SSH cipher (one of `ssh -Q cipher`)"})
    port: int = field(default=22, metadata={"help": "sshd port on site b's underlay address"})

    def validate(self) -> list[str]:
        problems = []
        ciphers = supported_ciphers()
        if self.cipher not in ciphers:
            problems.append(f"unknown cipher {self.cipher!r} (this ssh offers: "
                            f"{', '.join(ciphers)})")
        if not 0 < self.port < 65536:
            problems.append(f"port {self.port} out of range (1..65535)")
        return problems


TOOLS = (Tool("ssh", "openssh-client", "the SSH client in site a", ("-V",)),
         Tool("ssh-keygen", "openssh-client", "per-run host and client keys", ()),
         Tool("sshd", "openssh-server", "the SSH server in site b", ("-V",)),
         Tool("ss", "iproute2", "readiness and TCP counters of the SSH connection", ("-V",)))
TUN = KernelOption("CONFIG_TUN", "tun", "ssh -w tun devices")
NEEDS = Needs(tools=TOOLS)
TUN_NEEDS = Needs(tools=TOOLS, kernel=(TUN,))


def ssh_requirements() -> list[Missing]:
    found = [tool_missing(t.name, t.why) for t in TOOLS]
    return [m for m in found if m]


def tun_requirements() -> list[Missing]:
    found = [kernel_missing(TUN.option, TUN.why, TUN.module)]
    if not Path("/dev/net/tun").exists():
        found.append(Missing("/dev/net/tun", "the TUN device node is missing",
                             "mknod /dev/net/tun c 10 200"))
    return [m for m in found if m]


def framing_overhead(cipher: str) -> int:
    """Worst-case bytes one tun packet gains inside the SSH transport (RFC 4253/4254): 4-byte
    tun address-family header, SSH_MSG_CHANNEL_DATA (1 type + 4 channel + 4 length), packet
    length 4 + padding length 1, padding 4 .. 3+block, MAC/tag 16."""
    block = 8 if cipher.startswith("chacha20") else 16
    mac = 16 if ("gcm" in cipher or "poly1305" in cipher) else 32  # ctr: hmac-sha2-256
    return 4 + 9 + 4 + 1 + (3 + block) + mac


@dataclass
class SshFiles:
    """Paths on the host of the site that uses them: client side on a, server side on b."""
    site_a: Site
    site_b: Site
    client_key: Path       # on a
    known_hosts: Path      # on a
    ssh_config: Path       # on a
    host_key: Path         # on b
    authorized_keys: Path  # on b
    sshd_config: Path      # on b
    sshd_log: Path         # on b

    def sshd_log_text(self) -> str:
        try:
            return self.site_b.read_file(self.sshd_log).decode(errors="replace")
        except (OSError, CommandFailed):
            return ""


def _keydir(tb: Testbed, site: Site) -> Path:
    d = tb.site_dir(site) / f"ssh-{site.name}"
    site.make_dir(tb.ledger, d)
    return d


def _keygen(tb: Testbed, site: Site, key: Path, comment: str) -> str:
    """A fresh ed25519 key made on the host that uses it; returns its public line."""
    site.record_leftover(tb.ledger, key)
    site.record_leftover(tb.ledger, f"{key}.pub")
    site.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
             timeout=20)
    return site.read_file(f"{key}.pub").decode().strip()


def make_keys(tb: Testbed) -> SshFiles:
    """Per-run keys and files in a private directory (0700, files 0600) of the case
    directory on each site's host."""
    da, db = _keydir(tb, tb.a), _keydir(tb, tb.b)
    f = SshFiles(tb.a, tb.b, da / "client_ed25519_key", da / "known_hosts", da / "ssh_config",
                 db / "host_ed25519_key", db / "authorized_keys", db / "sshd_config",
                 tb.site_dir(tb.b) / "sshd-b.sshd.log")
    host_pub = _keygen(tb, tb.b, f.host_key, "tunbench-host").split()
    client_pub = _keygen(tb, tb.a, f.client_key, "tunbench-client")
    _write(tb, tb.a, f.known_hosts, f"{HOST_ALIAS} {host_pub[0]} {host_pub[1]}\n")
    _write(tb, tb.b, f.authorized_keys, client_pub + "\n")
    tb.b.record_leftover(tb.ledger, f.sshd_log)
    return f


def _write(tb: Testbed, site: Site, path: Path, text: str) -> None:
    site.write_file(tb.ledger, path, text.encode(), 0o600)


def sshd_config_text(f: SshFiles, listen: str, port: int, cipher: str, *,
                     permit_tunnel: str = "no", tcp_forwarding: str = "no") -> str:
    return "\n".join([
        f"Port {port}", f"ListenAddress {listen}", f"HostKey {f.host_key}", "PidFile none",
        f"AuthorizedKeysFile {f.authorized_keys}", "AuthorizedPrincipalsFile none",
        "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no", "UsePAM no", f"Ciphers {cipher}",
        f"PermitTunnel {permit_tunnel}", f"AllowTcpForwarding {tcp_forwarding}",
        "GatewayPorts no", "X11Forwarding no", "AllowAgentForwarding no", "PermitTTY no",
        "PrintMotd no", "PrintLastLog no", "UseDNS no", "StrictModes yes", "LogLevel INFO",
        "ClientAliveInterval 0", "",
    ])


def ssh_config_text(f: SshFiles, host: str, port: int, cipher: str, extra: list[str]) -> str:
    lines = [f"Host {HOST_ALIAS}", f"  HostName {host}", f"  Port {port}", "  User root",
             f"  HostKeyAlias {HOST_ALIAS}", f"  IdentityFile {f.client_key}",
             "  IdentitiesOnly yes", "  IdentityAgent none", f"  UserKnownHostsFile "
             f"{f.known_hosts}", "  GlobalKnownHostsFile /dev/null",
             "  StrictHostKeyChecking yes", "  UpdateHostKeys no", "  BatchMode yes",
             f"  Ciphers {cipher}", "  Compression no", "  ControlMaster no",
             "  ControlPath none", "  ForwardAgent no", "  ForwardX11 no",
             "  ExitOnForwardFailure yes", "  ServerAliveInterval 5",
             "  ServerAliveCountMax 3", "  PermitLocalCommand no", "  LogLevel ERROR",
             *[f"  {x}" for x in extra]]
    return "\n".join(lines) + "\n"


def start_sshd(tb: Testbed, f: SshFiles, params: SshParams, **cfg: str) -> proc.Process:
    """sshd in site b, foreground, private /run; ready when it logs that it listens."""
    site = tb.b
    _write(tb, site, f.sshd_config, sshd_config_text(f, site.underlay4, params.port, params.cipher,
                                               **cfg))
    sshd = site.which("sshd")   # sshd re-execs itself: started by its absolute path there
    argv = [sshd, "-D", "-f", str(f.sshd_config), "-E", str(f.sshd_log)]
    listening = f"Server listening on {site.underlay4} port {params.port}"
    try:
        return daemon.start(tb, site, argv, "sshd", private_run=("/run",),
                            mkdirs=("/run/sshd",),
                            ready=lambda: listening in f.sshd_log_text())
    except CommandFailed as exc:
        raise CommandFailed(f"{exc.message}; sshd log: {_tail(f)}", exc.hint,
                            argv=exc.argv, output=exc.output) from None


def start_client(tb: Testbed, f: SshFiles, params: SshParams, extra: list[str]
                 ) -> proc.Process:
    """ssh in site a with only our config (-F), no remote command (-N)."""
    _write(tb, tb.a, f.ssh_config, ssh_config_text(f, tb.b.underlay4, params.port, params.cipher,
                                             extra))
    return tb.spawn(tb.a, ["ssh", "-F", str(f.ssh_config), "-N", HOST_ALIAS], "ssh-a")


def wait_for(p: proc.Process, check: object, what: str, f: SshFiles,
             timeout: float = 15.0) -> None:
    try:
        daemon.wait_ready(p, ready=check, timeout=timeout)  # type: ignore[arg-type]
    except CommandFailed as exc:
        raise CommandFailed(f"{what}: {exc.message}; sshd log: {_tail(f)}",
                            "see the case's error_log", argv=exc.argv,
                            output=exc.output) from None


def _tail(f: SshFiles) -> str:
    lines = f.sshd_log_text().strip().splitlines()
    return lines[-1] if lines else "empty or no log"


# The titles of sshd's per-connection processes before authentication has finished: the
# connection's monitor ("sshd: [accepted]") and its unprivileged child ("sshd: [net]",
# "[preauth]" in older releases), which exits once the login succeeds
PREAUTH_TITLES = ("[accepted]", "[net]", "[preauth]")


def register_sessions(tb: Testbed, sshd: proc.Process, timeout: float = 5.0) -> list[int]:
    """Register sshd's per-connection processes in the ledger (SIGTERM to the listener does
    not end established sessions; they run in sessions of their own) and return their
    PIDs. Only once the connection is past authentication: the client opens its forwards
    when the login succeeds, a moment before sshd's pre-auth child exits, and on a loaded
    host that child was registered, its normal exit then read as the datapath daemon dying
    mid-measurement. Site b's adopt_children waits for that, on its own host (this one's
    /proc, or a remote site's agent): no descendant titled as in PREAUTH_TITLES; past
    `timeout` it registers what is there."""
    deadline = time.monotonic() + timeout
    pids: list[int] = []
    while True:
        left = max(0.0, deadline - time.monotonic())
        pids = tb.b.adopt_children(tb.ledger, sshd, "sshd-session-b", grace=2.0,
                                   settle_titles=PREAUTH_TITLES, settle_timeout=left)
        if pids or not left:
            break
        time.sleep(0.05)
    return pids


_BYTES = re.compile(r"\b(bytes_sent|bytes_acked|bytes_received|segs_out|segs_in):(\d+)")


def parse_ss_tcp_info(text: str) -> dict[str, int]:
    """`ss -tinH ...` -> byte/segment counters summed over the listed connections (pure)."""
    out: dict[str, int] = {}
    for m in _BYTES.finditer(text):
        out[m[1]] = out.get(m[1], 0) + int(m[2])
    return out


def ssh_tcp_counters(site: Site, port: int, server_side: bool) -> dict[str, int]:
    """TCP counters of the SSH connection(s) on the underlay (port `port`) in a site."""
    sel = "sport" if server_side else "dport"
    r = site.run(["ss", "-tinH", "state", "established", "(", sel, "=", f":{port}", ")"],
                 timeout=10)
    return {f"ssh_tcp_{k}": v for k, v in parse_ss_tcp_info(r.stdout).items()}
