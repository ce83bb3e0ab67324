"""Kernel WireGuard, kernel IPsec (IKEv2 by charon, static `ip xfrm` keys) and the OVS kernel
datapath, proven inside the VM lab guest (this host's kernel has none of them).

Same proof as test_kernel_tunnels.py, on the real testbed with the real driver:
- the DF ping of exactly the tunnel MTU passes and its outer packet is unfragmented and exactly
  the underlay MTU (ESP padding included); one byte more fails;
- a 1 s iperf3 moves the kind's own counters (device, WireGuard peer, IPsec SA, OVS datapath
  vport) by at least the bytes iperf3 received;
- tcpdump on site b's underlay sees the outer header both ways (WireGuard UDP/51820, ESP = IP
  proto 50, ESP in UDP/4500 with encap, VXLAN UDP/4789, Geneve UDP/6081, GRE proto 47) and no
  packet of the protected traffic in the clear;
- teardown leaves nothing (guest_testbed).
IPsec cases: one per impl x mode x encap combination, the three ciphers spread over them (the
VM tier's time budget rules out the full cross product).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from test_kernel_tunnels import guest_testbed, is_inner, ping, wait_ping  # noqa: F401

from tunbench import pcap, tunnels
from tunbench.pcap import Packet
from tunbench.testbed import netlink
from tunbench.testbed.base import Testbed
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams

pytestmark = pytest.mark.correctness

ESP = 50


def esp(p: Packet) -> bool:
    return p.proto == ESP


def natt(p: Packet) -> bool:
    return p.udp_to(4500) and p.sport == 4500


# (site, counter) pairs that must each grow by at least the bytes iperf3 received (a -> b)
DEV = [("a", "tx_bytes"), ("b", "rx_bytes")]
SA_KERNEL = [("a", "sa_out_bytes"), ("b", "sa_in_bytes")]
SA_STATIC = [("a", "sa_bytes"), ("b", "sa_bytes")]
OVS_SYSTEM = [("a", "dp_inner_rx_bytes"), ("a", "dp_tunnel_tx_bytes"),
              ("b", "dp_tunnel_rx_bytes"), ("b", "dp_inner_tx_bytes")]

# kind, params, outer-packet predicate, counters that must move
CASES: list[tuple[str, dict, Callable[[Packet], bool], list[tuple[str, str]]]] = [
    ("wireguard", {"impl": "kernel"}, lambda p: p.udp_to(51820),
     DEV + [("a", "wg_tx_bytes"), ("b", "wg_rx_bytes")]),
    ("ipsec", {"impl": "kernel", "mode": "tunnel", "encap": False, "cipher": "aes-gcm-128"},
     esp, DEV + SA_KERNEL),
    ("ipsec", {"impl": "kernel", "mode": "tunnel", "encap": True, "cipher": "chacha20-poly1305"},
     natt, DEV + SA_KERNEL),
    ("ipsec", {"impl": "kernel", "mode": "transport", "encap": False, "cipher": "aes-gcm-256"},
     esp, SA_KERNEL),
    ("ipsec", {"impl": "kernel", "mode": "transport", "encap": True, "cipher": "aes-gcm-128"},
     natt, SA_KERNEL),
    ("ipsec", {"impl": "xfrm", "mode": "tunnel", "cipher": "aes-gcm-256"}, esp, DEV + SA_STATIC),
    ("ipsec", {"impl": "xfrm", "mode": "transport", "cipher": "chacha20-poly1305"}, esp,
     SA_STATIC),
    ("ovs-vxlan", {"datapath": "system"}, lambda p: p.udp_to(4789), OVS_SYSTEM),
    ("ovs-geneve", {"datapath": "system"}, lambda p: p.udp_to(6081), OVS_SYSTEM),
    ("ovs-gre", {"datapath": "system"}, lambda p: p.proto == 47, OVS_SYSTEM),
]


def case_id(case: tuple) -> str:
    kind, params = case[0], case[1]
    return kind + "".join(f"-{v if not isinstance(v, bool) else k + str(int(v))}"
                          for k, v in params.items())


def protected(tb: Testbed, transport: bool) -> Callable[[Packet], bool]:
    """Packets that carry the tunnelled traffic itself (must never appear in the clear)."""
    if not transport:
        return lambda p: is_inner(p.src) or is_inner(p.dst)
    ends = {tb.a.underlay4, tb.b.underlay4}
    return lambda p: p.version == 4 and {p.src, p.dst} == ends


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_secure_kind(guest_testbed: Testbed, case) -> None:  # noqa: F811
    kind, raw, encapsulated, must_move = case
    t0 = time.monotonic()
    tb = guest_testbed
    drv = tunnels.get(kind)
    params = drv.parse_params(raw)
    assert drv.requirements(params) == [], drv.requirements(params)
    ep = drv().up(tb, params)
    transport = raw.get("mode") == "transport"
    target = ep.b4
    assert ep.mtu == drv.tunnel_mtu(params, tb.underlay_mtu)
    assert ep.mtu + ep.overhead == tb.underlay_mtu
    if not transport:
        assert netlink.link_mtu(tb.a.netns, str(ep.a_ifname)) == ep.mtu
    wait_ping(tb, target)

    # MTU: the largest DF packet fits exactly; its outer packet is the underlay MTU, whole
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "mtu") as cap:
        ping(tb, target, "-c", "1", "-M", "do", "-s", str(ep.mtu - 28))
    big = [p for p in cap.packets if encapsulated(p) and p.dst == tb.b.underlay4]
    assert big, f"no {kind} packet on the underlay: {cap.packets}"
    assert max(p.length for p in big) == tb.underlay_mtu, big
    assert not any(p.fragment for p in cap.packets), cap.packets
    too_big = ping(tb, target, "-c", "1", "-M", "do", "-s", str(ep.mtu - 28 + 1), check=False)
    assert not too_big.ok, too_big.stdout

    # traffic: ping + 1 s iperf3, counted by the kind and encapsulated on the wire
    before = drv().counters(tb, ep)
    with pcap.capture(tb, tb.b, tb.b.underlay_if, "traffic") as cap:
        ping(tb, target, "-c", "5", "-i", "0.2")
        out = Stream().run(Context(tb, ep, duration=1, warmup=0, family=4), StreamParams())
    after = drv().counters(tb, ep)
    got = out.raw["iperf3"]["bytes_received"]
    assert got > 100_000, out.raw["iperf3"]
    moved = {f"{s}.{k}": after[s][k] - before[s][k] for s, k in must_move}
    assert all(v >= got for v in moved.values()), (got, moved)
    enc = [p for p in cap.packets if encapsulated(p)]
    to_b = [p for p in enc if p.dst == tb.b.underlay4]
    to_a = [p for p in enc if p.dst == tb.a.underlay4]
    assert len(to_b) >= 5 and len(to_a) >= 5, (len(to_b), len(to_a))
    clear = [p for p in cap.packets if protected(tb, transport)(p) and not encapsulated(p)]
    assert not clear, f"protected traffic on the underlay in the clear: {clear[:3]}"
    print(f"{case_id(case)}: overhead {ep.overhead}, mtu {ep.mtu}, iperf3 {got} B, "
          f"moved {moved}, {len(to_b)}+{len(to_a)} encapsulated packets, "
          f"{time.monotonic() - t0:.1f} s")
