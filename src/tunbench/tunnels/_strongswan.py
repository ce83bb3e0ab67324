"""strongSwan charon per site: configuration files, start, vici readiness, swanctl calls.

Every charon gets its own STRONGSWAN_CONF (in the case's private workdir) and a private tmpfs
on /run (its pid file path /run/charon.pid is compiled in), started through tunnels/daemon.
Its vici socket is configured into the workdir, so swanctl reaches it by `--uri` from anywhere
(no shared /run needed). charon logs to stderr, which tb.spawn writes to
<workdir>/charon<i>-<site>.log: the runner attaches those tails when a case fails.
Pure functions render the configuration text and parse `swanctl --list-sas` (tested on
captured real output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..testbed.base import Site, Testbed
from . import daemon

# Plugins charon loads (explicit list: nothing else from /etc/strongswan.d is read).
CRYPTO_PLUGINS = "random nonce openssl aes gcm sha1 sha2 hmac kdf pem pkcs1 x509 pubkey"
CHARON_PLUGINS = {
    "libipsec": f"{CRYPTO_PLUGINS} kernel-libipsec kernel-netlink socket-default vici",
    "kernel": f"{CRYPTO_PLUGINS} kernel-netlink socket-default vici",
}
SWANCTL_PLUGINS = "pem pkcs1 x509 pubkey openssl random nonce"

# cipher parameter -> (strongSwan ESP proposal, IKE proposal)
PROPOSALS = {
    "aes-gcm-128": ("aes128gcm16", "aes128gcm16-prfsha256-ecp256"),
    "aes-gcm-256": ("aes256gcm16", "aes256gcm16-prfsha384-ecp384"),
    "chacha20-poly1305": ("chacha20poly1305", "chacha20poly1305-prfsha256-ecp256"),
}


@dataclass(frozen=True)
class ChildConf:
    """One IPsec tunnel (one IKE_SA with one CHILD_SA) as configured in one site."""

    name: str
    local_addr: str
    remote_addr: str
    port: int                  # IKE port on both ends (NAT-T port when encap is on)
    local_id: str
    remote_id: str
    local_ts: list[str]
    remote_ts: list[str]
    mode: str = "tunnel"
    encap: bool = True
    cipher: str = "aes-gcm-128"
    if_id: int = 0             # kernel xfrm interface id (route-based), 0 = none
    psk_file: str = ""         # include file holding the secrets section (0600)
    reqid: int = 0             # fixed reqid of its SAs and policies (0: charon's choice);
    #                            kernel ESP uses tunbench's (_xfrm.tb_id) to undo exactly them


@dataclass(frozen=True)
class CharonConf:
    impl: str                  # "libipsec" or "kernel"
    vici: Path
    port: int = 500
    port_nat_t: int = 4500
    # kernel-libipsec (5.9.8) installs routes for the remote TS whatever install_routes says:
    # they go to a table of their own whose rule comes after main, so the driver's routes
    # (main: connected and ECMP) decide, and several charons never collide.
    routing_table: int = 220
    routing_table_prio: int = 32800
    extra: dict[str, str] = field(default_factory=dict)


def strongswan_conf(c: CharonConf) -> str:
    """charon's strongswan.conf (pure)."""
    return f"""# written by tunbench for one site's charon
charon {{
    load = {CHARON_PLUGINS[c.impl]}
    port = {c.port}
    port_nat_t = {c.port_nat_t}
    install_routes = no
    install_virtual_ip = no
    routing_table = {c.routing_table}
    routing_table_prio = {c.routing_table_prio}
    retransmit_tries = 3
    retransmit_timeout = 1.0
    filelog {{
        stderr {{
            time_format = %T
            default = 1
            ike_name = yes
            flush_line = yes
        }}
    }}
    syslog {{
    }}
    plugins {{
        vici {{
            socket = unix://{c.vici}
        }}
        kernel-libipsec {{
            allow_peer_ts = yes
        }}
    }}
}}
swanctl {{
    load = {SWANCTL_PLUGINS}
    socket = unix://{c.vici}
}}
"""


