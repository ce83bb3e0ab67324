"""Chains without root: the [chain] table refused in one line per problem (a loop, an unknown
kind, a gateway kind that cannot be one, a WAN delay on a kernel without netem), placement
and addressing, the nftables scripts, and the per-hop counters parsed from captured real
output (tests/data/chain, from a chain whose firewall policed and whose WAN dropped)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunbench import spec as exp_spec
from tunbench.capabilities import kernel_missing
from tunbench.chain import build, firewall, hops, nat, wan
from tunbench.chain import hosts as chain_hosts
from tunbench.chain import spec as chain_spec
from tunbench.errors import SpecError

DATA = Path(__file__).parent.parent / "data" / "chain"
NO_ESP = kernel_missing("CONFIG_INET_ESP", "esp", "esp4") is not None
NO_NETEM = kernel_missing("CONFIG_NET_SCH_NETEM", "netem", "sch_netem") is not None


def refused(chain: dict) -> str:
    with pytest.raises(SpecError) as exc:
        exp_spec.build({"chain": chain}, "e.toml")
    line = exc.value.one_line()
    assert "\n" not in line, line
    return line


def test_a_loop_is_refused() -> None:
    line = refused({"path": ["router", "fw", "wan", "fw"], "fw": {"kind": "firewall"},
                    "wan": {"kind": "wan"}})
    assert "e.toml: chain.path is a loop: 'fw' appears at positions 2 and 4" in line


def test_an_unknown_kind_is_refused() -> None:
    line = refused({"path": ["router", "shaper"]})
    assert "unknown function kind 'shaper'" in line and "firewall, gateway, nat, router, wan" in line
    line = refused({"path": ["x"], "x": {"kind": "dpi"}})
    assert "e.toml: chain.x: unknown function kind 'dpi'" in line


@pytest.mark.parametrize("tunnel,what", [("ssh-forward", "cannot be a gateway"),
                                         ("native", "cannot be a gateway"),
                                         ("carrier-pigeon", "not a tunnel kind")])
def test_a_gateway_kind_that_cannot_be_one_is_refused(tunnel: str, what: str) -> None:
    line = refused({"path": ["gw"], "gw": {"kind": "gateway", "tunnel": tunnel}})
    assert f"tunnel '{tunnel}' is" in line and what in line


def _pair(tunnel: str, impl: str = "") -> dict:
    gw = {"kind": "gateway", "tunnel": tunnel, **({"impl": impl} if impl else {})}
    return {"path": ["gwa", "wan", "gwb"], "gwa": gw, "gwb": dict(gw)}


@pytest.mark.parametrize("tunnel", ["vxlan", "wireguard", "ipsec"])
def test_every_gateway_kind_is_accepted(tunnel: str) -> None:
    """wireguard and ipsec resolve to an implementation this host has (go, libipsec here)."""
    if tunnel != "vxlan" and not _host_has(tunnel):
        pytest.skip(f"this host can run no {tunnel} implementation")
    chain = chain_spec.parse(_pair(tunnel))
    assert chain is not None and [h.params["tunnel"] for h in chain.hops
                                  if h.kind == "gateway"] == [tunnel, tunnel]


def _host_has(tunnel: str) -> bool:
    from tunbench import tunnels
    drv = tunnels.get(tunnel)
    return not drv.requirements(drv.default_params())


def test_a_gateway_implementation_the_kind_lacks_is_refused_once_per_pair() -> None:
    line = refused(_pair("ipsec", "turbo"))
    assert "gateways gwa and gwb: impl 'turbo' is not an implementation of ipsec " \
        "(libipsec, kernel, xfrm)" in line
    assert "it has one only" in refused(_pair("vxlan", "go"))


@pytest.mark.skipif(not NO_ESP, reason="this kernel has ESP: a kernel ESP gateway is accepted")
def test_a_gateway_needing_what_the_host_lacks_is_refused_in_one_line() -> None:
    """A kernel ESP gateway on a kernel without ESP: one line naming every missing option."""
    line = refused(_pair("ipsec", "kernel"))
    assert "gateways gwa and gwb: ipsec (kernel) needs what this host lacks: kernel " \
        "CONFIG_INET_ESP" in line and len(line.splitlines()) == 1, line


def test_gateways_of_different_implementations_are_refused() -> None:
    raw = _pair("ipsec", "libipsec")
    raw["gwb"] = {"kind": "gateway", "tunnel": "ipsec", "impl": "xfrm"}
    assert "terminate different tunnels (ipsec libipsec, ipsec xfrm)" in refused(raw)


@pytest.mark.parametrize("chain,needle", [
    ({"path": ["gateway", "wan"]}, "1 gateway(s): gateways come in pairs"),
    ({"path": ["gateway", "gateway", "wan"]}, "the WAN must lie between the gateways"),
])
def test_gateways_come_in_pairs_around_the_wan(chain: dict, needle: str) -> None:
    assert needle in refused(chain)


def test_hops_between_gateways_do_not_count_as_routers() -> None:
    chain = chain_spec.parse({"path": ["router", "gateway", "wan", "gateway", "router"]})
    assert chain is not None and chain.gateways() == [2, 4]
    assert chain.routed_hops == 4   # the WAN forwards the tunnel's outer packets


@pytest.mark.skipif(not NO_NETEM, reason="this kernel has netem: a WAN delay is accepted")
@pytest.mark.parametrize("key,val", [("delay", "25ms"), ("loss", "0.1%")])
def test_a_wan_delay_without_netem_is_refused(key: str, val: str) -> None:
    line = refused({"path": ["wan"], "wan": {"kind": "wan", "rate": "200mbit", key: val}})
    assert f"WAN {key} needs netem, which this kernel lacks (CONFIG_NET_SCH_NETEM)" in line


@pytest.mark.parametrize("chain,needle", [
    ({"path": ["fw"], "fw": {"kind": "firewall", "rules": -1}}, "chain.fw.rules -1 is not valid"),
    ({"path": ["fw"], "fw": {"kind": "firewall", "shape": "tree"}}, "linear or set"),
    ({"path": ["fw"], "fw": {"kind": "firewall", "rulez": 1}}, "unknown parameter 'rulez'"),
    ({"path": ["w"], "w": {"kind": "wan", "rate": "fast"}}, "chain.w.rate 'fast' is not valid"),
    ({"path": ["w1", "w2"], "w1": {"kind": "wan"}, "w2": {"kind": "wan"}}, "2 WANs"),
    ({"path": ["router"], "fw": {"kind": "firewall"}}, "chain.fw is defined but not in the path"),
    ({"path": "router"}, "chain.path must be a list"),
    ({"path": ["A"], "A": {"kind": "router"}}, "function name 'A' must be"),
    ({"path": ["n"], "n": {"kind": "nat", "mode": "full-cone"}}, "masquerade or snat"),
])
def test_bad_chain_values_one_line(chain: dict, needle: str) -> None:
    assert needle in refused(chain)


HOSTS = {"a": "root@h1", "b": "root@h2"}


def test_placement_between_hosts() -> None:
    """Up to and including the WAN on site a's host, after it on site b's; the segment right
    of the WAN crosses the hosts; the carrier's overhead comes off the MTU."""
    exp = exp_spec.build({"chain": {"path": ["router", "fw", "wan", "nat", "router"],
                                    "fw": {"kind": "firewall"}, "wan": {"kind": "wan"}},
                          "sites": HOSTS}, "e.toml")
    assert exp.chain is not None
    assert chain_hosts.sides(exp.chain) == ["a", "a", "a", "b", "b"]
    assert chain_hosts.wan_position(exp.chain) == 3     # segment 3: wan -- nat4
    wan_only = chain_spec.parse({"path": ["wan"]})
    assert wan_only is not None and chain_hosts.sides(wan_only) == ["a"]
    last = chain_spec.parse({"path": ["router", "wan"]})
    assert last is not None and chain_hosts.sides(last) == ["a", "a"]
    assert chain_hosts.chain_mtu(1500, 1500) == 1450
    assert chain_hosts.chain_mtu(1400, 1500) == 1400
    assert chain_hosts.chain_mtu(9000, 9000) == 8950
    assert chain_hosts.vni("0a1b2") == chain_hosts.vni("0a1b2")
    assert 1 <= chain_hosts.vni("0a1b2") < 2 ** 24
    gw = chain_spec.parse({"path": ["gwa", "wan", "gwb"],
                           "gwa": {"kind": "gateway", "tunnel": "wireguard", "impl": "go"},
                           "gwb": {"kind": "gateway", "tunnel": "wireguard", "impl": "go"}})
    assert gw is not None and chain_hosts.sides(gw) == ["a", "a", "b"]
    assert "wireguard-go" in chain_hosts.tools(gw)     # the gateways' daemon, on the hosts
    assert chain_hosts.kernel(exp.chain) == {"CONFIG_VXLAN": ["the chain's WAN carrier"]}
    # what the functions need of a kernel is asked of the hosts, not of this one: a WAN
    # delay is not refused here for this kernel's lack of netem
    delayed = exp_spec.build({"chain": {"path": ["wan"], "wan": {"kind": "wan", "delay": "5ms"}},
                              "sites": HOSTS}, "e.toml").chain
    assert delayed is not None
    assert chain_hosts.kernel(delayed)["CONFIG_NET_SCH_NETEM"] == ["function wan"]
    assert chain_hosts.tools(exp.chain) == {"ip": ["chain"], "nft": ["function fw", "function nat4"],
                                           "tc": ["function wan"]}


