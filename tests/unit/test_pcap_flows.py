"""The flow reader of tunbench.pcap and the DF-probe reading of tunbench.pathmtu, on captured
real output (scripts/capture_flows_pcap.py: tests/data/pcap/flows-{native,vxlan}.pcap, a
sockperf TCP and a UDP ping-pong then iperf3 with 2 streams, on site b's underlay at snaplen
128; tests/data/ping/ping-df-{at,above}-*.txt, DF pings at a tunnel's MTU and a byte above)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import pathmtu
from tunbench.pcap import IPPROTO_TCP, IPPROTO_UDP, Seen, parse_flows, parse_pcap

SOCKPERF, IPERF = 11201, 5201


def _to(seen: list[Seen], proto: int, port: int) -> dict[tuple, list[Seen]]:
    flows: dict[tuple, list[Seen]] = {}
    for s in seen:
        if s.carried.proto == proto and s.carried.dport == port:
            flows.setdefault(s.carried.five_tuple(), []).append(s)
    return flows


@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_connections_told_apart_by_their_5_tuples(data_dir: Path, kind: str) -> None:
    raw = (data_dir / "pcap" / f"flows-{kind}.pcap").read_bytes()
    seen = parse_flows(raw)
    assert len(seen) == len(parse_pcap(raw)) > 100
    assert [s.t for s in seen] == sorted(s.t for s in seen) and seen[0].t > 1.7e9   # epoch s
    tcp_pp, udp_pp = _to(seen, IPPROTO_TCP, SOCKPERF), _to(seen, IPPROTO_UDP, SOCKPERF)
    bulk = _to(seen, IPPROTO_TCP, IPERF)
    # one connection per ping-pong, iperf3's control connection and its 2 streams
    assert len(tcp_pp) == len(udp_pp) == 1 and len(bulk) == 3, (tcp_pp, udp_pp, bulk)
    (tcp_key, tcp_flow), = tcp_pp.items()
    (_, udp_flow), = udp_pp.items()
    assert tcp_flow[-1].t < udp_flow[0].t and udp_flow[-1].t < min(f[0].t for f in
                                                                  bulk.values())
    # ~50 requests in 1 s each; the replies on the reversed 5-tuple
    assert 40 <= len(udp_flow) <= 60
    back = [s for s in seen if s.carried.five_tuple() == (IPPROTO_TCP, tcp_key[3], SOCKPERF,
                                                           tcp_key[1], tcp_key[2])]
    assert len(back) >= 40
    if kind == "vxlan":   # everything between the inner addresses rode inside VXLAN
        assert all(s.inner is not None for f in (*tcp_pp.values(), *bulk.values()) for s in f)
        for flow in (tcp_flow, udp_flow, *bulk.values()):
            # one outer source port (the flow hash) in this loss-free capture; TCP re-hashes
            # a flow after a retransmission timeout, and the port follows
            assert len({s.outer.sport for s in flow}) == 1
            assert {s.outer.dport for s in flow} == {4789}
            # the outer packet is the inner one plus 50 B (Ethernet, VXLAN, UDP, IPv4)
            assert all(s.outer.length == s.inner.length + 50 for s in flow if s.inner)
        assert not [s for s in parse_flows(raw, vxlan_port=None) if s.inner is not None]
    else:
        assert all(s.inner is None for s in seen)


def test_df_refusal_and_note_from_real_pings(data_dir: Path) -> None:
    above = (data_dir / "ping" / "ping-df-above-vxlan.txt").read_text()
    at = (data_dir / "ping" / "ping-df-at-vxlan.txt").read_text()
    assert "1 received" in at
    line = pathmtu.refusal(above)
    assert "mtu=1450" in line.replace(" ", "") and line in above
    assert pathmtu.refusal("") == "no output"
    ok = {"family": 4, "mtu": 1450, "at_mtu": {"size": 1450, "passed": True},
          "above_mtu": {"size": 1451, "passed": False, "reply": line}, "verified": True}
    assert pathmtu.note(ok) is None
    short = {**ok, "at_mtu": {"size": 1450, "passed": False, "reply": "x"}, "verified": False}
    assert "did not pass" in str(pathmtu.note(short))
    wide = {**ok, "above_mtu": {"size": 1451, "passed": True}, "verified": False}
    assert "1451 B passed" in str(pathmtu.note(wide))


def test_probe_argv_sizes_the_ip_packet() -> None:
    assert pathmtu.probe_argv("10.0.0.2", 4, 1450)[-3:] == ["-s", "1422", "10.0.0.2"]
    assert pathmtu.probe_argv("fd00::2", 6, 1450)[-3:] == ["-s", "1402", "fd00::2"]
    assert pathmtu.probe_argv("10.0.0.2", 4, 9000)[:9] == ["ping", "-4", "-c", "1", "-W", "1",
                                                            "-n", "-M", "do"]


def test_the_probe_above_the_mtu_waits_a_few_rtts() -> None:
    # ping waits its whole -W even after a local "message too long": 1 s a case before
    assert pathmtu.above_wait(0.08) == pathmtu.ABOVE_WAIT_MIN_S          # a veth: 50 ms
    assert pathmtu.above_wait(80.0) == pytest.approx(0.4)                 # a WAN: 5 RTTs
    assert pathmtu.above_wait(900.0) == pathmtu.above_wait(None) == pathmtu.WAIT_S
    assert pathmtu.probe_argv("10.0.0.2", 4, 1451, 0.05)[4:6] == ["-W", "0.05"]
