"""tbtun against the kernel's own tunnel device, inside the VM lab guest (full Debian kernel,
which has Geneve; this host does not): site a runs tbtun (ebpf-geneve / ebpf-vxlan: tb_encap in
tc egress, decapsulation in tc ingress or XDP), site b the kernel's `ip link add type geneve`
(or vxlan) device. They must carry ping and TCP both ways, and a capture on b's underlay must
show the exact outer headers in both directions: UDP to 6081 (4789), the Geneve header
`00 00 65 58 | VNI << 8` (VXLAN `08 00 00 00 | VNI << 8`), 50 bytes of overhead (outer IPv4 178
B for a 128-B inner ICMP packet; a full-size DF ping is exactly the underlay MTU outside), and
on tbtun's packets DF, UDP checksum 0 and a source port from the flow hash (32768..60999).

Decapsulation hooks: both run on the guest's kernel (Debian 12's 6.1): tc decap of an IPv4
packet inside needs no DECAP_L3 flag (those arrived in 6.3 and are used only for IPv6 inside,
which this test does not send), XDP decap needs none. Geneve only: the VXLAN interop (tbtun
against the kernel's VXLAN device) is proven on the host by tests/netns/test_tbtun.py, whose
kernel has VXLAN; the guest's time is kept for what only it has. The object is the host's
build/bpf/tbtun.bpf.o, read through the shared tree; bpftool comes from the guest image (vmlab/image.py). Correctness only: the
guest is 25-30x slower than the host.
"""

from __future__ import annotations

import json
import platform
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunbench import pcap, proc, tunnels
from tunbench.capabilities import kernel_missing, root_missing
from tunbench.errors import UnavailableError
from tunbench.tbtun import loader, maps
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import Ledger
from tunbench.tunnels._tbtun import REALM, TbtunDriver

pytestmark = pytest.mark.correctness

VNI = 42
A_INNER, B_INNER = "198.19.0.1", "198.19.0.2"
KERNEL_MAC, TBTUN_MAC = "02:74:62:00:00:0b", "02:74:62:00:00:0a"
INNER_MTU = 1450
# encap -> (kernel link kind, its kernel option and module, UDP port, tunnel header for VNI)
KINDS = {
    "geneve": ("geneve", "CONFIG_GENEVE", 6081, bytes.fromhex("00006558")),
    "vxlan": ("vxlan", "CONFIG_VXLAN", 4789, bytes.fromhex("08000000")),
}


def why_not(encap: str, decap: str) -> str | None:
    """The one reason this variant cannot run here, or None."""
    kind, option, _, _ = KINDS[encap]
    root = root_missing()
    if root:
        return root.one_line()
    if not proc.which("bpftool"):
        return ("bpftool is not installed (the VM lab image lists it in "
                "vmlab/image.py BASE_GUEST_PACKAGES: rebuild the image)")
    if not loader.object_path().is_file():
        return (f"tbtun object {loader.object_path()} is not built (run `make bpf` on the "
                "host: the guest reads it through the shared tree)")
    missing = kernel_missing(option, f"the kernel's {kind} device", kind)
    if missing:
        return missing.one_line()
    old = loader.kernel_too_old()
    if old:
        return old.one_line()
    return None


@pytest.fixture
def testbed() -> Iterator[Testbed]:
    """The real tunbench testbed; nothing of it (namespaces, links, pins) may be left."""
    rid = names.new_run_id()
    ledger = Ledger(rid)
    try:
        yield local.build(rid, ledger)
    finally:
        errors = ledger.close()
        left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
        pins = loader.run_dir(rid).exists()
        local.sweep(rid)
        assert not errors, errors
        assert not left and not pins, (left, pins)


def tbtun_on_a(tb: Testbed, encap: str, decap: str) -> Path:
    """Only site a runs tbtun (the loader's steps, as the driver does them): one rule towards
    b's kernel device, whose MAC is the inner destination."""
    _, _, port, _ = KINDS[encap]
    where = loader.load(tb.ledger, tb.run_id, "a")
    loader.configure(where, local4=tb.a.underlay4, realm=REALM, mtu=tb.underlay_mtu,
                     vxlan_port=maps.DEFAULT_PORTS["vxlan"],
                     geneve_port=maps.DEFAULT_PORTS["geneve"])
    loader.add_rules(where, [maps.Rule(f"{B_INNER}/32", tb.b.underlay4, VNI, encap, port,
                                       KERNEL_MAC)])
    how = loader.attach_method("auto", platform.release())
    assert how == "tc", platform.release()        # 6.1: no tcx, so auto takes clsact
    loader.attach(tb.ledger, tb.a.netns, tb.a.underlay_if, where, decap, how=how)
    assert not loader.tcx_attached(tb.a.netns, tb.a.underlay_if)   # the query copes with 6.1
    TbtunDriver._inner(tb, tb.a, tb.b, A_INNER, INNER_MTU)
    return where