@pytest.mark.parametrize(("extra", "needle"), [
    ({"chain": {"path": ["router"]}}, "needs a wan function in chain.path"),
    ({"chain": {"path": ["wan"]}, "tunnel": [{"kind": "wireguard"}]},
     "tunnel(s) wireguard at the sites are not supported through a chain between hosts"),
    ({"chain": {"path": ["wan"]}, "experiment": {"rate": "100mbit"}},
     "give the wan a rate instead"),
])
def test_what_a_chain_between_hosts_lacks_is_refused_in_one_line(extra: dict, needle: str
                                                                  ) -> None:
    with pytest.raises(SpecError) as exc:
        exp_spec.build({"sites": HOSTS, **extra}, "e.toml")
    line = exc.value.one_line()
    assert needle in line and "\n" not in exc.value.message, line


def test_a_chain_between_hosts_needs_both_sites_on_hosts() -> None:
    with pytest.raises(SpecError) as exc:
        exp_spec.build({"chain": {"path": ["wan"]}, "sites": {"a": "local", "b": "root@h2"}},
                       "e.toml")
    assert "site(s) a are 'local'" in exc.value.one_line()


def test_the_study_chain_is_read_with_defaults() -> None:
    exp = exp_spec.build({"chain": {"path": ["router", "fw", "wan", "router"],
                                    "fw": {"kind": "firewall", "rules": 1000},
                                    "wan": {"kind": "wan", "rate": "200mbit"}}}, "e.toml")
    assert exp.chain is not None
    assert exp.chain.arrow() == "a -> router1 -> fw -> wan -> router4 -> b"
    assert exp.chain.routed_hops == 4
    d = exp.to_dict()["chain"]
    assert d["functions"]["fw"] == {"kind": "firewall", "rules": 1000, "shape": "linear",
                                    "stateful": True, "limit": ""}
    assert d["functions"]["wan"]["burst"] == "256kb"
    # no [chain]: the plain testbed, and the experiment's record has no chain key
    assert "chain" not in exp_spec.build({}, "e.toml").to_dict()


