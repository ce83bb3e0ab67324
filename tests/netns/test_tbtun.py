"""tbtun (ebpf-vxlan / ebpf-geneve) with real traffic between two namespaces.

Interop with the kernel's VXLAN device, exact outer headers on the underlay, GSO segmented
after encap and GRO-merged packets decapsulated, rules edited while traffic runs, unknown
destinations dropped and counted, 1000 rules, nothing left after teardown or SIGKILL.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from testbeds import fresh_testbed, until

from tunbench import pcap, proc, tunnels
from tunbench.capabilities import root_missing
from tunbench.errors import SpecError
from tunbench.remote.agent import bpfhost
from tunbench.tbtun import loader, maps
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Site, Testbed
from tunbench.testbed.ledger import STATE_DIR, Ledger
from tunbench.tunnels._tbtun import REALM, TbtunDriver
from tunbench.tunnels.base import Endpoints

TB = [sys.executable, "-m", "tunbench"]
SOL_PACKET, PACKET_VNET_HDR = 263, 15          # linux/socket.h, linux/if_packet.h


def _why_not() -> str | None:
    if root_missing():
        return "needs root"
    drv = tunnels.get("ebpf-vxlan")
    missing = drv.requirements(drv.default_params())
    return missing[0].one_line() if missing else None


pytestmark = [pytest.mark.skipif(_why_not() is not None, reason=f"tbtun: {_why_not()}"), pytest.mark.correctness,
              pytest.mark.beside]


def _up(tb: Testbed, kind: str = "ebpf-vxlan", **raw: Any) -> tuple[TbtunDriver, Endpoints]:
    drv = tunnels.get(kind)
    d = drv()
    return d, d.up(tb, drv.parse_params(raw))


def _site(tb: Testbed, name: str) -> Path:
    return loader.site_dir(tb.run_id, name)


def _iperf(tb: Testbed, dst: str, seconds: float = 2, reverse: bool = False) -> dict[str, Any]:
    """One TCP stream a -> b (b -> a with reverse); iperf3's JSON end summary."""
    # --forceflush: the log is a file, so without it "Server listening" sat in iperf3's stdio
    # buffer and every call waited out the whole readiness timeout (30 s) before starting
    server = tb.spawn(tb.b, ["iperf3", "-s", "-1", "--forceflush", "-B", dst],
                      f"iperf3-s-{time.monotonic_ns()}")
    proc.wait_ready(server, ready_text="Server listening", timeout=30)   # a loaded host: slow
    r = tb.a.run(["iperf3", "-c", dst, "-t", str(seconds), "-J", *(["-R"] if reverse else [])],
                 timeout=seconds + 30, check=False)
    out = r.stdout
    server.stop()   # iperf3 3.12 -s -1 sometimes lingers after -R
    doc = json.loads(out)
    assert "error" not in doc, f"iperf3: {doc['error']}"
    end: dict[str, Any] = doc["end"]
    return end


# What "TCP delivers without a retransmit storm" means, as counts (a retransmission share is a
# figure the host's load moves, not a correctness check): the bytes arrive whole, every
# segment reaches the far stack with a good checksum, and tbtun drops nothing for size and
# fails no encapsulation or decapsulation.
ERRORS = ("oversize", "encap_error", "decap_error")


def _snmp(site: Site) -> dict[str, int]:
    """The Tcp counters of a site's stack (/proc/net/snmp in its namespace)."""
    lines = site.run(["cat", "/proc/net/snmp"], timeout=10).stdout.splitlines()
    out: dict[str, int] = {}
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        proto, keys = head.split(":", 1)
        for k, v in zip(keys.split(), vals.split(":", 1)[1].split(), strict=False):
            out[f"{proto}.{k}"] = int(v)
    return out


def _counts(tb: Testbed) -> dict[str, dict[str, int]]:
    """Per site: its stack's TCP error counters and tbtun's error counters."""
    out = {}
    for site in (tb.a, tb.b):
        snmp, st = _snmp(site), loader.stats(_site(tb, site.name))
        out[site.name] = {"Tcp.InCsumErrors": snmp["Tcp.InCsumErrors"],
                          "Tcp.InErrs": snmp["Tcp.InErrs"],
                          **{k: st.get(k, {}).get("packets", 0) for k in ERRORS}}
    return out


