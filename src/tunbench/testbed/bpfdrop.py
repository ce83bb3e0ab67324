"""A tc ingress eBPF filter that drops the load generator's UDP packets after capture taps.

Why: a loss search counts packets where the far site's tunnel device delivers them, the way a
hardware tester counts frames at its receive port. The generator's capture receiver reads them
from an AF_PACKET ring, which the kernel fills *before* tc ingress; this filter then drops them,
so the far site's IP/UDP stack (route lookup, socket queues, per-packet wake-ups) no longer
competes with the tunnel for the host's CPUs.

The program is 19 instructions, assembled here (no compiler needed) and loaded with the
bpf(2) system call: IPv4 without options or IPv6 without extension headers, protocol UDP,
destination port in [lo, hi] -> TC_ACT_SHOT; everything else (ARP, neighbour discovery, other
traffic) passes. It reads the packet with LD_ABS relative to the network header, so it works
on Ethernet (veth, vxlan, OVS ports) and on L3 devices (TUN: wireguard-go, ssh -w, libipsec).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..remote.agent import bpfsys
from . import netlink
from .ledger import Ledger, register_undo

BPF_PROG_LOAD = 5
BPF_PROG_TYPE_SCHED_CLS = 3
TC_ACT_OK, TC_ACT_SHOT = 0, 2
SKF_NET_OFF = -0x100000         # LD_ABS offset base: the network header
SKB_PROTOCOL_OFF = 16           # offsetof(struct __sk_buff, protocol), network byte order
ETH_P_IP_LE, ETH_P_IPV6_LE = 0x0008, 0xDD86  # htons(0x0800), htons(0x86DD) read as host u32
CLSACT_PARENT = 0xFFFFFFF2      # TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)
FILTER_NAME = "tunbench-drop"
FILTER_PRIO = 0xDB               # our filter's priority, so it can be removed on its own


class DropUnavailable(OSError):
    """The filter could not be loaded or attached here (no bpf, no clsact, no privilege)."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(lo: int, hi: int) -> bytes:
    """Bytecode: drop UDP with destination port in [lo, hi], pass the rest."""
    if not 0 < lo <= hi <= 65535:
        raise ValueError(f"port range {lo}..{hi} is not within 1..65535")
    mov_r6_r1 = _insn(0xBF, 6, 1)                 # r6 = ctx (LD_ABS needs it there)
    ret = [_insn(0xB7, 0, imm=TC_ACT_OK), _insn(0x95)]
    # instruction list with symbolic jumps resolved below
    body: list[tuple[str, Any]] = [
        ("i", mov_r6_r1),
        ("i", _insn(0x61, 2, 6, SKB_PROTOCOL_OFF)),           # r2 = skb->protocol
        ("j", (0x15, 2, ETH_P_IP_LE, "v4")),                  # if r2 == IPv4 goto v4
        ("j", (0x15, 2, ETH_P_IPV6_LE, "v6")),                # if r2 == IPv6 goto v6
        ("L", "pass"), ("i", ret[0]), ("i", ret[1]),
        ("L", "v4"),
        ("i", _insn(0x30, imm=SKF_NET_OFF + 0)),              # r0 = ver/ihl
        ("j", (0x55, 0, 0x45, "pass")),                       # options or not v4: pass
        ("i", _insn(0x30, imm=SKF_NET_OFF + 9)),              # r0 = protocol
        ("j", (0x55, 0, 17, "pass")),
        ("i", _insn(0x28, imm=SKF_NET_OFF + 22)),             # r0 = UDP dport
        ("j", (0x05, 0, 0, "port")),
        ("L", "v6"),
        ("i", _insn(0x30, imm=SKF_NET_OFF + 6)),              # r0 = next header
        ("j", (0x55, 0, 17, "pass")),
        ("i", _insn(0x28, imm=SKF_NET_OFF + 42)),             # r0 = UDP dport
        ("L", "port"),
        ("j", (0xA5, 0, lo, "pass")),                         # if r0 < lo goto pass
        ("j", (0x25, 0, hi, "pass")),                         # if r0 > hi goto pass
        ("i", _insn(0xB7, 0, imm=TC_ACT_SHOT)),
        ("i", _insn(0x95)),
    ]
    labels: dict[str, int] = {}
    pc = 0
    for kind, val in body:
        if kind == "L":
            labels[val] = pc
        else:
            pc += 1
    out, pc = [], 0
    for kind, val in body:
        if kind == "L":
            continue
        if kind == "i":
            out.append(val)
        else:
            code, reg, imm, target = val
            out.append(_insn(code, reg, off=labels[target] - pc - 1, imm=imm))
        pc += 1
    return b"".join(out)