def test_placement_names_and_addresses() -> None:
    chain = chain_spec.parse({"path": ["router", "wan", "router"], "wan": {"kind": "wan"}})
    assert chain is not None
    placed = build.place("0a1b2", chain)
    assert [h.netns for h in placed] == ["tb-0a1b2-router1", "tb-0a1b2-wan",
                                         "tb-0a1b2-router3"]
    assert [(h.left_if, h.right_if) for h in placed] == [
        ("tb0a1b2s0r", "tb0a1b2s1l"), ("tb0a1b2s1r", "tb0a1b2s2l"), ("tb0a1b2s2r", "tb0a1b2s3l")]
    assert [(h.left4, h.right4) for h in placed] == [
        ("198.18.0.2", "198.18.1.1"), ("198.18.1.2", "198.18.2.1"), ("198.18.2.2", "198.18.3.1")]
    assert placed[1].left6 == "2001:2:1:1::2"


def test_firewall_rulesets() -> None:
    lin = firewall.ruleset({"rules": 1000, "shape": "linear", "stateful": True, "limit": ""})
    assert lin.count("counter name denied drop") == 1000
    assert "ip saddr 10.0.3.232 counter name denied drop" in lin   # the 1000th address
    assert "ct state established,related" in lin
    st = firewall.ruleset({"rules": 1000, "shape": "set", "stateful": False,
                           "limit": "100mbit"})
    assert st.count("drop") == 2 and "ct state" not in st
    assert "limit rate over 12500000 bytes/second counter name policed drop" in st
    assert st.index("limit rate") < st.index("@deny4")
    assert firewall.limit_bytes_per_s("10mbps") == 10_000_000


