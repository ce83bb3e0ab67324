"""SRv6 gateways and transit End nodes without root: the segment lists the gateways put in
their SRH (transit SIDs in path order, then the peer's End.DX4/End.DX6; reversed back), the
commands each namespace gets, the inner MTU the SRH leaves, the refusals (an IPv4 underlay, a
transit router no gateway pair steers through, gateways that differ, an impl srv6 has not, a
kernel without seg6), the srv6-gateways preset's plan, and the SRH parser on a capture of the
real thing (tests/data/chain/srv6-transit-*.pcap: 3 pings over IPv4 and 3 over IPv6 through
gwa -> transit (End) -> gwb -> router, captured on both sides of the transit node)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tunbench import capabilities, presets
from tunbench import spec as exp_spec
from tunbench.chain import build, srv6
from tunbench.chain import hosts as chain_hosts
from tunbench.chain import spec as chain_spec
from tunbench.errors import SpecError
from tunbench.pcap import parse_srh, parse_srh_pcap
from tunbench.plan import plan

DATA = Path(__file__).parent.parent / "data" / "chain"
GW = {"kind": "gateway", "tunnel": "srv6"}
END = {"kind": "router", "srv6_end": True}


class Seg6Kernel:
    """A kernel built with SRv6, as Debian's is: what these tests plan for (the host's own
    kernel may lack it; test_a_kernel_without_seg6_is_refused_once_for_the_pair covers that)."""

    where, release = "this host", "6.1.0-amd64"

    def kernel_config(self) -> dict[str, str]:
        return {"CONFIG_IPV6": "y", "CONFIG_IPV6_SEG6_LWTUNNEL": "y"}

    def has_tool(self, tool: str) -> bool:
        return True


@pytest.fixture(autouse=True)
def seg6_kernel() -> Iterator[None]:
    """Plans are made for a kernel with SRv6, whichever kernel runs the tests."""
    with capabilities.viewing(Seg6Kernel()):
        yield


def refused(chain: dict) -> str:
    with pytest.raises(SpecError) as exc:
        exp_spec.build({"chain": chain}, "e.toml")
    line = exc.value.one_line()
    assert "\n" not in line, line
    return line


def two_transits() -> chain_spec.ChainSpec:
    chain = chain_spec.parse({"path": ["router", "gwa", "tr1", "wan", "tr2", "gwb", "router"],
                              "gwa": GW, "gwb": dict(GW), "tr1": END, "tr2": dict(END),
                              "wan": {"kind": "wan", "rate": "100mbit"}})
    assert chain is not None
    return chain


def test_the_segment_lists_name_the_transit_sids_in_path_order_then_the_peer() -> None:
    chain = two_transits()
    p = srv6.plan_of(chain.hops)
    assert p is not None and (p.first, p.second, p.transit, p.n) == (2, 6, (3, 5), 7)
    assert p.segments("b", 4) == ["2001:2:f:3::e", "2001:2:f:5::e", "2001:2:f:6::d4"]
    assert p.segments("b", 6) == ["2001:2:f:3::e", "2001:2:f:5::e", "2001:2:f:6::d6"]
    assert p.segments("a", 4) == ["2001:2:f:5::e", "2001:2:f:3::e", "2001:2:f:2::d4"]
    assert p.overhead == 40 + 8 + 3 * 16
    # the sites' packets are routed by the two routers and the gateway pair once (gwa
    # encapsulates on input, gwb forwards what it decapsulates), not by what lies between
    assert chain.routed_hops == 3


def test_each_namespace_gets_its_locator_routes_sids_and_encap_routes() -> None:
    chain = two_transits()
    hops = build.place("abcde", chain)
    p = srv6.plan_of(hops)
    assert p is not None
    gwa = [" ".join(a) for a in srv6.route_argvs(p, 2, hops[1].right_if, hops[1].left_if)]
    assert gwa == [
        "ip -6 route add 2001:2:f:3::/64 via 2001:2:1:2::2",
        "ip -6 route add 2001:2:f:5::/64 via 2001:2:1:2::2",
        "ip -6 route add 2001:2:f:6::/64 via 2001:2:1:2::2",
        "ip -6 route add 2001:2:f:2::d4/128 encap seg6local action End.DX4 nh4 0.0.0.0 count "
        "dev tbabcdes1r",
        "ip -6 route add 2001:2:f:2::d6/128 encap seg6local action End.DX6 nh6 :: count "
        "dev tbabcdes1r",
        *[f"ip{fam} route replace {net} encap seg6 mode encap segs 2001:2:f:3::e,"
          f"2001:2:f:5::e,2001:2:f:6::{fn} dev tbabcdes2l"
          for seg in (6, 7) for fam, net, fn in (("", build.nets(seg)[0], "d4"),
                                                  (" -6", build.nets(seg)[1], "d6"))]]
    tr2 = [" ".join(a) for a in srv6.route_argvs(p, 5, hops[4].right_if, hops[4].left_if)]
    assert tr2 == ["ip -6 route add 2001:2:f:2::/64 via 2001:2:1:4::1",
                   "ip -6 route add 2001:2:f:3::/64 via 2001:2:1:4::1",
                   "ip -6 route add 2001:2:f:6::/64 via 2001:2:1:5::2",
                   "ip -6 route add 2001:2:f:5::e/128 encap seg6local action End count "
                   "dev tbabcdes5l"]
    gwb = srv6.route_argvs(p, 6, hops[5].right_if, hops[5].left_if)
    encap = [a for a in gwb if "seg6" in a and "mode" in a]
    assert [a[a.index("replace") + 1] for a in encap] == [*build.nets(0), *build.nets(1)]
    assert {a[a.index("segs") + 1] for a in encap if "-6" not in a} == \
        {"2001:2:f:5::e,2001:2:f:3::e,2001:2:f:2::d4"}
    # outside the gateways' stretch: nothing (the sites and the outer routers route plainly)
    assert srv6.route_argvs(p, 1, hops[0].right_if, hops[0].left_if) == []
    assert srv6.route_argvs(p, 7, hops[6].right_if, hops[6].left_if) == []


def test_the_site_sides_get_the_mtu_the_srh_leaves() -> None:
    chain = two_transits()
    inner = 1500 - 40 - 8 - 3 * 16
    assert build.segment_mtus(chain, 7, 1500) == [inner, inner, 1500, 1500, 1500, 1500,
                                                  inner, inner]
    plain = chain_spec.parse({"path": ["gwa", "gwb"], "gwa": GW, "gwb": dict(GW)})
    assert plain is not None and build.segment_mtus(plain, 2, 9000) == [9000 - 64, 9000,
                                                                        9000 - 64]


@pytest.mark.parametrize("chain,needle", [
    ({"path": ["gwa", "wan", "gwb"], "gwa": {**GW, "underlay": 4},
      "gwb": {**GW, "underlay": 4}},
     "gateways gwa and gwb: srv6 needs an IPv6 underlay (SRv6 carries its segment list in IPv6 "
     "headers): set underlay = 6 or leave underlay out"),
    ({"path": ["gwa", "wan", "gwb"], "gwa": {**GW, "underlay": 6}, "gwb": GW},
     "gateways gwa and gwb terminate different tunnels (srv6 underlay 6, srv6)"),
    ({"path": ["tr", "router"], "tr": END},
     "router tr has srv6_end = true but there is no pair of srv6 gateways"),
    ({"path": ["tr", "gwa", "gwb"], "tr": END, "gwa": GW, "gwb": GW},
     "router tr has srv6_end = true but it lies outside the srv6 gateways at positions 2 "
     "and 3"),
    ({"path": ["gwa", "tr", "gwb"], "tr": END, "gwa": {**GW, "impl": "vpp"},
      "gwb": {**GW, "impl": "vpp"}},
     "impl 'vpp' is not an implementation of srv6 (it has one only: leave impl out)"),
    ({"path": ["gwa", "gwb"], "gwa": {**GW, "underlay": 5}, "gwb": {**GW, "underlay": 5}},
     "underlay 5 must be 4 or 6"),
    ({"path": ["gwa", "tr", "gwb"], "tr": {"kind": "router", "srv6_end": "yes"}, "gwa": GW,
      "gwb": GW}, "chain.tr.srv6_end 'yes' is not valid: true or false"),
])
def test_bad_srv6_chains_are_refused_in_one_line(chain: dict, needle: str) -> None:
    line = refused(chain)
    assert needle in line, line
    assert line.count("IPv6 underlay") <= 1   # once for the pair


class NoSeg6:
    """A host whose kernel was built without SRv6 (CONFIG_IPV6_SEG6_LWTUNNEL unset)."""

    where, release = "this host", "6.1.0-no-seg6"

    def kernel_config(self) -> dict[str, str]:
        return {"CONFIG_IPV6": "y"}

    def has_tool(self, tool: str) -> bool:
        return True


def test_a_kernel_without_seg6_is_refused_once_for_the_pair() -> None:
    """The transit router's need is the pair's: one line for the whole SRv6 path."""
    with capabilities.viewing(NoSeg6()):
        line = refused({"path": ["gwa", "tr", "gwb"], "tr": END, "gwa": GW, "gwb": GW})
    assert "kernel CONFIG_IPV6_SEG6_LWTUNNEL" in line and "gateways gwa and gwb: srv6 needs " \
        "what this host lacks" in line, line


def test_between_hosts_the_hosts_are_asked_for_seg6() -> None:
    chain = chain_spec.parse({"path": ["gwa", "tr", "wan", "gwb"], "tr": END, "gwa": GW,
                              "gwb": GW, "wan": {"kind": "wan"}})
    assert chain is not None
    assert chain_hosts.kernel(chain)["CONFIG_IPV6_SEG6_LWTUNNEL"] == ["function gwa",
                                                                      "function gwb"]
    assert "ip" in chain_hosts.tools(chain)


def test_the_preset_measures_direct_and_through_the_gateways_in_each_round() -> None:
    exp = exp_spec.build(presets.load("srv6-gateways"), "preset srv6-gateways")
    assert exp.chain is not None and exp.chain.direct
    assert [(h.kind, h.params.get("tunnel"), h.params.get("srv6_end"))
            for h in exp.chain.hops] == [("gateway", "srv6", None), ("router", None, True),
                                         ("gateway", "srv6", None)]
    assert [w.name for w in exp.workloads] == ["stream", "udp-rate", "ping"]
    assert exp.duration == 20 and [t.kind for t in exp.tunnels] == ["native"]
    cases = plan(exp)
    first = cases[:6]
    assert [(c.topology, c.workload.name) for c in first] == [
        (t, w) for t in ("direct", "chain") for w in ("stream", "udp-rate", "ping")]
    assert len(cases) == 6 * exp.repeats


def test_the_srh_of_a_captured_transit_hop() -> None:
    """Before the transit node (left) its End SID is the destination with one segment left;
    after it (right) gwb's End.DX4/DX6 SID with none and one hop limit less."""
    left = parse_srh_pcap((DATA / "srv6-transit-left.pcap").read_bytes())
    right = parse_srh_pcap((DATA / "srv6-transit-right.pcap").read_bytes())
    end, dx4, dx6 = "2001:2:f:2::e", "2001:2:f:3::d4", "2001:2:f:3::d6"
    to_b = [s for s in left if s.segments[-1] in (dx4, dx6)]
    assert len(to_b) == 6 and {s.dst for s in to_b} == {end}
    assert {s.segments for s in to_b} == {(end, dx4), (end, dx6)}
    assert {(s.segments_left, s.inner) for s in to_b} == {(1, 4), (1, 41)}
    past = [s for s in right if s.segments[-1] in (dx4, dx6)]
    assert [s.dst for s in past] == [s.segments[-1] for s in to_b]
    assert [s.hop_limit for s in past] == [s.hop_limit - 1 for s in to_b]
    assert {s.segments_left for s in past} == {0}
    assert parse_srh(b"\x60" + bytes(47)) is None   # IPv6 without a routing header