def load(prog: bytes, name: str = "tb_drop") -> int:
    """bpf(BPF_PROG_LOAD) a SCHED_CLS program; returns its fd (the caller closes it).
    On failure it loads again with the verifier log on, to say why."""
    try:
        return _load(prog, name, log_level=0)
    except OSError:
        return _load(prog, name, log_level=1)


def _load(prog: bytes, name: str, log_level: int) -> int:
    insns = ctypes.create_string_buffer(prog, len(prog))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = bytearray(128)
    struct.pack_into("<IIQQIIQII", attr, 0, BPF_PROG_TYPE_SCHED_CLS, len(prog) // 8,
                     ctypes.addressof(insns), ctypes.addressof(lic), log_level, len(log) if log_level else 0,
                     ctypes.addressof(log) if log_level else 0, 0, 0)
    attr[48:64] = name.encode()[:15].ljust(16, b"\0")      # prog_name
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    try:
        return bpfsys.bpf(BPF_PROG_LOAD, buf, len(attr))
    except OSError as exc:
        msg = log.value.decode(errors="replace").strip().splitlines()
        raise OSError(exc.errno, f"bpf prog load: {exc.strerror}"
                      + (f" ({msg[-1]})" if msg else "")) from None


def attach(ledger: Ledger, netns: str | None, ifname: str, lo: int, hi: int) -> None:
    """A direct-action filter on `ifname` ingress dropping UDP ports lo..hi, under a clsact
    qdisc (created if missing). Recorded in the ledger first, so teardown removes it: the
    qdisc if this call created it, else only the filter."""
    try:
        fd = load(program(lo, hi))
    except OSError as exc:
        raise DropUnavailable(exc.errno, str(exc)) from exc
    try:
        with netlink.ipr(netns) as ip:
            idx = netlink.index(ip, ifname)
            created = True
            try:
                ip.tc("add", "clsact", idx)
            except netlink.NetlinkError as exc:
                if exc.code != errno.EEXIST:
                    raise
                created = False
            ledger.add("bpfdrop", netns=netns, name=ifname, qdisc=created)
            ip.tc("add-filter", "bpf", idx, ":1", fd=fd, name=FILTER_NAME,
                  parent=CLSACT_PARENT, classid=1, direct_action=True, prio=FILTER_PRIO)
    except netlink.NetlinkError as exc:
        raise DropUnavailable(exc.code, f"tc clsact/bpf filter on {ifname}: {exc}") from exc
    finally:
        os.close(fd)


@register_undo("bpfdrop")
def detach(e: dict[str, Any]) -> None:
    """Undo `attach` (the ledger's "bpfdrop" entries); a device, qdisc or filter that is
    already gone is fine."""
    netns, ifname = e["netns"], e["name"]
    if netns is not None and netns not in netlink.list_netns():
        return
    with netlink.ipr(netns) as ip:
        found = ip.link_lookup(ifname=ifname)
        if not found:
            return
        try:
            if e.get("qdisc", True):
                ip.tc("del", "clsact", found[0])
            else:
                ip.tc("del-filter", "bpf", found[0], ":1", parent=CLSACT_PARENT,
                      prio=FILTER_PRIO)
        except netlink.NetlinkError as exc:
            if exc.code not in netlink.GONE | {errno.EINVAL}:
                raise


def filters(netns: str | None, ifname: str) -> list[str]:
    """Names of the bpf filters on `ifname` ingress (for checks and tests)."""
    with netlink.ipr(netns) as ip:
        idx = netlink.index(ip, ifname)
        try:
            msgs = ip.get_filters(index=idx, parent=CLSACT_PARENT)
        except netlink.NetlinkError as exc:
            if exc.code in netlink.GONE | {errno.EINVAL}:
                return []
            raise
    out = []
    for m in msgs:
        opts = m.get_attr("TCA_OPTIONS")
        name = opts.get_attr("TCA_BPF_NAME") if opts is not None else None
        if name:
            out.append(str(name))
    return out


@contextmanager
def dropping(ledger: Ledger, netns: str | None, ifnames: tuple[str, ...], lo: int,
             hi: int) -> Iterator[None]:
    """The drop filter on each of `ifnames` for the duration of the block; removed on exit
    (and by the ledger if the process dies first)."""
    first = len(ledger.entries)
    try:
        for ifname in ifnames:
            attach(ledger, netns, ifname, lo, hi)
        yield
    finally:
        mine = [e for e in ledger.entries[first:] if e["kind"] == "bpfdrop"]
        for e in reversed(mine):
            detach(e)
            ledger.entries.remove(e)
