"""Kernel ESP pieces for the ipsec kind: xfrm interfaces and static-key SAs (`ip xfrm`).

impl "xfrm" sets up SAs and policies with static keys generated per run. The keys never
appear on a command line: the `ip xfrm` commands are written into a 0600 batch file in the
case's private workdir (tb.write_secret) and run with `ip -batch FILE`.
Route-based (tunnel mode): each tunnel is an xfrm interface with its own if_id; policies match
everything routed through that interface (0.0.0.0/0, ::/0 with that if_id), so the routing
table (and ECMP over several interfaces) decides which SA carries a flow.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from ..testbed.base import Site, Testbed

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


def policy_lines(out_sa: StaticSa, in_sa: StaticSa, mode: str, if_id: int) -> list[str]:
    """Policies of one site (pure): what leaves through `out_sa`, what must arrive via `in_sa`.

    Tunnel mode with an xfrm interface matches everything routed through it (if_id);
    transport mode protects the traffic between the two underlay addresses.
    """
    lines = []
    if mode == "tunnel":
        selectors = [("0.0.0.0/0", "0.0.0.0/0"), ("::/0", "::/0")]
    else:
        plen = "32" if ":" not in out_sa.src else "128"
        selectors = [(f"{out_sa.src}/{plen}", f"{out_sa.dst}/{plen}")]
    for src, dst in selectors:
        for direction, sa, (s, d) in (("out", out_sa, (src, dst)), ("in", in_sa, (dst, src))):
            line = (f"xfrm policy add src {s} dst {d} dir {direction} "
                    f"tmpl src {sa.src} dst {sa.dst} proto esp reqid {sa.reqid} mode {mode}")
            lines.append(line + (f" if_id {if_id}" if if_id else ""))
    return lines


def add_xfrm_interface(tb: Testbed, site: Site, ifname: str, if_id: int) -> None:
    site.record_link(tb.ledger, ifname)
    site.run(["ip", "link", "add", ifname, "type", "xfrm", "dev", site.underlay_if,
              "if_id", str(if_id)], timeout=15)


def register_flush(tb: Testbed, site: Site) -> None:
    """Undo: flush the SAs and policies of this site's namespace (flush tolerates empty)."""
    site.record_command(tb.ledger, ["ip", "xfrm", "state", "flush"])
    site.record_command(tb.ledger, ["ip", "xfrm", "policy", "flush"])


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
