"""SRv6 gateways and a transit End node in a chain, on real namespaces (seed 004's deployment):
a -> gwa (seg6 encap, SRH) -> transit (seg6local End) -> gwb (End.DX4/End.DX6) -> router -> b.

The SRH is captured on both sides of the transit node: the segment list names its End SID and
then gwb's decapsulation SID, the outer destination is the transit SID before it and gwb's
after it, segments left drops by one and the outer hop limit by one (the transit node is a
hop of the SRv6 path); the sites' own addresses never appear in the clear between the
gateways. The inner TTL counts the hops that route the sites' packets: the gateway pair once
(gwa encapsulates on input, gwb forwards what it decapsulates) and the router, not the
transit node. The preset's plan (direct and through the gateways in the same round:
TCP and UDP throughput, RTT and hop count) runs end to end with 1 s measurements, and nothing
of any of it is left after teardown."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_chain import chain_testbed, ours

from kinds_here import lacks
from tunbench import pcap, presets
from tunbench import spec as exp_spec
from tunbench.chain import hops, srv6
from tunbench.plan import plan
from tunbench.runner import run_case
from tunbench.testbed.base import Site, Testbed

pytestmark = [pytest.mark.skipif(lacks("srv6") is not None,
                                 reason=f"no SRv6 here: {lacks('srv6')}"),
              pytest.mark.correctness]

CHAIN: dict[str, Any] = {
    "path": ["gwa", "transit", "gwb", "rtb"],
    "gwa": {"kind": "gateway", "tunnel": "srv6"},
    "transit": {"kind": "router", "srv6_end": True},
    "gwb": {"kind": "gateway", "tunnel": "srv6"},
    "rtb": {"kind": "router"}}
ROUTED = 2   # the srv6 pair once (gwb forwards what it decapsulates) and rtb; the transit
#              node forwards the outer packets only


@pytest.fixture
def srv6_chain() -> Iterator[Testbed]:
    yield from chain_testbed(CHAIN)


def _srh_count(cap: pcap.CaptureResult, segments: tuple[str, ...]) -> int:
    """SRv6 packets with this segment list in a capture still being written (a record
    tcpdump is writing right now counts at the next look)."""
    try:
        return sum(s.segments == segments for s in pcap.parse_srh_pcap(cap.path.read_bytes()))
    except (ValueError, IndexError, struct.error):
        return 0


def test_the_srh_steers_through_the_transit_node_which_counts_as_a_hop(
        srv6_chain: Testbed) -> None:
    tb = srv6_chain
    by = {h.name: h for h in hops.hops_of(tb)}
    gwa, tr, gwb = by["gwa"], by["transit"], by["gwb"]
    end, b4, b6 = srv6.sid(2, "e"), srv6.sid(3, "d4"), srv6.sid(3, "d6")
    a4 = srv6.sid(1, "d4")
    left = Site("trl", tr.netns, tr.left_if, tr.left4, tr.left6)
    right = Site("trr", tr.netns, tr.right_if, tr.right4, tr.right6)
    with pcap.capture(tb, left, tr.left_if, "transit-left") as cap_l, \
            pcap.capture(tb, right, tr.right_if, "transit-right") as cap_r:
        r4 = tb.a.run(["ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", tb.b.underlay4],
                      check=False, timeout=15)
        r6 = tb.a.run(["ping", "-6", "-n", "-c", "3", "-i", "0.2", "-W", "1",
                       tb.b.underlay6], check=False, timeout=15)
        # answered pings were on the wire; a starved tcpdump may not have read them yet (the
        # capture stops it 0.2 s after the block): wait up to 10 s for 3 of each on each side
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                _srh_count(c, seg) >= 3 for c in (cap_l, cap_r)
                for seg in ((end, b4), (end, b6), (end, a4))):
            time.sleep(0.05)
    # end to end both ways, the inner TTL / hop limit counting the routing hops only
    assert r4.ok and f"ttl={64 - ROUTED}" in r4.stdout, r4.stdout + r4.stderr
    assert r6.ok and f"ttl={64 - ROUTED}" in r6.stdout, r6.stdout + r6.stderr
    assert tb.notes["chain"]["routed_hops"] == ROUTED
    srh_l = pcap.parse_srh_pcap(cap_l.path.read_bytes())
    srh_r = pcap.parse_srh_pcap(cap_r.path.read_bytes())
    # towards b: [transit End, gwb End.DX4/DX6]; before the transit node its SID is the
    # destination with one segment left, after it gwb's SID with none, one hop limit less
    for dx, inner in ((b4, 4), (b6, 41)):
        before = [s for s in srh_l if s.segments == (end, dx)]
        after = [s for s in srh_r if s.segments == (end, dx)]
        assert len(before) == len(after) == 3, (srh_l, srh_r)
        assert {(s.src, s.dst, s.segments_left, s.inner) for s in before} == \
            {(gwa.right6, end, 1, inner)}
        assert {(s.src, s.dst, s.segments_left, s.inner) for s in after} == \
            {(gwa.right6, dx, 0, inner)}
        assert [s.hop_limit - 1 for s in before] == [s.hop_limit for s in after]
    # the replies: towards a through the same transit SID, then gwa's End.DX4
    back_r = [s for s in srh_r if s.segments == (end, a4)]
    back_l = [s for s in srh_l if s.segments == (end, a4)]
    assert len(back_r) == len(back_l) == 3 and {s.src for s in back_l} == {gwb.left6}
    assert [s.hop_limit - 1 for s in back_r] == [s.hop_limit for s in back_l]
    assert {s.dst for s in back_l} == {a4} and {s.segments_left for s in back_l} == {0}
    # nothing of the sites crosses the transit node in the clear
    sites = {tb.a.underlay4, tb.b.underlay4, tb.a.underlay6, tb.b.underlay6}
    for cap in (cap_l, cap_r):
        assert not [p for p in cap.packets if {p.src, p.dst} & sites], cap.packets
    # the SIDs' own counters saw the traffic (proof of the SRv6 datapath per hop)
    assert srv6.counters(tr)["srv6_end_packets"] >= 12
    c = srv6.counters(gwb)
    assert c["srv6_end_dx4_packets"] >= 3 and c["srv6_end_dx6_packets"] >= 3, c
    gt = tb.notes["chain"]["gateway_tunnel"]
    assert gt["kind"] == "srv6" and gt["transit"] == ["transit"]
    assert gt["inner_mtu"] == 1500 - 40 - 8 - 2 * 16 == tb.underlay_mtu
    probe = hops.probe(tb)
    assert probe["routers"] == ROUTED, probe


def test_the_preset_measures_direct_and_through_the_gateways_in_one_round() -> None:
    raw = presets.scale(presets.load("srv6-gateways"), 0.1)
    raw["experiment"].update(duration=1, warmup=0, repeats=1)
    exp = exp_spec.build(raw, "preset srv6-gateways")
    docs = [run_case(exp, case) for case in plan(exp)]
    for doc in docs:
        assert doc["status"] == "ok", doc["error"]
        assert ours(doc["case"]["run_id"]) == [], doc["case"]["run_id"]
    by = {(d["case"]["topology"], d["case"]["workload"]["name"]): d for d in docs}
    assert set(by) == {(t, w) for t in ("direct", "chain")
                       for w in ("stream", "udp-rate", "ping")}
    for topo in ("direct", "chain"):
        assert by[topo, "stream"]["metrics"]["throughput"]["value"] > 0
        assert by[topo, "udp-rate"]["metrics"]["throughput"]["value"] > 0
        assert by[topo, "ping"]["metrics"]["rtt_avg"]["value"] > 0
    # seed 004's TTL: direct the sites share a link, through the gateways one routed hop
    assert by["direct", "ping"]["metrics"]["hops"]["value"] == 0
    assert by["chain", "ping"]["metrics"]["hops"]["value"] == 1
    for w in ("stream", "udp-rate", "ping"):
        ch = by["chain", w]
        assert "chain" not in by["direct", w]
        assert ch["testbed"]["chain"]["gateway_tunnel"]["kind"] == "srv6"
        assert ch["chain"]["probe"]["routers"] == 1
        delta = ch["chain"]["counters"]["delta"]
        assert delta["transit"]["function"]["srv6_end_packets"] > 0, delta["transit"]
        assert delta["gwb"]["function"]["srv6_end_dx4_packets"] > 0, delta["gwb"]
    # the report's chain table and take-away carry seed 004's path figures: RTT and hops
    from tunbench.report import hops as hops_report
    from tunbench.results.records import CaseRecord
    recs = [CaseRecord.from_doc(d) for d in docs]
    cmp = {(r["workload"], r["metric"]): r for r in hops_report.chain_vs_direct(recs)}
    rtt, hop = cmp[("ping", "rtt_avg")], cmp[("ping", "hops")]
    assert (rtt["direct"], rtt["chain"]) == (by["direct", "ping"]["metrics"]["rtt_avg"]["value"],
                                             by["chain", "ping"]["metrics"]["rtt_avg"]["value"])
    assert (hop["direct"], hop["chain"], hop["pct"]) == (0, 1, None)
    said = [t.text for t in hops_report.takeaways(recs) if "RTT" in t.text]
    assert len(said) == 1 and said[0].startswith("Through the chain, ping's RTT is ")
    assert said[0].endswith(", +1 hop (from the replies' TTL).")