def _tcp_intact(sender: Site, receiver: Site, dst: str, nbytes: int = 8 << 20) -> None:
    """nbytes of random data over one TCP connection through the tunnel, sender -> receiver
    (large writes: GSO skbs, as iperf3's): what arrives is exactly what was sent."""
    data = os.urandom(nbytes)
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    srv = bpfhost.in_netns(receiver.netns, lambda: socket.socket(fam, socket.SOCK_STREAM))
    cli = bpfhost.in_netns(sender.netns, lambda: socket.socket(fam, socket.SOCK_STREAM))
    got = bytearray()
    failed: list[BaseException] = []

    def receive() -> None:
        try:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(30)
                while chunk := conn.recv(1 << 20):
                    got.extend(chunk)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    with srv, cli:
        srv.bind((dst, 0))
        srv.listen(1)
        srv.settimeout(30)
        t = threading.Thread(target=receive, name="tb-tcp-intact")
        t.start()
        cli.settimeout(30)
        cli.connect((dst, srv.getsockname()[1]))
        cli.sendall(data)
        cli.shutdown(socket.SHUT_WR)
        t.join(60)
    assert not failed and not t.is_alive(), failed
    assert len(got) == nbytes, (len(got), nbytes)
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), "bytes changed"


def _carried_whole(tb: Testbed, before: dict[str, dict[str, int]], *ways: tuple[Site, Site, str]
                   ) -> None:
    """After the stream(s): a checked transfer each way in `ways` (sender, receiver, the
    receiver's inner address), then no TCP checksum or error segment at either stack and no
    tbtun size drop or encap/decap failure at either site since `before`."""
    for sender, receiver, dst in ways:
        _tcp_intact(sender, receiver, dst)
    after = _counts(tb)
    assert after == before, (before, after)


# ---- interop with the kernel's VXLAN device ------------------------------------------------
def _kernel_vxlan_on_b(tb: Testbed, mac: str, peer_mac: str) -> str:
    """A kernel VXLAN device in site b towards site a's underlay (VNI 42, port 4789), inner
    198.19.0.2/24; site a's inner address is a static neighbour (tbtun answers no ARP)."""
    ifname = names.link_name(tb.run_id, "kx")
    ns = str(tb.b.netns)
    tb.b.run(["ip", "link", "add", ifname, "address", mac, "type", "vxlan", "id", "42",
              "local", tb.b.underlay4, "remote", tb.a.underlay4, "dstport", "4789",
              "dev", tb.b.underlay_if], timeout=10)
    tb.ledger.link(ifname, ns)
    for argv in (["ip", "link", "set", ifname, "mtu", "1450", "up"],
                 ["ip", "addr", "add", "198.19.0.2/24", "dev", ifname],
                 ["ip", "neigh", "add", "198.19.0.1", "lladdr", peer_mac, "nud", "permanent",
                  "dev", ifname]):
        tb.b.run(argv, timeout=10)
    return ifname


def _tbtun_on_a(tb: Testbed, inner_mac: str) -> Path:
    """Only site a runs tbtun: the loader's steps, with a rule towards b's kernel device."""
    where = loader.load(tb.ledger, tb.run_id, "a")
    loader.configure(where, local4=tb.a.underlay4, realm=REALM, mtu=tb.underlay_mtu,
                     vxlan_port=4789, geneve_port=6081)
    loader.add_rules(where, [maps.Rule("198.19.0.2/32", tb.b.underlay4, 42, "vxlan",
                                       inner_mac=inner_mac)])
    loader.attach(tb.ledger, tb.a.netns, tb.a.underlay_if, where)
    TbtunDriver._inner(tb, tb.a, tb.b, "198.19.0.1", 1450)
    return where


