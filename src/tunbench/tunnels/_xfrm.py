"""Kernel ESP pieces for the ipsec kind: xfrm interfaces and static-key SAs (`ip xfrm`).

impl "xfrm" sets up SAs and policies with static keys generated per run. The keys never
appear on a command line: the `ip xfrm` commands are written into a 0600 batch file in the
case's private workdir (tb.write_secret) and run with `ip -batch FILE`.
Route-based (tunnel mode): each tunnel is an xfrm interface with its own if_id; policies match
everything routed through that interface (0.0.0.0/0, ::/0 with that if_id), so the routing
table (and ECMP over several interfaces) decides which SA carries a flow.

Teardown removes exactly what tunbench created, never a host's own IPsec (no `ip xfrm state
flush` / `policy flush`): our if_ids and reqids carry the project prefix in their high bytes
(`tb_id`: 0x7462nnnn, never the small numbers hosts and IKE daemons use), SAs are deleted by
`ip xfrm state deleteall` filtered by their ID (src, dst, proto, SPI) and reqid, or by reqid
alone for the SAs charon negotiated (their SPIs are chosen by IKE), policies one by one by
selector, direction and if_id (`ip xfrm policy delete`). Transport mode has no if_id: its
selectors are the underlay addresses themselves, so a host that already has a policy for them
is refused before anything is added (`check_transport_free`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UnavailableError
from ..testbed.base import Site, Testbed

ID_BASE = 0x74620000     # "tb" in the high 16 bits of our if_ids and reqids
GONE = ("No such file or directory", "No such process")   # ENOENT/ESRCH: already gone

# cipher parameter -> (kernel AEAD name, key bytes including the 4-byte salt, ICV bits)
AEADS = {
    "aes-gcm-128": ("rfc4106(gcm(aes))", 16 + 4, 128),
    "aes-gcm-256": ("rfc4106(gcm(aes))", 32 + 4, 128),
    "chacha20-poly1305": ("rfc7539esp(chacha20,poly1305)", 32 + 4, 128),
}


@dataclass(frozen=True)
class StaticSa:
    """One direction of one tunnel: src -> dst underlay addresses, SPI, key."""

    src: str
    dst: str
    spi: int
    key_hex: str
    reqid: int


@dataclass(frozen=True)
class Policy:
    """What identifies one xfrm policy for deletion: selector, direction, if_id (0: none)."""

    src: str
    dst: str
    dir: str
    if_id: int = 0


def tb_id(n: int) -> int:
    """Our n-th if_id / reqid (n < 65536): 0x7462nnnn."""
    return ID_BASE + n


def static_reqids(i: int) -> tuple[int, int]:
    """reqids of static tunnel i's two SAs (a -> b, b -> a)."""
    return tb_id(0x100 + 2 * i), tb_id(0x101 + 2 * i)


def new_sa(src: str, dst: str, cipher: str, reqid: int) -> StaticSa:
    _, key_len, _ = AEADS[cipher]
    spi = 0x100 + secrets.randbelow(0x7FFFFF00)
    return StaticSa(src, dst, spi, secrets.token_hex(key_len), reqid)


def state_line(sa: StaticSa, cipher: str, mode: str, if_id: int) -> str:
    """One `ip -batch` line adding the SA (pure)."""
    name, _, icv = AEADS[cipher]
    line = (f"xfrm state add src {sa.src} dst {sa.dst} proto esp spi 0x{sa.spi:08x} "
            f"reqid {sa.reqid} mode {mode} aead {name} 0x{sa.key_hex} {icv}")
    return line + (f" if_id {if_id}" if if_id else "")


def selectors(mode: str, local: str, remote: str) -> list[tuple[str, str]]:
    """(local side, remote side) selectors (pure): tunnel mode with an xfrm interface matches
    everything routed through it (its if_id); transport mode the two underlay addresses."""
    if mode == "tunnel":
        return [("0.0.0.0/0", "0.0.0.0/0"), ("::/0", "::/0")]
    plen = "32" if ":" not in local else "128"
    return [(f"{local}/{plen}", f"{remote}/{plen}")]


def policy_lines(out_sa: StaticSa, in_sa: StaticSa, mode: str, if_id: int) -> list[str]:
    """Policies of one site (pure): what leaves through `out_sa`, what must arrive via `in_sa`."""
    lines = []
    for src, dst in selectors(mode, out_sa.src, out_sa.dst):
        for direction, sa, (s, d) in (("out", out_sa, (src, dst)), ("in", in_sa, (dst, src))):
            line = (f"xfrm policy add src {s} dst {d} dir {direction} "
                    f"tmpl src {sa.src} dst {sa.dst} proto esp reqid {sa.reqid} mode {mode}")
            lines.append(line + (f" if_id {if_id}" if if_id else ""))
    return lines


