"""Underlay captures: proof of which encapsulation carried the traffic, and its exact size.

`capture()` runs tcpdump (through the testbed, so it is in the ledger and stopped by PID)
writing a classic pcap file; `parse_pcap()` is a pure function over the file's bytes that
returns the outer IP header facts of every frame: IP version, protocol, packet length,
UDP/TCP ports, fragment bits. Tests count e.g. UDP/6081 packets for Geneve or protocol 47 for
GRE and compare outer and inner lengths to check a kind's header overhead. `parse_flows()`
adds each frame's capture time and, for VXLAN, the inner packet the outer one carries, so a
test can tell the connections apart that share one tunnel (their 5-tuples).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import CommandFailed
from .testbed.base import Site, Testbed

LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
ETH_P_IP, ETH_P_IPV6, ETH_P_8021Q = 0x0800, 0x86DD, 0x8100
IPPROTO_UDP, IPPROTO_TCP = 17, 6
VXLAN_PORT = 4789               # IANA; the vxlan kind's default dstport


@dataclass(frozen=True)
class Packet:
    version: int            # 4 or 6
    proto: int              # IPv4 protocol / IPv6 next header
    length: int             # IP packet length (header + payload), from the IP header
    src: str
    dst: str
    sport: int | None = None  # UDP and TCP (None: other protocols, later fragments)
    dport: int | None = None
    fragment: bool = False  # IPv4 MF set or offset non-zero

    def udp_to(self, port: int) -> bool:
        return self.proto == IPPROTO_UDP and self.dport == port

    def five_tuple(self) -> tuple[int, str, int | None, str, int | None]:
        """(protocol, source, source port, destination, destination port)."""
        return self.proto, self.src, self.sport, self.dst, self.dport


def _ip4(b: bytes) -> str:
    return ".".join(str(x) for x in b)


def _ip6(b: bytes) -> str:
    import ipaddress
    return str(ipaddress.IPv6Address(b))


_PORTED = (IPPROTO_UDP, IPPROTO_TCP)   # the ports are the first 4 bytes of both headers


def _parse_ip(data: bytes) -> Packet | None:
    if len(data) < 20:
        return None
    version = data[0] >> 4
    if version == 4:
        ihl = (data[0] & 0x0F) * 4
        total, frag = struct.unpack("!H", data[2:4])[0], struct.unpack("!H", data[6:8])[0]
        proto = data[9]
        fragment = bool(frag & 0x2000) or (frag & 0x1FFF) != 0
        sport = dport = None
        if proto in _PORTED and (frag & 0x1FFF) == 0 and len(data) >= ihl + 4:
            sport, dport = struct.unpack("!HH", data[ihl:ihl + 4])
        return Packet(4, proto, total, _ip4(data[12:16]), _ip4(data[16:20]), sport, dport,
                      fragment)
    if version == 6 and len(data) >= 40:
        payload, nh = struct.unpack("!H", data[4:6])[0], data[6]
        sport = dport = None
        if nh in _PORTED and len(data) >= 44:
            sport, dport = struct.unpack("!HH", data[40:44])
        return Packet(6, nh, 40 + payload, _ip6(data[8:24]), _ip6(data[24:40]), sport, dport,
                      nh == 44)
    return None


NANO_MAGICS = (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")   # timestamps in ns, not µs


def _header(raw: bytes) -> tuple[str, int]:
    """Byte order and link type of a classic pcap file."""
    magic = raw[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError("not a classic pcap file (pcapng is not supported)")
    return endian, struct.unpack(endian + "I", raw[20:24])[0]


def records(raw: bytes) -> Iterator[tuple[float, bytes]]:
    """(capture time in epoch seconds, frame) of every record of a classic pcap file."""
    if len(raw) < 24:
        return
    endian, _ = _header(raw)
    scale = 1e-9 if raw[:4] in NANO_MAGICS else 1e-6
    off = 24
    while off + 16 <= len(raw):
        sec, frac, incl = struct.unpack(endian + "III", raw[off:off + 12])
        yield sec + frac * scale, raw[off + 16:off + 16 + incl]
        off += 16 + incl


def frames(raw: bytes) -> Iterator[bytes]:
    """Every captured frame of a classic pcap file, as the link layer recorded it (for tests
    that read more than parse_pcap keeps: tunnel headers, inner MACs)."""
    for _, frame in records(raw):
        yield frame


def parse_pcap(raw: bytes) -> list[Packet]:
    """Outer IP facts of every IPv4/IPv6 frame in a classic pcap file (other frames skipped)."""
    return [seen.outer for seen in parse_flows(raw, vxlan_port=None)]


@dataclass(frozen=True)
class Seen:
    """One captured frame: when, its outer IP packet and, when that is VXLAN, the inner IP
    packet it carries (None otherwise). `carried` is the packet the endpoints exchanged."""

    t: float
    outer: Packet
    inner: Packet | None = None

    @property
    def carried(self) -> Packet:
        return self.inner or self.outer


def _udp_payload(ip: bytes, pkt: Packet) -> bytes | None:
    if pkt.proto != IPPROTO_UDP or pkt.fragment:
        return None
    hdr = (ip[0] & 0x0F) * 4 if pkt.version == 4 else 40
    return ip[hdr + 8:]


def parse_flows(raw: bytes, vxlan_port: int | None = VXLAN_PORT) -> list[Seen]:
    """Every IPv4/IPv6 frame of a classic pcap file with its capture time, and the inner IP
    packet of VXLAN frames (UDP to `vxlan_port`: 8 bytes of VXLAN header, then an Ethernet
    frame; snaplen must reach its IP and port fields). Pure."""
    if len(raw) < 24:
        return []
    _, linktype = _header(raw)
    out: list[Seen] = []
    for t, frame in records(raw):
        ip = _l3(frame, linktype)
        pkt = _parse_ip(ip) if ip is not None else None
        if ip is None or pkt is None:
            continue
        inner = None
        payload = _udp_payload(ip, pkt) if vxlan_port and pkt.dport == vxlan_port else None
        if payload is not None and len(payload) >= 8 + 14:
            l3 = _l3(payload[8:], LINKTYPE_ETHERNET)
            inner = _parse_ip(l3) if l3 is not None else None
        out.append(Seen(t, pkt, inner))
    return out


IPPROTO_ROUTING, SRH_TYPE = 43, 4   # IPv6 routing header; its type 4 is the SRH (RFC 8754)


@dataclass(frozen=True)
class Srh:
    """An IPv6 packet carrying a Segment Routing Header: its outer hop limit and addresses,
    the segment list in the order the packet visits it (the SRH stores it last first), how
    many segments are left, and what the SRH carries (4: IPv4, 41: IPv6 inside)."""

    hop_limit: int
    src: str
    dst: str
    segments_left: int
    segments: tuple[str, ...]
    inner: int


def _l3(frame: bytes, linktype: int) -> bytes | None:
    if linktype == LINKTYPE_ETHERNET:
        ethertype, l3 = struct.unpack("!H", frame[12:14])[0], 14
        if ethertype == ETH_P_8021Q:
            ethertype, l3 = struct.unpack("!H", frame[16:18])[0], 18
    elif linktype == LINKTYPE_LINUX_SLL:
        ethertype, l3 = struct.unpack("!H", frame[14:16])[0], 16
    else:
        raise ValueError(f"unsupported pcap link type {linktype}")
    return frame[l3:] if ethertype in (ETH_P_IP, ETH_P_IPV6) else None


def parse_srh(data: bytes) -> Srh | None:
    """The SRH facts of one IP packet (None: not IPv6 with an SRH right after its header)."""
    if len(data) < 48 or data[0] >> 4 != 6 or data[6] != IPPROTO_ROUTING:
        return None
    ext = data[40:]
    nh, hdr_len, rtype, left, last = ext[0], ext[1], ext[2], ext[3], ext[4]
    if rtype != SRH_TYPE or len(ext) < 8 + 16 * (last + 1) or hdr_len * 8 < 16 * (last + 1):
        return None
    stored = [_ip6(ext[8 + 16 * i:24 + 16 * i]) for i in range(last + 1)]
    return Srh(data[7], _ip6(data[8:24]), _ip6(data[24:40]), left, tuple(reversed(stored)), nh)


def parse_srh_pcap(raw: bytes) -> list[Srh]:
    """Every SRv6 packet (IPv6 + SRH) of a classic pcap file; others skipped (pure)."""
    if len(raw) < 24:
        return []
    _, linktype = _header(raw)
    out = []
    for frame in frames(raw):
        l3 = _l3(frame, linktype)
        srh = parse_srh(l3) if l3 is not None else None
        if srh is not None:
            out.append(srh)
    return out


@dataclass
class CaptureResult:
    path: Path
    packets: list[Packet]


@contextmanager
def capture(tb: Testbed, site: Site, ifname: str, label: str = "tcpdump",
            snaplen: int = 128) -> Iterator[CaptureResult]:
    """Capture on a site's interface while the block runs; packets are parsed at the end.

    Only headers are kept (snaplen); the lengths come from the IP headers, not the frame.
    """
    path = tb.workdir / f"{label}.pcap"
    tb.ledger.path(path)
    p = tb.spawn(site, ["tcpdump", "-i", ifname, "-n", "-U", "--immediate-mode", "-Z", "root", "-s", str(snaplen), "-w",
                        str(path)], label, split_stderr=True)
    deadline = time.monotonic() + 10
    while "listening on" not in p.errors():
        if p.poll() is not None or time.monotonic() > deadline:
            raise CommandFailed(f"tcpdump on {ifname} did not start: {p.log_tail(3)}",
                                argv=p.argv)
        time.sleep(0.02)
    result = CaptureResult(path, [])
    try:
        yield result
    finally:
        time.sleep(0.2)  # let the last packets reach the capture
        p.stop()
    result.packets = parse_pcap(path.read_bytes()) if path.exists() else []