def test_interop_with_the_kernel_vxlan_device_tcp_both_ways(testbed: Testbed) -> None:
    tb = testbed
    kx_mac = "02:74:62:00:00:0b"
    where = _tbtun_on_a(tb, kx_mac)
    kx = _kernel_vxlan_on_b(tb, kx_mac, "02:74:62:00:00:0a")
    a4 = bytes(map(int, tb.a.underlay4.split(".")))

    def from_a() -> list[bytes]:
        return [f for f in pcap.frames(cap.path.read_bytes())
                if f[12:14] == b"\x08\x00" and f[26:30] == a4]

    with pcap.capture(tb, tb.b, tb.b.underlay_if, "interop", snaplen=96) as cap:
        tb.a.run(["ping", "-c", "3", "-i", "0.2", "-s", "100", "-W", "2", "198.19.0.2"],
                 timeout=20)
        tb.b.run(["ping", "-c", "3", "-i", "0.2", "-s", "100", "-W", "2", "198.19.0.1"],
                 timeout=20)
        # the pings are answered, so the 6 packets were on the wire; a starved tcpdump may
        # not have read them yet, and the capture stops it 0.2 s after the block
        until("a's 3 requests and 3 replies in b's capture", lambda: len(from_a()) >= 6)
    up = _iperf(tb, "198.19.0.2")
    down = _iperf(tb, "198.19.0.2", reverse=True)
    assert up["sum_received"]["bytes"] > 0, up["sum_received"]
    assert down["sum_received"]["bytes"] > 0, down["sum_received"]
    # both streams crossed the kernel device: it received at least the bytes b's iperf3 got
    # and sent at least those a's got (inner IP lengths, so headers on top)
    kstats = netlink.link_stats(tb.b.netns, kx)
    assert kstats["rx_bytes"] >= up["sum_received"]["bytes"], (kstats, up["sum_received"])
    assert kstats["tx_bytes"] >= down["sum_received"]["bytes"], (kstats, down["sum_received"])

    # exact outer headers: ICMP inner IP 128 B -> outer IP 178 B (+ outer Ethernet: 50 B)
    # (the kernel device also sends its own IPv6 link-local traffic: only ICMP sizes here)
    tunnel = [p for p in cap.packets if p.udp_to(4789)]
    assert {p.length for p in tunnel if p.src == tb.a.underlay4} == {178}
    assert 178 in {p.length for p in tunnel if p.src == tb.b.underlay4}
    ours = from_a()
    assert len(ours) == 6, len(ours)      # a's 3 requests and 3 replies
    for f in ours:
        ip, udp, vx, inner = f[14:34], f[34:42], f[42:50], f[50:64]
        assert ip[0] == 0x45 and ip[9] == 17 and ip[6] & 0x40, ip.hex()      # DF, UDP
        sport, dport, ulen, csum = struct.unpack("!HHHH", udp)
        assert 32768 <= sport <= 60999 and dport == 4789 and ulen == 178 - 20 and csum == 0
        assert vx == bytes.fromhex("08000000") + (42 << 8).to_bytes(4, "big")
        assert inner[:6] == bytes.fromhex(kx_mac.replace(":", ""))
        assert inner[12:14] == b"\x08\x00" and f[64] == 0x45                   # inner IPv4
    # and tbtun on a carried them: it encapsulated at least the bytes b got, decapsulated at
    # least those a got (frame lengths: headers on top)
    st = loader.stats(where)
    assert st["encap"]["bytes"] >= up["sum_received"]["bytes"], (st, up["sum_received"])
    assert st["decap"]["bytes"] >= down["sum_received"]["bytes"], (st, down["sum_received"])


# ---- GSO / GRO ------------------------------------------------------------------------------
def test_single_stream_segmented_after_encap_fits_the_underlay(testbed: Testbed) -> None:
    """With the underlay's UDP-tunnel segmentation off the GSO skb is segmented in software
    right after encap: every packet on the wire fits the MTU, and TCP delivers the bytes
    whole (no checksum error at the receiver, nothing dropped for size)."""
    tb = testbed
    _, ep = _up(tb)
    tb.a.run(["ethtool", "-K", tb.a.underlay_if, "tx-udp_tnl-segmentation", "off",
              "tx-udp_tnl-csum-segmentation", "off"], timeout=10)
    before = _counts(tb)
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "segmented") as cap:
        end = _iperf(tb, ep.b4, seconds=2)
    tunnel = [p for p in cap.packets if p.udp_to(4789)]
    assert tunnel
    assert max(p.length for p in tunnel) <= tb.underlay_mtu
    assert max(p.length for p in tunnel) == tb.underlay_mtu      # full-size segments
    assert not any(p.fragment for p in tunnel)
    assert end["sum_received"]["bytes"] > 0, end["sum_received"]
    _carried_whole(tb, before, (tb.a, tb.b, ep.b4))


def test_gso_skbs_decapsulated_whole_with_fixed_gso(testbed: Testbed) -> None:
    """veth carries the UDP-tunnel GSO skb unsegmented, so tb_decap strips 64 KB skbs that
    carry a gso_size (the skb shape of a GRO-merged packet): FIXED_GSO keeps gso_size, TCP
    delivers the bytes whole."""
    tb = testbed
    _, ep = _up(tb)
    before = _counts(tb)
    end = _iperf(tb, ep.b4, seconds=2)
    st = loader.stats(_site(tb, "b"))["decap"]
    # more than a wire packet per decap on average: GSO skbs, whole (TCP's autosizing makes
    # them smaller on a starved host, but at least 2 segments: tcp_min_tso_segs)
    assert st["bytes"] / st["packets"] > tb.underlay_mtu, st
    assert end["sum_received"]["bytes"] > 0, end["sum_received"]
    _carried_whole(tb, before, (tb.a, tb.b, ep.b4))