def swanctl_conf(children: list[ChildConf]) -> str:
    """swanctl.conf with one connection per tunnel (pure). Secrets come from include files."""
    lines = ["connections {"]
    for ch in children:
        esp, ike = PROPOSALS[ch.cipher]
        lines += [
            f"    {ch.name} {{",
            "        version = 2",
            f"        local_addrs = {ch.local_addr}",
            f"        remote_addrs = {ch.remote_addr}",
            f"        local_port = {ch.port}",
            f"        remote_port = {ch.port}",
            f"        encap = {'yes' if ch.encap else 'no'}",
            f"        proposals = {ike}",
            "        dpd_delay = 0",
            "        rekey_time = 0",
            f"        local {{ auth = psk\n            id = {ch.local_id} }}",
            f"        remote {{ auth = psk\n            id = {ch.remote_id} }}",
            "        children {",
            f"            {ch.name} {{",
            f"                mode = {ch.mode}",
            f"                local_ts = {','.join(ch.local_ts)}",
            f"                remote_ts = {','.join(ch.remote_ts)}",
            f"                esp_proposals = {esp}",
            "                rekey_time = 0",
            "                start_action = none",
        ]
        if ch.if_id:
            lines += [f"                if_id_in = {ch.if_id}", f"                if_id_out = {ch.if_id}"]
        if ch.reqid:
            lines.append(f"                reqid = {ch.reqid}")
        lines += ["            }", "        }", "    }"]
    lines.append("}")
    for ch in children:
        if ch.psk_file:
            lines.append(f"include {ch.psk_file}")
    return "\n".join(lines) + "\n"


def psk_section(name: str, ids: tuple[str, str], secret_hex: str) -> str:
    """The secrets section of one tunnel's PSK (written with tb.write_secret, never logged)."""
    return (f"secrets {{\n    ike-{name} {{\n        id-1 = {ids[0]}\n        id-2 = {ids[1]}\n"
            f"        secret = 0x{secret_hex}\n    }}\n}}\n")


def charon_path(site: Site) -> str:
    """charon is not on PATH (Debian: /usr/lib/ipsec, Fedora: /usr/libexec/strongswan)."""
    return site.which("charon")


def swanctl(site: Site, vici: Path, conf: Path, args: list[str],
            timeout: float = 20.0, check: bool = True) -> proc.Completed:
    """Run swanctl against one site's charon (its vici socket, its STRONGSWAN_CONF)."""
    return site.run(["swanctl", *args, "--uri", f"unix://{vici}"], timeout=timeout,
                    check=check, env={"STRONGSWAN_CONF": str(conf)})


def start_charon(tb: Testbed, site: Site, label: str, conf: Path, vici: Path) -> proc.Process:
    """charon in `site` with a private /run; ready when its vici socket answers."""
    def answers() -> bool:
        return site.exists(vici) and swanctl(site, vici, conf, ["--stats"], timeout=5,
                                             check=False).ok
    site.record_leftover(tb.ledger, vici)
    return daemon.start(tb, site, [charon_path(site)], label, ready=answers, timeout=20,
                        env={"STRONGSWAN_CONF": str(conf)}, private_run=("/run",))


# ---- parsing `swanctl --list-sas` -----------------------------------------------------
_CHILD_RE = re.compile(r"^\s+(?P<name>[\w.-]+): #(?P<id>\d+), reqid (?P<reqid>\d+), "
                       r"(?P<state>[A-Z_]+), (?P<mode>[A-Za-z_-]+)(?:, (?P<proto>\S+))?")
_IKE_RE = re.compile(r"^(?P<name>[\w.-]+): #(?P<id>\d+), (?P<state>[A-Z_]+), IKEv(?P<v>\d)")
_TRAFFIC_RE = re.compile(r"^\s+(?P<dir>in|out)\s+(?P<spi>[0-9a-f]+)(?:\s*\([^)]*\))?,\s+"
                         r"(?P<bytes>\d+) bytes,\s+(?P<packets>\d+) packets")


def parse_list_sas(text: str) -> dict[str, dict[str, object]]:
    """`swanctl --list-sas` -> {child name: {state, mode, ike_state, in/out bytes+packets}}.

    Pure; tested on captured output. Children of several IKE_SAs are keyed by child name.
    """
    out: dict[str, dict[str, object]] = {}
    ike_state = ""
    cur: dict[str, object] | None = None
    for line in text.splitlines():
        m = _IKE_RE.match(line)
        if m:
            ike_state, cur = m["state"], None
            continue
        m = _CHILD_RE.match(line)
        if m:
            cur = {"state": m["state"], "mode": m["mode"], "proto": m["proto"] or "",
                   "ike_state": ike_state, "in_bytes": 0, "in_packets": 0,
                   "out_bytes": 0, "out_packets": 0}
            out[m["name"]] = cur
            continue
        m = _TRAFFIC_RE.match(line)
        if m and cur is not None:
            cur[f"{m['dir']}_bytes"] = int(m["bytes"])
            cur[f"{m['dir']}_packets"] = int(m["packets"])
    return out