def static_policies(out_sa: StaticSa, mode: str, if_id: int) -> list[Policy]:
    """The policies policy_lines adds (pure), as deletion keys."""
    out = []
    for src, dst in selectors(mode, out_sa.src, out_sa.dst):
        out += [Policy(src, dst, "out", if_id), Policy(dst, src, "in", if_id)]
    return out


def charon_policies(mode: str, local: str, remote: str, if_id: int) -> list[Policy]:
    """What charon's kernel-netlink plugin installs for one CHILD_SA (pure): out and in, and
    fwd for what arrives (tunnel mode; transport too in recent versions): deletion keys, each
    tolerated when absent."""
    out = []
    for src, dst in selectors(mode, local, remote):
        out += [Policy(src, dst, "out", if_id), Policy(dst, src, "in", if_id),
                Policy(dst, src, "fwd", if_id)]
    return out


def delete_sa_argv(sa: StaticSa) -> list[str]:
    """Exactly this SA: ID and reqid; `deleteall` exits 0 when nothing matches (pure)."""
    return ["ip", "xfrm", "state", "deleteall", "src", sa.src, "dst", sa.dst, "proto", "esp",
            "spi", f"0x{sa.spi:08x}", "reqid", str(sa.reqid)]


def delete_reqid_argv(reqid: int) -> list[str]:
    """Every SA of one of our reqids (charon's: SPIs negotiated by IKE) (pure)."""
    return ["ip", "xfrm", "state", "deleteall", "reqid", str(reqid)]


def delete_policy_argv(p: Policy) -> list[str]:
    """One policy by selector, direction and if_id (pure); never `deleteall`, which cannot
    filter by if_id and would take a host's own policy with the same selector."""
    argv = ["ip", "xfrm", "policy", "delete", "src", p.src, "dst", p.dst, "dir", p.dir]
    return argv + (["if_id", str(p.if_id)] if p.if_id else [])


def register_undo(tb: Testbed, site: Site, *, sas: Sequence[StaticSa] = (),
                  reqids: Sequence[int] = (), policies: Sequence[Policy] = ()) -> None:
    """Undo exactly our SAs and policies on `site` (recorded before they are added; each one
    already gone is not a failure). Policies go first at teardown (newest first), then SAs."""
    for sa in sas:
        site.record_command(tb.ledger, delete_sa_argv(sa), GONE)
    for reqid in reqids:
        site.record_command(tb.ledger, delete_reqid_argv(reqid), GONE)
    for p in policies:
        site.record_command(tb.ledger, delete_policy_argv(p), GONE)


def check_transport_free(site: Site, local: str, remote: str) -> None:
    """Transport-mode policies have no if_id of ours to tell them apart: refuse, before any
    change, a host that already has a policy between the two underlay addresses (adding ours
    would fail, and deleting by selector at teardown would take the host's own)."""
    for p in static_policies(StaticSa(local, remote, 0, "", 0), "transport", 0):
        r = site.run(["ip", "xfrm", "policy", "get", "src", p.src, "dst", p.dst, "dir", p.dir],
                     check=False, timeout=10)
        if r.ok:
            raise UnavailableError(
                f"site {site.name} ({site.where}) already has an IPsec policy {p.src} -> "
                f"{p.dst} dir {p.dir} that tunbench did not create: transport mode between "
                "these addresses would collide with it",
                "use mode=tunnel (its policies are tied to tunbench's own xfrm interfaces) or "
                "other underlay addresses")


def add_xfrm_interface(tb: Testbed, site: Site, ifname: str, if_id: int) -> None:
    site.record_link(tb.ledger, ifname)
    site.run(["ip", "link", "add", ifname, "type", "xfrm", "dev", site.underlay_if,
              "if_id", str(if_id)], timeout=15)


def install_static(tb: Testbed, site: Site, name: str, lines: list[str]) -> None:
    """Run the batch of `ip xfrm` lines in `site` from a 0600 file (keys stay off argv)."""
    path = tb.write_secret(f"{name}-{site.name}.xfrm", "\n".join(lines) + "\n", site)
    site.run(["ip", "-batch", str(path)], timeout=20)


def parse_xfrm_state_stats(text: str) -> dict[str, int]:
    """Sum of `ip -s xfrm state` lifetime current bytes/packets (pure)."""
    total = {"sa_bytes": 0, "sa_packets": 0}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("lifetime current:") and i + 1 < len(lines):
            parts = lines[i + 1].split()
            # "1234(bytes), 56(packets)"
            for part in parts:
                num, _, unit = part.rstrip(",").partition("(")
                if num.isdigit() and unit.startswith("bytes"):
                    total["sa_bytes"] += int(num)
                elif num.isdigit() and unit.startswith("packets"):
                    total["sa_packets"] += int(num)
    return total