def test_segmented_then_gro_on_with_a_kernel_vxlan_socket_on_the_port(
        testbed: Testbed) -> None:
    """Segmented on the wire (site a's UDP-tunnel segmentation off); in site b GRO on (veth
    NAPI) and a collect_md VXLAN device on 4789 registering the UDP-tunnel GRO handler, as
    on a host that also runs kernel VXLAN: tb_decap still decapsulates (before the socket:
    the kernel device receives none of it) and TCP delivers the bytes whole."""
    tb = testbed
    _, ep = _up(tb)
    tb.a.run(["ethtool", "-K", tb.a.underlay_if, "tx-udp_tnl-segmentation", "off",
              "tx-udp_tnl-csum-segmentation", "off"], timeout=10)
    gx = names.link_name(tb.run_id, "gx")
    tb.b.run(["ip", "link", "add", gx, "type", "vxlan", "external", "dstport", "4789"],
             timeout=10)
    tb.ledger.link(gx, tb.b.netns)
    tb.b.run(["ip", "link", "set", gx, "up"], timeout=10)
    tb.b.run(["ethtool", "-K", tb.b.underlay_if, "gro", "on"], timeout=10)
    before = loader.stats(_site(tb, "b"))["decap"]
    counts = _counts(tb)
    end = _iperf(tb, ep.b4, seconds=2)
    after = loader.stats(_site(tb, "b"))["decap"]
    # tb_decap decapsulated the whole stream (at least the bytes b got), the socket none
    assert after["bytes"] - before["bytes"] >= end["sum_received"]["bytes"], \
        (before, after, end["sum_received"])
    assert end["sum_received"]["bytes"] > 0
    _carried_whole(tb, counts, (tb.a, tb.b, ep.b4))
    assert netlink.link_stats(str(tb.b.netns), gx)["rx_packets"] == 0   # none reached the socket


def test_xdp_decap_carries_tcp_both_ways_and_counts_wire_frames(testbed: Testbed) -> None:
    """decap=xdp: tb_xdp_decap is the underlay's native XDP program and tc ingress is empty;
    veth turns its peer's GSO off for an XDP program without frags, so XDP strips one wire
    frame at a time (decap bytes per packet <= MTU), GRO rebuilds, TCP runs both ways; the
    ledger detaches it again."""
    tb = testbed
    _, ep = _up(tb, decap="xdp")
    for site in (tb.a, tb.b):
        assert loader.xdp_prog(site.netns, site.underlay_if) == "tb_xdp_decap"
        assert loader.filters(site.netns, site.underlay_if)["ingress"] == []
    before = _counts(tb)
    up = _iperf(tb, ep.b4, seconds=2)
    down = _iperf(tb, ep.b4, seconds=2, reverse=True)
    for end in (up, down):
        assert end["sum_received"]["bytes"] > 0, end["sum_received"]
    _carried_whole(tb, before, (tb.a, tb.b, ep.b4), (tb.b, tb.a, ep.a4))
    # each site's XDP program decapsulated at least the stream it received, in wire frames
    for name, end in (("a", down), ("b", up)):
        st = loader.stats(_site(tb, name))
        assert st["decap"]["bytes"] >= end["sum_received"]["bytes"], (st, end["sum_received"])
        assert st["decap_error"]["packets"] == 0, st
        assert st["decap"]["bytes"] / st["decap"]["packets"] <= tb.underlay_mtu, st
    tb.a.run(["ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", str(ep.b6)], timeout=20)
    # teardown of the attach step alone: XDP and the egress filter go, the devices stay
    entries = [e for e in tb.ledger.entries if e["kind"] == "tbtun-tc"]
    assert entries and all(e["xdp"] for e in entries)
    Ledger(tb.run_id, journal=False, entries=[dict(e) for e in entries]).undo_all()
    for site in (tb.a, tb.b):
        assert loader.xdp_prog(site.netns, site.underlay_if) == ""
        assert loader.filters(site.netns, site.underlay_if) == {"egress": [], "ingress": []}