def test_nat_and_wan_commands() -> None:
    assert 'oifname "tbx1" counter name translated masquerade' in nat.ruleset(
        {"mode": "masquerade"}, "tbx1", "198.18.2.1")
    assert "snat to 198.18.2.1" in nat.ruleset({"mode": "snat"}, "tbx1", "198.18.2.1")
    params = {"rate": "200mbit", "burst": "256kb", "queue": "25ms", "delay": "", "jitter": "",
              "loss": ""}
    assert wan.qdisc_argvs(params, "tbx") == [["tc", "qdisc", "replace", "dev", "tbx", "root",
                                               "tbf", "rate", "200mbit", "burst", "256kb",
                                               "latency", "25ms"]]
    assert wan.qdisc_argvs({**params, "rate": ""}, "tbx") == []


def test_counters_parsed_from_captured_output() -> None:
    links = hops.parse_link_stats((DATA / "wan-ip-s-link.json").read_text())
    raw = json.loads((DATA / "wan-ip-s-link.json").read_text())
    for link in raw:
        assert links[link["ifname"]]["tx_packets"] == link["stats64"]["tx"]["packets"]
    qd = hops.parse_qdisc_drops((DATA / "wan-tc-s-qdisc.json").read_text())
    want = {q["dev"]: q["drops"] for q in json.loads((DATA / "wan-tc-s-qdisc.json").read_text())}
    assert qd == want and sum(qd.values()) > 0   # the WAN's tbf dropped in that capture


def test_drop_table_points_at_the_hop_that_dropped() -> None:
    zero = dict.fromkeys(hops.LINK_KEYS, 0)

    def place(rx: int, tx: int, qdisc: int = 0, **fn: int) -> dict:
        return {"ifaces": {"l": {**zero, "rx_packets": rx, "qdisc_drops": 0},
                           "r": {**zero, "tx_packets": tx, "qdisc_drops": qdisc}},
                "function": fn}

    d = {"a": place(0, 1000), "fw": place(1000, 700, policed_packets=300),
         "wan": place(700, 650, qdisc=50), "b": place(650, 0)}
    rows = hops.drop_table(d, {"fw": "firewall", "wan": "wan"})
    assert [(r["place"], r["lost"], r["dropped"]) for r in rows] == [
        ("a", None, 0), ("fw", 300, 300), ("wan", 50, 50), ("b", None, 0)]
    assert hops.bottleneck(rows) == "fw"
    assert hops.bottleneck(hops.drop_table({"a": place(0, 5), "r": place(5, 3)}, {})) is None


def test_ttl_and_rtt_from_a_captured_ping() -> None:
    text = (DATA / "ping-through-chain.txt").read_text()
    ttl = int(hops.TTL_RE.findall(text)[0])
    assert hops.ttl_hops(ttl) == 4   # the captured chain had four routed hops


def test_the_site_sides_of_gateways_get_the_tunnel_mtu() -> None:
    """The inner path's MTU follows from the gateways' tunnel overhead: the WAN keeps the
    experiment's MTU, the segments towards the sites get WAN MTU minus the overhead (vxlan
    50; libipsec never above the 1400 bytes its TUN reads)."""
    chain = chain_spec.parse({"path": ["router", "gwa", "wan", "gwb", "router"],
                              "gwa": {"kind": "gateway"}, "gwb": {"kind": "gateway"}})
    assert chain is not None
    assert build.segment_mtus(chain, 5, 1500) == [1450, 1450, 1500, 1500, 1450, 1450]
    if _host_has("ipsec"):
        ipsec = chain_spec.parse(_pair("ipsec", "libipsec"))
        assert ipsec is not None
        assert build.segment_mtus(ipsec, 3, 9000) == [1400, 9000, 9000, 1400]
    if _host_has("wireguard"):
        wg = chain_spec.parse(_pair("wireguard"))
        assert wg is not None and build.segment_mtus(wg, 3, 1500) == [1440, 1500, 1500, 1440]


def test_what_lies_behind_each_gateway() -> None:
    """The prefixes a gateway tunnel must carry: the segments on each gateway's site side."""
    from tunbench.chain.gateway import behind
    got = behind(2, 4, 5)   # a router gwa wan gwb router b: gateways at positions 2 and 4
    assert got["a"] == ("198.18.0.0/24", "2001:2:1:0::/64", "198.18.1.0/24",
                        "2001:2:1:1::/64")
    assert got["b"] == ("198.18.4.0/24", "2001:2:1:4::/64", "198.18.5.0/24",
                        "2001:2:1:5::/64")


def test_a_pair_of_gateways_that_cannot_be_is_refused_in_one_line() -> None:
    line = refused(_pair("ssh-tun"))
    assert "chain.gwa: tunnel 'ssh-tun' is a tunnel kind that cannot be a gateway" in line