def kernel_device_on_b(tb: Testbed, encap: str) -> str:
    """The kernel's device in site b towards a's underlay (VNI 42, the IANA port), inner
    198.19.0.2/24; a's inner address is a static neighbour (tbtun answers no ARP)."""
    kind, _, port, _ = KINDS[encap]
    ifname = names.link_name(tb.run_id, "kx")
    extra = (["local", tb.b.underlay4, "dev", tb.b.underlay_if] if kind == "vxlan" else [])
    tb.b.run(["ip", "link", "add", ifname, "address", KERNEL_MAC, "type", kind, "id", str(VNI),
              "remote", tb.a.underlay4, "dstport", str(port), *extra], timeout=30)
    tb.ledger.link(ifname, str(tb.b.netns))
    # no IPv6 chatter (MLD reports): on 6.1 tbtun's tc decap cannot carry IPv6 inside (no
    # DECAP_L3_IPV6 before 6.3) and would count them as decap errors; this test is IPv4 inside
    for argv in (["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"],
                 ["ip", "link", "set", ifname, "addrgenmode", "none"],
                 ["ip", "link", "set", ifname, "mtu", str(INNER_MTU), "up"],
                 ["ip", "addr", "add", f"{B_INNER}/24", "dev", ifname],
                 ["ip", "neigh", "add", A_INNER, "lladdr", TBTUN_MAC, "nud", "permanent",
                  "dev", ifname]):
        tb.b.run(argv, timeout=30)
    return ifname


def outer_udp(frames_: Iterator[bytes], src: str, port: int) -> list[bytes]:
    """IPv4/UDP frames from `src` to `port` (no IP options: tbtun and the kernel send none)."""
    addr = bytes(int(x) for x in src.split("."))
    return [f for f in frames_ if len(f) >= 64 and f[12:14] == b"\x08\x00" and f[23] == 17
            and f[26:30] == addr and struct.unpack("!H", f[36:38])[0] == port]


def check_outer(f: bytes, encap: str, inner_dst_mac: str, ours: bool) -> int:
    """The exact outer headers of one frame; returns its outer IPv4 total length."""
    _, _, port, head = KINDS[encap]
    ip, udp, tun, inner = f[14:34], f[34:42], f[42:50], f[50:64]
    assert ip[0] == 0x45 and ip[9] == 17, ip.hex()
    total = struct.unpack("!H", ip[2:4])[0]
    sport, dport, ulen, csum = struct.unpack("!HHHH", udp)
    assert dport == port and ulen == total - 20, (dport, ulen, total)
    assert tun == head + (VNI << 8).to_bytes(4, "big"), tun.hex()
    assert inner[:6] == bytes.fromhex(inner_dst_mac.replace(":", "")), inner.hex()
    assert inner[12:14] == b"\x08\x00" and f[64] == 0x45, f[50:66].hex()     # inner IPv4
    if ours:   # tbtun: DF, zero checksum over IPv4 (the kernel's default), flow-hash port
        assert ip[6] & 0x40 and csum == 0 and 32768 <= sport <= 60999, (ip.hex(), sport, csum)
    return total


def iperf(tb: Testbed, seconds: float, reverse: bool) -> dict[str, Any]:
    """One TCP stream a -> b (b -> a with reverse) through the tunnel; iperf3's end summary."""
    server = tb.spawn(tb.b, ["iperf3", "-s", "-1", "--forceflush", "-B", B_INNER],
                      f"iperf3-s-{time.monotonic_ns()}")
    proc.wait_ready(server, ready_text="Server listening", timeout=120)   # TCG is slow
    r = tb.a.run(["iperf3", "-c", B_INNER, "-t", f"{seconds:g}", "-J",
                  *(["-R"] if reverse else [])], timeout=seconds + 120, check=False)
    server.stop()   # iperf3 3.12 -s -1 sometimes lingers after -R
    doc = json.loads(r.stdout)
    assert "error" not in doc, f"iperf3: {doc['error']}"
    end: dict[str, Any] = doc["end"]
    return end


VARIANTS = [("geneve", d) for d in ("tc", "xdp")]   # VXLAN: tests/netns/test_tbtun.py


