"""Chains of network functions on real namespaces: the path is routed hop by hop (TTL), a
router -> firewall(1000 rules) -> WAN(tbf 200 Mbit/s) -> router chain carries stream and
loss-search traffic with the NDR at the WAN's tbf knee, the per-hop drop counters point at
the hop that is the bottleneck (the WAN, or a policing firewall), NAT translates, and nothing
is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

import physics
from skb_bounds import min_packets
from tunbench import pcap
from tunbench import spec as exp_spec
from tunbench.chain import build as chain_build
from tunbench.chain import hops
from tunbench.chain import spec as chain_spec
from tunbench.plan import plan
from tunbench.runner import run_case
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Site, Testbed
from tunbench.testbed.ledger import Ledger
from tunbench.workloads import loadgen
from tunbench.workloads.search import mlr_search

pytestmark = [pytest.mark.skipif(shutil.which("nft") is None,
                                reason="nft is not installed (apt-get install nftables)"), pytest.mark.correctness]
needs_loadgen = pytest.mark.skipif(loadgen.find_binary() is None,
                                   reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})")

WAN_RATE_BPS, WAN_BURST, WAN_QUEUE = 200_000_000, 256 * 1024, 0.025
STUDY_CHAIN: dict[str, Any] = {
    "path": ["router", "fw", "wan", "router"],
    "fw": {"kind": "firewall", "rules": 1000},
    "wan": {"kind": "wan", "rate": "200mbit", "burst": "256kb", "queue": "25ms"}}


def ours(rid: str) -> list[str]:
    return [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]


def chain_testbed(raw: dict[str, Any], mtu: int = 1500) -> Iterator[Testbed]:
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        yield chain_build.build(rid, ledger, chain_spec.parse(raw),   # type: ignore[arg-type]
                                mtu=mtu)
    finally:
        errors = ledger.close()
        left = ours(rid)
        local.sweep(rid)
        assert not errors, errors
        assert not left, f"namespaces left behind: {left}"


# Loss-search traffic in 8000-byte packets over a 9000-byte MTU: 200 Mbit/s is then ~3.2k
# packets/s, which one generator thread sends through four forwarding namespaces and 1000
# linear firewall rules on the shared 2-core host; at 1400 bytes (18k pps) it is
# sender-limited near 8k pps (the rules run in the sender's softirq: docs/chains.md).
SIZE, MTU = 8000, 9000


@pytest.fixture
def study() -> Iterator[Testbed]:
    yield from chain_testbed(STUDY_CHAIN, mtu=MTU)


def tbf_knee_pps(ip_len: int, trial_s: float) -> float:
    """Highest lossless rate of a trial through the WAN's tbf (tests/netns/test_loss_search.py
    has the derivation): the token rate plus what the bucket and the queue (rate x latency +
    burst) take in and deliver after the sender stops; tbf counts IP + 14 bytes on veth."""
    rate_bytes = WAN_RATE_BPS / 8
    limit = rate_bytes * WAN_QUEUE + WAN_BURST
    return (rate_bytes * trial_s + WAN_BURST + limit) / (ip_len + 14) / trial_s


FLOOR = 10   # hops.bottleneck names no place that lost 10 packets or fewer


def excess(trial: dict[str, Any], ip_len: int = SIZE) -> float:
    """Packets a trial sent beyond what the WAN's tbf can take in its measured duration (0:
    the sender, on a busy host, did not even offer the knee, so tbf had nothing to drop)."""
    d = trial["duration_s"]
    return max(trial["offered"] - tbf_knee_pps(ip_len, d) * d, 0.0)


def test_ttl_decrements_by_the_routed_hops(study: Testbed) -> None:
    probe = hops.probe(study)
    assert study.notes["chain"]["routed_hops"] == 4
    assert probe["ttl"] == 64 - 4 and probe["routers"] == 4
    # every hop answered, each RTT measured, one figure of added latency per hop
    assert set(probe["rtt_us"]) == {"router1", "fw", "wan", "router4", "b"}
    assert all(v is not None and v > 0 for v in probe["rtt_us"].values())
    assert set(probe["added_us"]) == {"router1", "fw", "wan", "router4"}
    # IPv6 is routed through the same hops (hop limit 64 - 4)
    r = study.a.run(["ping", "-6", "-n", "-c", "2", "-W", "2", study.b.underlay6], check=False)
    assert r.ok and "ttl=60" in r.stdout, r.stdout


def test_firewall_rules_are_loaded(study: Testbed) -> None:
    fw = [h for h in hops.hops_of(study) if h.kind == "firewall"][0]
    out = subprocess.run(["ip", "netns", "exec", fw.netns, "nft", "list", "chain", "inet",
                          "tb_fw", "forward"], capture_output=True, text=True, check=True).stdout
    assert out.count(" drop") == 1000 and "ct state established,related" in out
    # a stateful firewall reassembles fragments (conntrack; IPv6 in queues of its own): they
    # expire after 1 s, not 30/60, with room for 64 MiB of them, not 4 MiB, so one overloaded
    # trial's incomplete datagrams cannot make it refuse the next trials' fragments
    # (docs/chains.md, "Fragments in a chain")
    for key, want in (("net.ipv4.ipfrag_time", 1), ("net.ipv6.ip6frag_time", 1),
                      ("net.netfilter.nf_conntrack_frag6_timeout", 1),
                      ("net.ipv4.ipfrag_high_thresh", 64 << 20),
                      ("net.ipv6.ip6frag_high_thresh", 64 << 20),
                      ("net.netfilter.nf_conntrack_frag6_high_thresh", 64 << 20)):
        got = subprocess.run(["ip", "netns", "exec", fw.netns, "sysctl", "-n", key],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert got == str(want), (key, got)


@needs_loadgen
def test_ndr_found_through_the_chain_and_drops_at_the_wan(study: Testbed) -> None:
    size, trial = SIZE, 1.0
    expected = tbf_knee_pps(size, trial)
    spec = loadgen.TrafficSpec(size=str(size), flows=100, port=5311)

    def measure(rate: float, dur: float) -> loadgen.TrialResult:
        return loadgen.run_trial(study, study.b.underlay4, spec, dur, rate)

    # the search through the chain finds a rate (how close to tbf's knee is the physics of
    # test_loss_search.py::test_searches_converge_to_tbf_rate, on a plain shaped link)
    found = mlr_search(measure, expected * 1.5, goals={"ndr": 0.0}, relative_width=0.005,
                       duration=trial, min_pps=1000)["ndr"].rate_pps
    print(f"NDR through the chain {found} pps, tbf formula {expected:.0f}")
    assert found is not None and found > 0
    # above the WAN rate, the counters point at the WAN hop
    watch = hops.HopWatch(study)
    watch.start()
    t = measure(expected * 1.3, 1.0)
    watch.stop()
    rec = watch.describe()
    if excess(t.to_dict(), size) <= FLOOR:
        pytest.skip(f"the overload trial asked {expected * 1.3:.0f} packets/s, the busy host "
                    f"sent {t.offered_pps:.0f} in {t.duration_s:.2f} s: not above the WAN's "
                    f"knee ({tbf_knee_pps(size, t.duration_s):.0f}), no overload to locate "
                    "(the NDR search passed)")
    assert t.lost > 0
    assert rec["bottleneck"] == "wan", rec["drops"]
    wan = [r for r in rec["drops"] if r["place"] == "wan"][0]
    # every lost packet was dropped by the WAN's tbf, and the WAN lost exactly what it dropped
    # tbf's own count is the generator's loss, less what site b's socket dropped (no hop
    # sees those), plus the END packets tbf dropped after the data (not in the loss); in
    # minus out within 2 (ARP/ND end at the hop)
    assert wan["qdisc_drops"] == pytest.approx(t.lost - t.socket_drops + t.end_lost, abs=2), \
        (rec["drops"], t)
    assert wan["lost"] == pytest.approx(wan["qdisc_drops"], abs=2), (rec["drops"], t)
    assert all(r["dropped"] == 0 for r in rec["drops"] if r["place"] != "wan"), rec["drops"]


@needs_loadgen
@pytest.mark.physics("nft_limit_loss_vs_model")
def test_drops_at_a_policing_firewall_when_it_is_the_bottleneck() -> None:
    raw = {**STUDY_CHAIN, "fw": {"kind": "firewall", "rules": 1000, "limit": "50mbit"}}
    for tb in chain_testbed(raw, mtu=MTU):
        watch = hops.HopWatch(tb)
        watch.start()
        # 100 Mbit/s offered: under the WAN's 200, over the firewall's 50
        t = loadgen.run_trial(tb, tb.b.underlay4, loadgen.TrafficSpec(size=str(SIZE),
                                                                      port=5312),
                              3.0, 100e6 / 8 / (SIZE + 14))
        watch.stop()
        rec = watch.describe()
        assert rec["bottleneck"] == "fw", rec["drops"]
        fw = [r for r in rec["drops"] if r["place"] == "fw"][0]
        # the policer's own count is the loss the generator saw; in minus out may also count
        # an ARP/neighbour packet that ends at the hop (seen: +1)
        assert fw["policy_drops"] == pytest.approx(t.lost, abs=2), rec["drops"]
        assert fw["lost"] == pytest.approx(fw["policy_drops"], abs=2), rec["drops"]
        # nft's limit lets one second of the rate through as a burst: of 3 s at twice the
        # limit, (3 - 1 - 1) / 6 = 1/3 is over it
        physics.check("nft_limit_loss_vs_model", t.loss_ratio, 1 / 3,
                      what="3 s at twice nft's limit with its 1 s burst: 1/3 over it")
        wan = [r for r in rec["drops"] if r["place"] == "wan"][0]
        # the WAN's tbf dropped nothing; in minus out may still count an ARP or neighbour
        # packet that ends at the hop itself (seen: 1)
        assert wan["dropped"] == 0 and wan["lost"] <= 2, rec["drops"]


def test_nat_masquerades_towards_site_b() -> None:
    raw = {"path": ["router", "nat", "router"]}
    for tb in chain_testbed(raw):
        nat = [h for h in hops.hops_of(tb) if h.kind == "nat"][0]
        with pcap.capture(tb, tb.b, tb.b.underlay_if, "nat") as cap:
            r = tb.a.run(["ping", "-n", "-c", "3", "-i", "0.2", tb.b.underlay4], check=False)
        assert r.ok, r.stdout
        # site b sees the NAT hop's WAN-side address, not site a's
        requests = [x for x in cap.packets if x.proto == 1 and x.dst == tb.b.underlay4]
        assert requests and all(x.src == nat.right4 for x in requests), cap.packets
        assert not [x for x in cap.packets if tb.a.underlay4 in (x.src, x.dst)], cap.packets
        counters = hops.snapshot(tb)[nat.name]["function"]
        assert counters["translated_packets"] >= 1, counters


def campaign_case(tmp_workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    exp = exp_spec.build({"experiment": {"repeats": 1, "duration": 2, "warmup": 0,
                                         "mtus": [MTU]},
                          "tunnel": [{"kind": "native"}], "workload": tmp_workloads,
                          "chain": STUDY_CHAIN}, "test")
    return [run_case(exp, case) for case in plan(exp)]


@needs_loadgen
def test_a_campaign_through_the_chain_carries_stream_and_loss_search() -> None:
    docs = campaign_case([
        {"name": "stream"},
        {"name": "loss-search", "method": "mlrsearch", "sizes": [str(SIZE)],
         "trial_duration": 1, "latency_at_pct": [], "max_rate_pps": 6000,
         "resolution_pct": 5}])     # coarse: that it finds a rate is the question here
    for doc in docs:
        assert doc["status"] == "ok", doc["error"]
        chain = doc["chain"]
        assert chain["probe"]["routers"] == 4 and chain["path"] == \
            "a -> router1 -> fw -> wan -> router4 -> b"
        assert doc["testbed"]["kind"] == "local-chain"
    stream, search = docs
    assert stream["metrics"]["throughput"]["value"] > 0
    wan = {r["place"]: r for r in stream["chain"]["drops"]}["wan"]
    assert wan["rx_packets"] > 0 and wan["tx_packets"] > 0   # the stream crossed the WAN
    # the search found a rate and the WAN is where its overloaded trials lost packets; how
    # close that rate comes to the tbf knee is the physics of test_searches_converge_to_tbf_rate
    ndr = search["metrics"][f"ndr_pps_{SIZE}"]["value"]
    assert ndr > 0
    for doc in docs:   # other engineers' runs come and go on this host: only ours count
        assert ours(doc["case"]["run_id"]) == [], doc["case"]["run_id"]
    trials = search["raw"]["sizes"][str(SIZE)]["trials"]
    over = sum(excess(t) for t in trials)
    if over <= FLOOR:
        pytest.skip(f"no trial of the search sent more than the WAN's knee takes (the busy "
                    f"host's sender peaked at {max(t['offered_pps'] for t in trials):.0f} "
                    "packets/s): no overload for the drop table to locate")
    assert search["chain"]["bottleneck"] == "wan", (search["chain"]["drops"], over)


BAD = {
    "unknown-kind": ('path = ["router", "ids"]\n', "unknown function kind 'ids'"),
    "gateway": ('path = ["gw"]\n[chain.gw]\nkind = "gateway"\ntunnel = "ssh-tun"\n',
                "cannot be a gateway"),
    "wan-delay": ('path = ["wan"]\n[chain.wan]\nkind = "wan"\ndelay = "40ms"\n',
                  "needs netem, which this kernel lacks"),
}
BAD["loop"] = ('path = ["router", "fw", "wan", "fw"]\n[chain.fw]\nkind = "firewall"\n'
               '[chain.wan]\nkind = "wan"\n', "chain.path is a loop")


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_topologies_refused_in_one_line_before_anything_is_created(tmp_path, name) -> None:
    body, needle = BAD[name]
    if name == "wan-delay":
        from tunbench.capabilities import kernel_missing
        if kernel_missing("CONFIG_NET_SCH_NETEM", "netem", "sch_netem") is None:
            pytest.skip("this kernel has netem: a WAN delay is accepted here")
    exp = tmp_path / "e.toml"
    exp.write_text('[experiment]\nrepeats = 1\n[[tunnel]]\nkind = "native"\n[chain]\n' + body)
    before = set(netlink.list_netns())
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(tmp_path / "state")}
    r = subprocess.run([sys.executable, "-m", "tunbench", "run", "--experiment", str(exp),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    # other engineers' runs come and go on this host: none of ours (the hop names) appeared
    new = set(netlink.list_netns()) - before
    assert not [n for n in new if n.rsplit("-", 1)[-1] in ("fw", "wan", "gw", "router1")], new
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists()


def test_sigint_mid_case_leaves_no_function_namespace(tmp_path) -> None:
    """A campaign interrupted while its chain is up removes every namespace of the chain."""
    exp = tmp_path / "e.toml"
    exp.write_text('[experiment]\nrepeats = 1\nduration = 20\nwarmup = 0\n'
                   '[[tunnel]]\nkind = "native"\n[[workload]]\nname = "stream"\n'
                   '[chain]\npath = ["router", "fwsig", "router"]\n'
                   '[chain.fwsig]\nkind = "firewall"\nrules = 10\n')
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(tmp_path / "state")}
    p = subprocess.Popen([sys.executable, "-m", "tunbench", "run", "--experiment", str(exp),
                          "--out", str(tmp_path / "out"), "--quiet"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        mine: list[str] = []
        while not mine and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
            mine = [n for n in netlink.list_netns() if n.endswith("-fwsig")]
        assert mine, "the chain never came up"
        rid = mine[0].split("-")[1]
        time.sleep(3)   # inside the workload
        p.send_signal(2)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert ours(rid) == [], ours(rid)


GATEWAY_CHAIN: dict[str, Any] = {
    "path": ["router", "gwa", "wan", "gwb", "router"],
    "gwa": {"kind": "gateway", "tunnel": "vxlan"}, "gwb": {"kind": "gateway", "tunnel": "vxlan"},
    "wan": {"kind": "wan", "rate": "200mbit"}}


def test_vxlan_gateways_encapsulate_across_the_wan() -> None:
    """Site a's packets enter VXLAN at gwa and leave it at gwb: the WAN carries only UDP 4789
    between the gateways, and the WAN hop does not decrement the inner TTL."""
    for tb in chain_testbed(GATEWAY_CHAIN):
        by = {h.name: h for h in hops.hops_of(tb)}
        wan, gwa, gwb = by["wan"], by["gwa"], by["gwb"]
        on_wan = Site("wan", wan.netns, wan.left_if, wan.left4, "")
        with pcap.capture(tb, on_wan, wan.left_if, "wan") as cap:
            r = tb.a.run(["ping", "-n", "-c", "3", "-i", "0.2", tb.b.underlay4], check=False)
        assert r.ok and "ttl=60" in r.stdout, r.stdout     # router1, gwa, gwb, router5
        outer = [x for x in cap.packets if x.version == 4 and x.proto in (1, 17)]
        ends = {(gwa.right4, gwb.left4), (gwb.left4, gwa.right4)}
        # only VXLAN between the gateways; site a's address never in the clear
        assert outer and all(x.udp_to(4789) and (x.src, x.dst) in ends for x in outer), outer
        assert not [x for x in cap.packets if tb.a.underlay4 in (x.src, x.dst)], outer
        assert tb.notes["chain"]["gateway_tunnel"]["kind"] == "vxlan"
        assert hops.probe(tb)["routers"] == tb.notes["chain"]["routed_hops"] == 4


def test_a_stream_through_vxlan_gateways() -> None:
    exp = exp_spec.build({"experiment": {"repeats": 1, "duration": 2, "warmup": 0},
                          "tunnel": [{"kind": "native"}], "workload": [{"name": "stream"}],
                          "chain": GATEWAY_CHAIN}, "test")
    (doc,) = [run_case(exp, case) for case in plan(exp)]
    assert doc["status"] == "ok", doc["error"]
    assert doc["metrics"]["throughput"]["value"] > 0
    gw = doc["testbed"]["chain"]["gateway_tunnel"]
    assert gw["kind"] == "vxlan" and gw["endpoints"]["mtu"] == 1450
    wan = [r for r in doc["chain"]["drops"] if r["place"] == "wan"][0]
    # the stream crossed the WAN (inside VXLAN): its bytes in skbs of at most 64 KiB at least
    assert wan["rx_packets"] >= min_packets(doc["raw"]["iperf3"]["bytes_received"])
