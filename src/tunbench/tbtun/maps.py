"""The byte layouts of bpf/tbtun.h, packed for `bpftool map update ... hex` and parsed back.

Pure functions (tested without root). Keep in step with bpf/tbtun.h: the loader writes
LAYOUT_VERSION into tb_config and the datapath ignores a config of another version.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass
from typing import Any, Literal

LAYOUT_VERSION = 2
MAX_RULES = 4096
ENCAPS = {"vxlan": 1, "geneve": 2}
ENCAP_NAMES = {v: k for k, v in ENCAPS.items()}
DEFAULT_PORTS = {"vxlan": 4789, "geneve": 6081}
OVERHEAD = 20 + 8 + 8 + 14   # outer IPv4 + UDP + VXLAN/Geneve base header + inner Ethernet
STATS = ("encap", "no_rule", "oversize", "encap_error", "decap", "decap_error")
# inner Ethernet destination when a rule names none: locally administered, "tb" in it
DEFAULT_INNER_MAC = "02:74:62:00:00:01"
# next-hop MAC of tunnel-bound IPv6 routes (their permanent neighbour): never on the wire
MARKER_MAC = "02:74:62:ff:ff:fe"
MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")

Encap = Literal["vxlan", "geneve"]


@dataclass(frozen=True)
class Rule:
    """inner destination prefix -> where and how to encapsulate."""

    prefix: str                      # e.g. "198.19.0.0/24" or "2001:2:0:1::/64"
    remote: str                      # remote underlay IPv4 address
    vni: int = 42
    encap: Encap = "vxlan"
    port: int = 0                    # 0: the encap's IANA port
    inner_mac: str = DEFAULT_INNER_MAC
    id: int = 0                      # counter slot

    @property
    def dport(self) -> int:
        return self.port or DEFAULT_PORTS[self.encap]

    def problems(self) -> list[str]:
        out = []
        try:
            ipaddress.ip_network(self.prefix, strict=True)
        except ValueError as exc:
            out.append(f"prefix {self.prefix!r}: {exc}")
        try:
            if ipaddress.ip_address(self.remote).version != 4:
                out.append(f"remote {self.remote}: only IPv4 underlay addresses are supported")
        except ValueError:
            out.append(f"remote {self.remote!r} is not an IP address")
        if not 0 < self.vni < 2**24:
            out.append(f"vni {self.vni} is not within 1..16777215")
        if self.encap not in ENCAPS:
            out.append(f"encap {self.encap!r} is not one of {', '.join(ENCAPS)}")
        if not 0 <= self.port <= 65535:
            out.append(f"port {self.port} is not within 1..65535")
        if not MAC_RE.match(self.inner_mac):
            out.append(f"inner MAC {self.inner_mac!r} is not like 02:00:00:00:00:01")
        if not 0 <= self.id < MAX_RULES:
            out.append(f"rule id {self.id} is not within 0..{MAX_RULES - 1}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "remote": self.remote, "vni": self.vni,
                "encap": self.encap, "port": self.dport, "inner_mac": self.inner_mac,
                "id": self.id}


def hexbytes(raw: bytes) -> list[str]:
    """bpftool's `hex` argument form: one two-digit word per byte."""
    return [f"{b:02x}" for b in raw]


def family(prefix: str) -> int:
    return ipaddress.ip_network(prefix, strict=False).version


def pack_key(prefix: str) -> bytes:
    """struct tb_key4 / tb_key6: prefixlen (host order u32) + address bytes."""
    net = ipaddress.ip_network(prefix, strict=True)
    return struct.pack("<I", net.prefixlen) + net.network_address.packed


def unpack_key(raw: bytes) -> str:
    plen = struct.unpack_from("<I", raw)[0]
    addr = ipaddress.ip_address(raw[4:])
    return str(ipaddress.ip_network(f"{addr}/{plen}", strict=False))


def pack_rule(rule: Rule) -> bytes:
    """struct tb_rule (36 bytes)."""
    remote = ipaddress.ip_address(rule.remote).packed.ljust(16, b"\0")
    mac = bytes.fromhex(rule.inner_mac.replace(":", ""))
    return (struct.pack("<IIBB", rule.id, rule.vni, ENCAPS[rule.encap], 4)
            + struct.pack("!H", rule.dport) + mac + b"\0\0" + remote)


def unpack_rule(prefix: str, raw: bytes) -> Rule:
    rid, vni, kind, fam = struct.unpack_from("<IIBB", raw)
    (port,) = struct.unpack_from("!H", raw, 10)
    mac = ":".join(f"{b:02x}" for b in raw[12:18])
    remote = str(ipaddress.ip_address(raw[20:24] if fam == 4 else raw[20:36]))
    encap: Encap = "geneve" if ENCAP_NAMES.get(kind) == "geneve" else "vxlan"
    return Rule(prefix, remote, vni, encap, port, mac, rid)


def pack_config(*, local4: str, realm: int, mtu: int, vxlan_port: int,
                geneve_port: int, marker: str = MARKER_MAC) -> bytes:
    """struct tb_config (44 bytes)."""
    return (struct.pack("<III", LAYOUT_VERSION, realm, mtu)
            + struct.pack("!HH", vxlan_port, geneve_port)
            + ipaddress.IPv4Address(local4).packed + b"\0" * 16
            + bytes.fromhex(marker.replace(":", "")) + b"\0\0")


def bpftool_bytes(words: list[Any]) -> bytes:
    """bytes from bpftool -j's key/value lists ("0x0a" strings or ints)."""
    return bytes(int(w, 16) if isinstance(w, str) else int(w) for w in words)


def sum_percpu(values: list[dict[str, Any]]) -> tuple[int, int]:
    """(packets, bytes) summed over CPUs of one per-CPU tb_counter entry, from `bpftool -j
    map lookup/dump` output: formatted (with BTF) or raw hex."""
    packets = total = 0
    for v in values:
        val = v.get("value")
        if isinstance(val, dict):
            packets += int(val["packets"])
            total += int(val["bytes"])
        else:
            p, b = struct.unpack("<QQ", bpftool_bytes(list(val or [])))
            packets, total = packets + p, total + b
    return packets, total