@pytest.mark.parametrize("encap,decap", VARIANTS, ids=[f"{e}-{d}" for e, d in VARIANTS])
def test_tbtun_and_the_kernel_device_carry_tcp_both_ways_with_exact_headers(
        testbed: Testbed, encap: str, decap: str) -> None:
    reason = why_not(encap, decap)
    if reason:
        pytest.skip(reason)
    tb = testbed
    _, _, port, _ = KINDS[encap]
    where = tbtun_on_a(tb, encap, decap)
    kx = kernel_device_on_b(tb, encap)
    if decap == "xdp":
        assert loader.xdp_prog(tb.a.netns, tb.a.underlay_if) == "tb_xdp_decap"
    ping = ["ping", "-n", "-c", "3", "-i", "0.2", "-W", "3"]
    for _ in range(20):    # the kernel device may need a moment after `up`
        if tb.a.run([*ping[:3], "1", "-W", "3", B_INNER], check=False, timeout=30).ok:
            break
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "interop", snaplen=96) as cap:
        tb.a.run([*ping, "-s", "100", B_INNER], timeout=60)
        tb.b.run([*ping, "-s", "100", A_INNER], timeout=60)
        # the largest DF packet the tunnel MTU allows: exactly the underlay MTU outside
        tb.a.run([*ping[:3], "1", "-W", "3", "-M", "do", "-s", str(INNER_MTU - 28), B_INNER],
                 timeout=60)
    ours = outer_udp(pcap.frames(cap.path.read_bytes()), tb.a.underlay4, port)
    # the kernel device also sends its own IPv6 multicast (MLD reports): inner IPv4 only
    theirs = [f for f in outer_udp(pcap.frames(cap.path.read_bytes()), tb.b.underlay4, port)
              if f[62:64] == b"\x08\x00"]
    # a: 3 requests + 3 replies of 128 B inside, 1 full-size request; b: the same, mirrored
    our_sizes = sorted(check_outer(f, encap, KERNEL_MAC, ours=True) for f in ours)
    their_sizes = sorted(check_outer(f, encap, TBTUN_MAC, ours=False) for f in theirs)
    assert our_sizes == [178] * 6 + [tb.underlay_mtu], our_sizes
    assert their_sizes == [178] * 6 + [tb.underlay_mtu], their_sizes
    assert not any(p.fragment for p in cap.packets)

    up = iperf(tb, 1, reverse=False)
    down = iperf(tb, 1, reverse=True)
    for end in (up, down):
        assert end["sum_received"]["bytes"] > 100_000, end["sum_received"]
    kstats = netlink.link_stats(tb.b.netns, kx)
    assert kstats["rx_bytes"] >= up["sum_received"]["bytes"], kstats
    assert kstats["tx_bytes"] >= down["sum_received"]["bytes"], kstats
    st = loader.stats(where)
    assert st["encap"]["packets"] > 50 and st["decap"]["packets"] > 50, st
    assert st["decap_error"]["packets"] == 0 and st["encap_error"]["packets"] == 0, st
    print(f"tbtun {encap} (decap {decap}) <-> kernel {encap}: outer 178 B for 128 B inside "
          f"both ways, iperf3 {up['sum_received']['bytes']} B up, "
          f"{down['sum_received']['bytes']} B down, tbtun {st['encap']['packets']} encap / "
          f"{st['decap']['packets']} decap")


def test_attach_tcx_is_refused_on_a_kernel_without_it(testbed: Testbed) -> None:
    """The guest's 6.1 has no tcx: attach=tcx is one line at preflight (requirements), and
    asked of a site it is refused before anything is made (no pin, no attachment)."""
    why = loader.tcx_missing(platform.release())
    if not why:
        pytest.skip(f"this kernel ({platform.release()}) has tcx: the refusal needs one < 6.6")
    reason = why_not("vxlan", "tc")
    if reason:
        pytest.skip(reason)
    drv = tunnels.get("ebpf-vxlan")
    params = drv.parse_params({"attach": "tcx"})
    missing = [m.one_line() for m in drv.requirements(params)]
    assert [m for m in missing if why in m and "use attach=auto or attach=tc" in m], missing
    with pytest.raises(UnavailableError, match="ebpf-vxlan on site a: attach=tcx: tcx needs"):
        drv().up(testbed, params)
    assert not loader.run_dir(testbed.run_id).exists()
    assert not [e for e in testbed.ledger.entries
                if e["kind"] in ("bpffs", "bpfpins", "tbtun-tc")], testbed.ledger.entries