@pytest.mark.parametrize("attach", ["tc", "tcx"])
def test_attach_by_tc_or_tcx_carries_tcp_and_teardown_detaches(testbed: Testbed,
                                                               attach: str) -> None:
    """attach=tc puts tb_encap/tb_decap under a clsact qdisc; attach=tcx links them (no
    qdisc) and pins the links next to the programs. Either carries a TCP stream; undoing the
    attach entries alone (the namespaces stay) leaves no filter, no link and no clsact."""
    tb = testbed
    if attach == "tcx" and loader.tcx_missing(platform.release()):
        pytest.skip(loader.tcx_missing(platform.release()))
    _, ep = _up(tb, attach=attach)
    assert ep.info["attach"] == {"a": attach, "b": attach}
    for site in (tb.a, tb.b):
        qdiscs = site.run(["tc", "qdisc", "show", "dev", site.underlay_if], timeout=10).stdout
        assert ("clsact" in qdiscs) == (attach == "tc"), qdiscs
        assert loader.tcx_attached(site.netns, site.underlay_if) == (attach == "tcx")
        assert loader.filters(site.netns, site.underlay_if) == {"egress": ["tb_encap"],
                                                                "ingress": ["tb_decap"]}
        links = sorted(p.name for p in _site(tb, site.name).glob("link_*"))
        assert links == (["link_tb_decap", "link_tb_encap"] if attach == "tcx" else [])
    r = subprocess.run(TB + ["tunnel-rules", "list", "--json", "--site", f"{tb.run_id}/a"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [d["attach"] for d in json.loads(r.stdout)["sites"]] == [attach]
    end = _iperf(tb, ep.b4, seconds=2)
    assert end["sum_received"]["bytes"] > 0, end["sum_received"]
    encap = loader.stats(_site(tb, "a"))["encap"]     # the stream went through tb_encap
    assert encap["bytes"] >= end["sum_received"]["bytes"], (encap, end["sum_received"])
    entries = [e for e in tb.ledger.entries if e["kind"] == "tbtun-tc"]
    assert [bool(e.get("tcx")) for e in entries] == [attach == "tcx"] * 2
    Ledger(tb.run_id, journal=False, entries=[dict(e) for e in entries]).undo_all()
    for site in (tb.a, tb.b):
        assert loader.filters(site.netns, site.underlay_if) == {"egress": [], "ingress": []}
        assert not loader.tcx_attached(site.netns, site.underlay_if)
        assert "clsact" not in site.run(["tc", "qdisc", "show", "dev", site.underlay_if],
                                        timeout=10).stdout
        assert not list(_site(tb, site.name).glob("link_*"))


def test_attach_tcx_refused_on_a_kernel_without_it() -> None:
    """attach=tcx on a kernel older than 6.6 is one line at preflight (requirements), before
    anything is made; auto falls back to tc there."""
    drv = tunnels.get("ebpf-vxlan")
    assert loader.attach_method("auto", "6.1.0-28-amd64") == "tc"
    assert loader.attach_method("auto", "6.6.0") == "tcx"
    assert loader.attach_method("tc", "6.18.1") == "tc"
    assert loader.tcx_missing("6.1.0-28-amd64") == \
        "tcx needs Linux >= 6.6, this kernel is 6.1.0-28-amd64"
    with pytest.raises(SpecError, match="attach 'tcxx' is not one of auto, tc, tcx"):
        drv.parse_params({"attach": "tcxx"})
    missing = [m.one_line() for m in drv.requirements(drv.parse_params({"attach": "tcx"}))]
    assert any("tcx needs" in m for m in missing) == bool(loader.tcx_missing(platform.release()))


def _udp6(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    """An IPv6 header and a UDP datagram with a valid checksum (RFC 8200 pseudo-header)."""
    s, d = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
    length = 8 + len(payload)
    pseudo = s + d + struct.pack("!I3xB", length, socket.IPPROTO_UDP)
    data = pseudo + struct.pack("!HHHH", sport, dport, length, 0) + payload
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    csum = (~total & 0xFFFF) or 0xFFFF
    return (struct.pack("!IHBB", 6 << 28, length, socket.IPPROTO_UDP, 64) + s + d
            + struct.pack("!HHHH", sport, dport, length, csum) + payload)


def test_headers_outside_the_linear_part_take_the_helper_path() -> None:
    """tbtun reads headers in place when they are in the skb's linear part, through
    bpf_skb_load_bytes otherwise. A locally routed packet always has them linear, so this
    sends a frame whose IPv6 header is not: AF_PACKET with a virtio-net header of hdr_len 14
    builds a frame of a page or more with only the Ethernet header linear
    (net/packet/af_packet.c packet_alloc_skb). Addressed to the marker MAC, it is
    tunnel-bound; the rule lookup must read the destination through the helper, and the
    datagram must arrive intact in site b (jumbo underlay: the frame is 6 KB)."""
    with fresh_testbed(mtu=9000) as tb:
        _, ep = _up(tb)
        payload = os.urandom(6000)
        rx = bpfhost.in_netns(tb.b.netns, lambda: socket.socket(socket.AF_INET6,
                                                                socket.SOCK_DGRAM))
        tx = bpfhost.in_netns(tb.a.netns, lambda: socket.socket(
            socket.AF_PACKET, socket.SOCK_RAW, 0))
        with rx, tx:
            rx.bind((str(ep.b6), 0))
            rx.settimeout(5)
            tx.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
            tx.bind((tb.a.underlay_if, 0))
            before = loader.stats(_site(tb, "a"))
            link = json.loads(tb.a.run(["ip", "-j", "link", "show", "dev", tb.a.underlay_if],
                                       timeout=10).stdout)[0]
            src_mac = bytes.fromhex(link["address"].replace(":", ""))
            frame = (bytes.fromhex(maps.MARKER_MAC.replace(":", "")) + src_mac
                     + struct.pack("!H", 0x86DD)
                     + _udp6(str(ep.a6), str(ep.b6), 40000, rx.getsockname()[1], payload))
            vnet = struct.pack("=BBHHHH", 0, 0, 14, 0, 0, 0)   # no GSO, no csum; hdr_len 14
            assert len(frame) > 4096
            tx.send(vnet + frame)
            got, _ = rx.recvfrom(65535)
        assert got == payload
        after = loader.stats(_site(tb, "a"))
        assert after["encap"]["packets"] > before["encap"]["packets"], after
        assert after["no_rule"]["packets"] == before["no_rule"]["packets"], after
        decap = loader.stats(_site(tb, "b"))["decap"]
        assert decap["packets"] >= 1 and decap["bytes"] >= len(frame) - 14, decap


def test_bad_decap_parameter_is_refused_before_anything_changes() -> None:
    drv = tunnels.get("ebpf-vxlan")
    assert drv.parse_params({"decap": "xdp"}).decap == "xdp"
    with pytest.raises(SpecError, match="decap 'afxdp' is not one of tc, xdp"):
        drv.parse_params({"decap": "afxdp"})


def test_ipv6_inside_over_the_ipv4_underlay(testbed: Testbed) -> None:
    """IPv6 routes carry no realm: they go via a marker next hop; the marker MAC never
    reaches the wire (the FIB's MACs replace it), the inner Ethernet type is IPv6, and TCP
    over IPv6 runs as GSO like IPv4."""
    tb = testbed
    _, ep = _up(tb)
    assert ep.a6 and ep.b6
    def udp4() -> list[bytes]:
        return [f for f in pcap.frames(cap.path.read_bytes())
                if f[12:14] == b"\x08\x00" and f[23:24] == b"\x11"]

    with pcap.capture(tb, tb.b, tb.b.underlay_if, "v6", snaplen=96) as cap:
        tb.a.run(["ping", "-6", "-c", "3", "-i", "0.2", "-s", "100", "-W", "2", ep.b6],
                 timeout=20)
        # answered, so on the wire; wait for a starved tcpdump to have read them
        until("3 requests and 3 replies in b's capture", lambda: len(udp4()) >= 6)
    ours = udp4()
    assert len(ours) == 6, len(ours)
    marker = bytes.fromhex(maps.MARKER_MAC.replace(":", ""))
    for f in ours:
        assert marker not in (f[0:6], f[6:12], f[50:56]), f[:64].hex()
        assert f[62:64] == b"\x86\xdd" and f[64] >> 4 == 6                   # inner IPv6
        assert struct.unpack("!H", f[16:18])[0] == 40 + 8 + 100 + 50          # outer IP length
    before = _counts(tb)
    end = _iperf(tb, ep.b6, seconds=2)
    assert end["sum_received"]["bytes"] > 0
    _carried_whole(tb, before, (tb.a, tb.b, str(ep.b6)))
    counters = loader.rule_counters(_site(tb, "a"))
    v6 = next(r for r in loader.list_rules(_site(tb, "a")) if r.prefix == f"{ep.b6}/128")
    assert counters[v6.id][1] >= end["sum_sent"]["bytes"]


def test_mtu_enforced_and_oversize_dropped_and_counted(testbed: Testbed) -> None:
    """The overlay route's MTU is the underlay's minus 50: a DF ping of exactly that size
    passes, one byte more is refused by the sender's stack. A route MTU set too high lets an
    oversize non-GSO packet reach tb_encap: dropped and counted, never sent truncated."""
    tb = testbed
    _, ep = _up(tb)
    assert ep.mtu == tb.underlay_mtu - 50
    ping = ["ping", "-c", "2", "-i", "0.2", "-W", "1", "-M", "do"]
    tb.a.run([*ping, "-s", str(ep.mtu - 28), ep.b4], timeout=20)
    assert not tb.a.run([*ping, "-s", str(ep.mtu - 27), ep.b4], timeout=20, check=False).ok
    tb.a.run(["ip", "route", "change", "198.19.0.0/24", "via", tb.b.underlay4, "dev",
              tb.a.underlay_if, "onlink", "realm", str(REALM), "mtu",
              str(tb.underlay_mtu), "src", ep.a4], timeout=10)
    before = loader.stats(_site(tb, "a"))["oversize"]["packets"]
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "oversize") as cap:
        r = tb.a.run([*ping, "-s", str(tb.underlay_mtu - 28), ep.b4], timeout=20, check=False)
    assert not r.ok
    assert loader.stats(_site(tb, "a"))["oversize"]["packets"] >= before + 2
    assert not [p for p in cap.packets if p.udp_to(4789) and p.length > tb.underlay_mtu]


# ---- rules ----------------------------------------------------------------------------------
def _tunnel_dsts(packets: list[pcap.Packet]) -> set[str]:
    return {p.dst for p in packets if p.udp_to(4789)}


REPLY = re.compile(r"bytes from .*icmp_seq=(\d+)")


def _echo_seqs(raw: bytes, remote: str) -> set[int]:
    """ICMP sequence numbers of the IPv4 echo requests a capture saw tbtun send towards
    `remote` in VXLAN (outer Ethernet 14 + IP 20 + UDP 8 + VXLAN 8 + inner Ethernet 14 + IP
    20, then ICMP: type at 84, sequence at 90); a frame tcpdump is still writing is skipped."""
    dst = socket.inet_aton(remote)
    return {struct.unpack("!H", f[90:92])[0] for f in pcap.frames(raw)
            if len(f) >= 92 and f[12:14] == b"\x08\x00" and f[23] == 17 and f[30:34] == dst
            and f[36:38] == struct.pack("!H", 4789) and f[62:64] == b"\x08\x00" and f[84] == 8}


def test_rules_edited_while_traffic_runs_and_unknown_destinations_dropped(
        testbed: Testbed) -> None:
    """One ping runs throughout. Judged by ICMP sequence numbers and counters, not by how many
    lines ping printed in a fixed time (a starved ping prints late and sends fewer)."""
    tb = testbed
    _, ep = _up(tb)
    site = f"{tb.run_id}/a"
    ping = tb.spawn(tb.a, ["ping", "-i", "0.05", "-W", "1", ep.b4], "ping-live")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(TB + ["tunnel-rules", *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        return r

    def replied() -> list[int]:
        return [int(s) for s in REPLY.findall(ping.output())]

    def no_rule() -> int:
        return loader.stats(_site(tb, "a"))["no_rule"]["packets"]

    until("a first reply", replied)
    # the rule now points elsewhere: packets leave towards the new remote, no replies
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "moved", snaplen=128) as cap:
        cli("add", "--site", site, f"{ep.b4}/32", "--remote", "198.18.0.99")
        until("5 requests towards the new remote on b's wire",
               lambda: len(_echo_seqs(cap.path.read_bytes(), "198.18.0.99")) >= 5)
    moved = _echo_seqs(cap.path.read_bytes(), "198.18.0.99")
    assert "198.18.0.99" in _tunnel_dsts(cap.packets), _tunnel_dsts(cap.packets)
    # deleted: dropped and counted as no_rule
    before = no_rule()
    cli("del", "--site", site, f"{ep.b4}/32")
    until("5 requests dropped as no_rule", lambda: no_rule() >= before + 5)
    # back: replies resume, nothing restarted (same ping process): answers to requests sent
    # after the moved ones (a request's sequence number grows; the rule moved, was deleted,
    # then came back, so a reply above the moved ones is one sent after the re-add)
    cli("add", "--site", site, f"{ep.b4}/32", "--remote", tb.b.underlay4)
    until("4 replies to requests sent after the rule came back",
           lambda: len([s for s in replied() if s > max(moved)]) >= 4)
    assert ping.poll() is None, ping.log_tail()
    # no request that left towards the moved remote was ever answered
    assert not moved & set(replied()), sorted(moved & set(replied()))
    ping.stop()
    listed = json.loads(cli("list", "--site", site, "--json").stdout)["sites"][0]
    rule = next(r for r in listed["rules"] if r["prefix"] == f"{ep.b4}/32")
    assert rule["remote"] == tb.b.underlay4 and len(listed["rules"]) == 2
    assert rule["packets"] > 0 and listed["stats"]["no_rule"]["packets"] >= 5

    # an inner destination without a rule: dropped, counted, ping fails
    before = loader.stats(_site(tb, "a"))["no_rule"]["packets"]
    r = tb.a.run(["ping", "-c", "3", "-i", "0.2", "-W", "1", "198.19.0.77"], timeout=20,
                 check=False)
    assert r.returncode != 0
    assert loader.stats(_site(tb, "a"))["no_rule"]["packets"] >= before + 3
    # the underlay's own traffic carries no realm: untouched
    tb.a.run(["ping", "-c", "1", "-W", "2", tb.b.underlay4], timeout=10)


def test_bad_rule_is_one_line_exit_2_and_changes_nothing(testbed: Testbed) -> None:
    tb = testbed
    _up(tb)
    before = loader.list_rules(_site(tb, "a"))
    for args, words in (
            (["198.19.9.0/24", "--remote", "fe80::1"], "only IPv4 underlay"),
            (["198.19.9.1/24", "--remote", "198.18.0.2"], "host bits"),
            (["198.19.9.0/24", "--remote", "198.18.0.2", "--vni", "0"], "vni 0")):
        r = subprocess.run(TB + ["tunnel-rules", "add", "--site", f"{tb.run_id}/a", *args],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.splitlines()) == 1, \
            r.stderr
    assert loader.list_rules(_site(tb, "a")) == before


def test_1000_rules_load_and_traffic_uses_the_right_one(testbed: Testbed) -> None:
    tb = testbed
    d, ep = _up(tb, rules=1000)
    rules = loader.list_rules(_site(tb, "a"))
    assert len(rules) == 1000 and len({r.id for r in rules}) == 1000
    tb.a.run(["ping", "-c", "3", "-i", "0.2", "-W", "2", ep.b4], timeout=20)
    counters = loader.rule_counters(_site(tb, "a"))
    peer = next(r for r in rules if r.prefix == f"{ep.b4}/32")
    assert list(counters) == [peer.id], counters


def test_ebpf_geneve_carries_tcp_with_geneve_on_the_wire(testbed: Testbed) -> None:
    tb = testbed
    _, ep = _up(tb, "ebpf-geneve")
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "geneve", snaplen=96) as cap:
        tb.a.run(["ping", "-c", "2", "-i", "0.2", "-s", "100", "-W", "2", ep.b4], timeout=20)
    end = _iperf(tb, ep.b4, seconds=1)
    assert end["sum_received"]["bytes"] > 0
    gen = [p for p in cap.packets if p.udp_to(6081)]
    assert {p.length for p in gen} == {178}
    for f in pcap.frames(cap.path.read_bytes()):
        if f[12:14] == b"\x08\x00" and f[23] == 17 and f[36:38] == b"\x17\xc1":
            assert f[42:50] == bytes.fromhex("00006558") + (42 << 8).to_bytes(4, "big")


# ---- nothing left behind --------------------------------------------------------------------
def _leftovers(rid: str) -> list[str]:
    left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
    left += [str(p) for p in (loader.run_dir(rid),) if p.exists()]
    return left


def test_teardown_removes_pins_filters_and_routes() -> None:
    rid = names.new_run_id()
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        _, ep = _up(tb)
        assert loader.run_dir(rid).is_dir()
        # undo everything but the testbed: filters, routes and pins go, namespaces stay
        first = next(i for i, e in enumerate(ledger.entries) if e["kind"] == "bpffs" or
                     e["kind"] == "bpfpins")
        mine = ledger.entries[first:]
        del ledger.entries[first:]
        Ledger(rid, journal=False, entries=mine).undo_all()
        assert not loader.run_dir(rid).exists()
        assert loader.filters(tb.a.netns, tb.a.underlay_if) == {"egress": [], "ingress": []}
        routes = tb.a.run(["ip", "route", "show"], timeout=10).stdout
        assert "realm" not in routes, routes
        routes6 = tb.a.run(["ip", "-6", "route", "show"], timeout=10).stdout
        neigh6 = tb.a.run(["ip", "-6", "neigh", "show"], timeout=10).stdout
        assert "fe80::7462" not in routes6 + neigh6, routes6 + neigh6
    finally:
        errors = ledger.close()
        local.sweep(rid)
    assert not errors
    assert not _leftovers(rid)


@pytest.mark.parametrize(("decap", "attach"), [("tc", "tc"), ("xdp", "tc"), ("tc", "tcx")])
def test_sigkilled_run_leaves_pins_that_cleanup_removes(tmp_path: Path, decap: str,
                                                        attach: str) -> None:
    if attach == "tcx" and loader.tcx_missing(platform.release()):
        pytest.skip(loader.tcx_missing(platform.release()))
    state = tmp_path / "state"
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(state)}
    script = (
        "import sys, time\n"
        "from tunbench import tunnels\n"
        "from tunbench.testbed import local, names\n"
        "from tunbench.testbed.ledger import Ledger\n"
        "rid = names.new_run_id(); led = Ledger(rid); tb = local.build(rid, led)\n"
        "d = tunnels.get('ebpf-vxlan')()\n"
        f"d.up(tb, d.parse_params({{'decap': '{decap}', 'attach': '{attach}'}}))\n"
        "print(rid, flush=True); time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                         text=True)
    rid = ""
    try:
        assert p.stdout is not None
        rid = p.stdout.readline().strip()
        assert rid and loader.run_dir(rid).is_dir()
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        assert loader.run_dir(rid).is_dir(), "nothing was left to clean"
        # what `tunbench cleanup` does, restricted to this run (others' runs are not ours):
        journal = state / f"{rid}.jsonl"
        entries = [json.loads(ln) for ln in journal.read_text().splitlines()]
        assert {"bpfpins", "tbtun-tc"} <= {e["kind"] for e in entries}
        assert [e.get("xdp") for e in entries if e["kind"] == "tbtun-tc"] == [decap == "xdp"] * 2
        assert [bool(e.get("tcx")) for e in entries if e["kind"] == "tbtun-tc"] == \
            [attach == "tcx"] * 2
        for e in entries:        # the killed process held nothing: the pinned links hold
            if e["kind"] == "tbtun-tc":
                assert loader.tcx_attached(e["netns"], e["name"]) == (attach == "tcx")
        assert not Ledger(rid, journal=False, entries=entries).undo_all()
        local.sweep(rid)
        assert not _leftovers(rid)
    finally:
        if p.poll() is None:
            p.kill()
        if rid:
            local.sweep(rid)
    assert not (STATE_DIR / f"{rid}.jsonl").exists()
