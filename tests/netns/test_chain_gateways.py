"""Encryption gateways in a chain, on real namespaces: the issue's chain router ->
firewall(1000 rules) -> IPsec gateway -> WAN(tbf) -> IPsec gateway -> router carries
loss-search and stream traffic with the NDR at the WAN's knee in tbf's accounting (of the ESP
packets it shapes), TTL decremented by the routed hops, the drop counters at the WAN, and at
the gateway when the WAN is not the narrowest hop; WireGuard gateways carry a WireGuard tunnel
of the sites (tunnel in tunnel, no name clash); keys and PSKs are 0600 and gone at teardown.

The WAN runs at 30 Mbit/s, not the issue's 200: strongSwan's libipsec (userspace ESP, the only
IPsec this kernel has) carried ~9.5k packets/s of 1300 bytes (~100 Mbit/s) through this chain
on the shared 2-core host, so at 200 Mbit/s the gateway, not the WAN, would be the bottleneck
(that is the counter case below). And the generator itself, whose packets cross the 1000
linear firewall rules in its own softirq, sent only ~4.6k packets/s with one thread while the
host was busy: at 30 Mbit/s (knee ~3.2k packets/s, overload trials at 1.3x that, two sender
threads) the WAN is the narrowest hop with room to spare."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_chain import FLOOR, chain_testbed, ours

import physics
from skb_bounds import min_packets
from tunbench import pcap, tunnels
from tunbench import spec as exp_spec
from tunbench.chain import hops
from tunbench.plan import plan
from tunbench.report import hops as hops_report
from tunbench.runner import run_case
from tunbench.testbed.base import Site, Testbed
from tunbench.workloads import loadgen
from tunbench.workloads.search import mlr_search

pytestmark = [pytest.mark.skipif(loadgen.find_binary() is None,
                                reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})"), pytest.mark.correctness]


def _runs_here(kind: str) -> str | None:
    drv = tunnels.get(kind)
    missing = drv.requirements(drv.default_params())
    return "; ".join(m.one_line() for m in missing) or None


needs_ipsec = pytest.mark.skipif(_runs_here("ipsec") is not None,
                                 reason=f"no IPsec here: {_runs_here('ipsec')}")
needs_wg = pytest.mark.skipif(_runs_here("wireguard") is not None,
                              reason=f"no WireGuard here: {_runs_here('wireguard')}")

WAN_RATE_BPS, WAN_BURST, WAN_QUEUE = 30_000_000, 256 * 1024, 0.025
IPSEC_CHAIN: dict[str, Any] = {
    "path": ["router", "fw", "gwa", "wan", "gwb", "router"],
    "fw": {"kind": "firewall", "rules": 1000},
    "gwa": {"kind": "gateway", "tunnel": "ipsec"},
    "gwb": {"kind": "gateway", "tunnel": "ipsec"},
    "wan": {"kind": "wan", "rate": "30mbit", "burst": "256kb", "queue": "25ms"}}
ROUTED = 5            # router1, fw, gwa, gwb, router6 (the WAN forwards ESP packets only)
SIZE = 1300           # inner IP packets: within libipsec's 1400-byte inner MTU


def esp_len(inner: int) -> int:
    """The IP length of the ESP packet carrying an inner one (IPv4, NAT-T, AES-GCM): outer IP
    20 + UDP 8 + ESP 8 + IV 8 + payload and 2-byte trailer padded to 4 + ICV 16."""
    return 20 + 8 + 8 + 8 + -(-(inner + 2) // 4) * 4 + 16


def tbf_knee_pps(ip_len: int, trial_s: float) -> float:
    """Highest lossless rate of a trial through the WAN's tbf (test_chain.py's formula): the
    token rate plus the bucket and the queue a trial fills and drains; tbf counts IP + 14."""
    rate_bytes = WAN_RATE_BPS / 8
    limit = rate_bytes * WAN_QUEUE + WAN_BURST
    return (rate_bytes * trial_s + WAN_BURST + limit) / (ip_len + 14) / trial_s


@pytest.fixture
def ipsec_chain() -> Iterator[Testbed]:
    yield from chain_testbed(IPSEC_CHAIN)


def by_name(tb: Testbed) -> dict[str, Any]:
    return {h.name: h for h in hops.hops_of(tb)}


@needs_ipsec
def test_ipsec_gateways_encrypt_across_the_wan(ipsec_chain: Testbed) -> None:
    """Only ESP-in-UDP between the gateways on the WAN; the TTL counts the routed hops; the
    inner path's MTU is libipsec's; the PSKs are 0600 in the gateways' private directory."""
    tb = ipsec_chain
    by = by_name(tb)
    gwa, gwb, wan = by["gwa"], by["gwb"], by["wan"]
    on_wan = Site("wan", wan.netns, wan.left_if, wan.left4, "")
    with pcap.capture(tb, on_wan, wan.left_if, "wan") as cap:
        r = tb.a.run(["ping", "-n", "-c", "3", "-i", "0.2", tb.b.underlay4], check=False)
    assert r.ok and f"ttl={64 - ROUTED}" in r.stdout, r.stdout
    ends = {(gwa.right4, gwb.left4), (gwb.left4, gwa.right4)}
    outer = [x for x in cap.packets if x.version == 4]
    assert outer and all(x.udp_to(4500) and (x.src, x.dst) in ends for x in outer), outer
    assert not [x for x in cap.packets if tb.a.underlay4 in (x.src, x.dst)], outer
    gw = tb.notes["chain"]["gateway_tunnel"]
    assert gw["label"] == "ipsec (libipsec)" and gw["encrypts"] and gw["inner_mtu"] == 1400
    assert tb.underlay_mtu == 1400 and tb.notes["chain"]["segment_mtus"] == \
        [1400, 1400, 1400, 1500, 1500, 1400, 1400]
    assert hops.probe(tb)["routers"] == tb.notes["chain"]["routed_hops"] == ROUTED
    secrets = sorted((Path(tb.workdir) / "gateways").glob("psk*"))
    assert len(secrets) == 2, secrets
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in secrets)


@needs_ipsec
@pytest.mark.physics("ipsec_wan_knee_vs_formula", "ipsec_chain_ndr_vs_knee")
def test_ndr_at_the_wan_knee_and_drops_at_the_wan(ipsec_chain: Testbed) -> None:
    """The loss search through router -> fw(1000) -> ipsec gw -> WAN -> ipsec gw -> router
    finds the knee the shaped WAN delivers right now (one overloaded trial, in the same
    sitting: a loaded 2-core host defers tbf's dequeue), the knee against tbf's accounting of
    the ESP packets and the NDR against the knee within their recorded spreads (physics, no
    retry); then an overload's every lost packet is a WAN tbf drop."""
    tb = ipsec_chain
    trial = 1.0
    formula = tbf_knee_pps(esp_len(SIZE), trial)
    spec = loadgen.TrafficSpec(size=str(SIZE), flows=100, port=5321)

    def measure(rate: float, dur: float) -> loadgen.TrialResult:
        return loadgen.run_trial(tb, tb.b.underlay4, spec, dur, rate, threads=2)

    def capacity() -> float:
        t = measure(formula * 1.3, trial)
        return t.received / t.duration_s

    knee = capacity()
    found = mlr_search(measure, formula * 1.5, goals={"ndr": 0.0}, relative_width=0.005,
                       duration=trial, min_pps=500)["ndr"].rate_pps
    print(f"ESP knee: formula {formula:.0f} pps, link {knee:.0f}, NDR {found}")
    assert found is not None
    physics.check("ipsec_wan_knee_vs_formula", knee, formula,
                  what="tbf's accounting of the ESP packets of a 1 s overloaded trial")
    physics.check("ipsec_chain_ndr_vs_knee", found, knee,
                  what="the knee the WAN delivered just before")
    watch = hops.HopWatch(tb)
    watch.start()
    t = measure(formula * 1.3, trial)
    watch.stop()
    rec = watch.describe()
    # a busy generator may not offer the overload it was asked (seen: 4.6k of 4.1k asked
    # through the 1000 firewall rules): near the knee tbf drops few packets while the bucket's
    # bursts still overrun libipsec after the WAN, and the WAN need not be the place that
    # lost most. The hops are located only in a real overload, 20 % above the knee or more
    knee_packets = tbf_knee_pps(esp_len(SIZE), t.duration_s) * t.duration_s
    if t.offered < 1.2 * knee_packets:
        pytest.skip(f"the overload trial asked {formula * 1.3:.0f} packets/s, the busy host "
                    f"sent {t.offered_pps:.0f} in {t.duration_s:.2f} s: less than 1.2x the "
                    f"WAN's knee ({knee_packets:.0f} packets), no clear overload to locate "
                    "(the knee and NDR checks passed)")
    assert t.lost > 0
    assert rec["bottleneck"] == "wan", rec["drops"]
    row = {r["place"]: r for r in rec["drops"]}
    lossy = {p: (r["lost"], r["dropped"]) for p, r in row.items() if r["lost"] or r["dropped"]}
    # every lost packet is found at some hop, most of them tbf drops at the WAN; a burst the
    # WAN's bucket releases can still overrun libipsec on a busy host (seen: 301 of 1184 at
    # gwb), which the table then shows at the gateway. The hops also count the END packets
    # the path dropped, which are not data: the first of the generator's 3 rounds (100 flows)
    # follows the data into tbf's full queue (seen: 20, 11 and 2 of 300 dropped, tbf's drops
    # then exceeding the trial's loss by exactly that; no fragment, IKE or other packet crossed
    # the WAN: docs/chains.md, "Per-hop figures"). What is left is a packet a hop sends or
    # takes itself (neighbour discovery), seen 0 times in 24 trials
    assert sum(hops.loss_of(r) for r in row.values()) == pytest.approx(
        t.lost + t.end_lost, abs=2), (lossy, t, t.end_lost)
    assert row["wan"]["qdisc_drops"] > 0, (lossy, t)
    assert all(r["dropped"] == 0 for p, r in row.items() if p != "wan"), lossy


@needs_ipsec
def test_the_gateway_is_the_bottleneck_when_the_wan_is_wide() -> None:
    """With the WAN at 1 Gbit/s, libipsec (~9.5k packets/s here) is the narrowest hop: an
    overload is lost inside a gateway (in minus out; a TUN queue no drop counter sees), none
    at the WAN, and the take-away names the gateway. Asked for 30k packets/s, the generator
    (its packets cross 1000 firewall rules in its own softirq) sent ~5.5k here while other
    tests ran, and libipsec then lost only a few hundred at gwb (seen: 142-226 of ~11k): on a
    busier host it may lose none, so the accounting is checked always and the bottleneck when
    there was one to find."""
    raw = {**IPSEC_CHAIN, "wan": {"kind": "wan", "rate": "1gbit"}}
    overran = False
    for tb in chain_testbed(raw):
        watch = hops.HopWatch(tb)
        watch.start()
        t = loadgen.run_trial(tb, tb.b.underlay4,
                              loadgen.TrafficSpec(size=str(SIZE), flows=100, port=5322),
                              2.0, 30_000, threads=2)
        watch.stop()
        rec = watch.describe()
        row = {r["place"]: r for r in rec["drops"]}
        assert row["wan"]["dropped"] == 0 and row["wan"]["lost"] <= 2, rec["drops"]
        # every packet the path lost was lost inside a gateway: the trial's loss less what
        # site b's socket dropped (no hop sees it), plus the END packets lost after the data;
        # within 2 for a packet a hop sends or takes itself (neighbour discovery)
        on_path = t.lost - t.socket_drops + t.end_lost
        gw_lost = hops.loss_of(row["gwa"]) + hops.loss_of(row["gwb"])
        assert gw_lost == pytest.approx(on_path, abs=2), (rec["drops"], t)
        overran = gw_lost > FLOOR
        if overran:
            assert rec["bottleneck"] in ("gwa", "gwb"), rec["drops"]
        psks = sorted((Path(tb.workdir) / "gateways").glob("psk*"))
    assert psks and not [p for p in psks if p.exists()], psks   # removed at teardown
    if not overran:
        pytest.skip(f"libipsec kept up with the {t.offered_pps:.0f} packets/s the busy host "
                    f"sent (lost {t.lost}): no overload for the drop table to locate")


WG_CHAIN: dict[str, Any] = {
    "path": ["router", "gwa", "wan", "gwb", "router"],
    "gwa": {"kind": "gateway", "tunnel": "wireguard"},
    "gwb": {"kind": "gateway", "tunnel": "wireguard"},
    "wan": {"kind": "wan", "rate": "200mbit"}}


@needs_wg
@pytest.mark.beside   # its own run's objects only, no figure judged
def test_wireguard_gateways_encrypt_across_the_wan() -> None:
    for tb in chain_testbed(WG_CHAIN):
        by = by_name(tb)
        gwa, gwb, wan = by["gwa"], by["gwb"], by["wan"]
        on_wan = Site("wan", wan.netns, wan.left_if, wan.left4, "")
        with pcap.capture(tb, on_wan, wan.left_if, "wan") as cap:
            r = tb.a.run(["ping", "-n", "-c", "3", "-i", "0.2", tb.b.underlay4], check=False)
        assert r.ok and "ttl=60" in r.stdout, r.stdout     # router1, gwa, gwb, router5
        ends = {(gwa.right4, gwb.left4), (gwb.left4, gwa.right4)}
        outer = [x for x in cap.packets if x.version == 4]
        assert outer and all(x.udp_to(51820) and (x.src, x.dst) in ends for x in outer), outer
        gw = tb.notes["chain"]["gateway_tunnel"]
        assert gw["inner_mtu"] == 1440 and tb.underlay_mtu == 1440
        keys = sorted((Path(tb.workdir) / "gateways").glob("*.key"))
        assert len(keys) == 2 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in keys)
        # a ping of the far gateway's WAN address returns through the tunnel: allowed
        assert hops.probe(tb)["rtt_us"]["gwb"] is not None
    assert keys and not [k for k in keys if k.exists()], keys   # removed at teardown


@needs_wg
@pytest.mark.beside   # its own run's objects only, no figure judged
def test_a_wireguard_tunnel_of_the_sites_through_wireguard_gateways() -> None:
    """Tunnel in tunnel: the sites' wireguard-go and the gateways' never clash (the gateways'
    interface names carry their own tag), and the site tunnel's MTU is the inner path's
    (1440) minus its own overhead."""
    exp = exp_spec.build({"experiment": {"repeats": 1, "duration": 2, "warmup": 0},
                          "tunnel": [{"kind": "wireguard"}], "workload": [{"name": "stream"}],
                          "chain": WG_CHAIN}, "test")
    (doc,) = [run_case(exp, case) for case in plan(exp)]
    assert doc["status"] == "ok", doc["error"]
    assert doc["tunnel"]["mtu"] == 1440 - 60 and doc["testbed"]["underlay_mtu"] == 1440
    site_wg = doc["tunnel"]["info"]["devices"]["a"][0]
    gw_wg = doc["testbed"]["chain"]["gateway_tunnel"]["endpoints"]["info"]["devices"]["a"][0]
    assert site_wg != gw_wg and gw_wg.endswith("wgg0a"), (site_wg, gw_wg)
    assert doc["metrics"]["throughput"]["value"] > 0
    wan = [r for r in doc["chain"]["drops"] if r["place"] == "wan"][0]
    # the stream crossed the WAN: at least its bytes in skbs of at most 64 KiB (GSO/GRO)
    assert wan["rx_packets"] >= min_packets(doc["raw"]["iperf3"]["bytes_received"])
    assert ours(doc["case"]["run_id"]) == [], doc["case"]["run_id"]


@needs_ipsec
@pytest.mark.beside   # its own run's objects only, no figure judged
def test_the_sdwan_preset_at_the_smallest_scale_runs_end_to_end(tmp_path) -> None:
    """`tunbench run --preset sdwan --scale 0.001 --sizes imix`: loss search (RFC 2544, 2 s
    trials, 5 % resolution) and a stream, direct and through router -> fw -> IPsec gw -> WAN
    -> IPsec gw -> fw -> router, in one run (two chains of nine namespaces and two charons).
    IMIX only: the preset's second size, 361 B, is the same search code with one size the
    chain does not fragment (a campaign's loss search through IPsec gateways at one size:
    test_ndr_at_the_wan_knee_and_drops_at_the_wan's 1300 B; mlrsearch in a chain campaign and
    its bottleneck: test_chain.py::test_a_campaign_through_the_chain_carries_stream_and_loss_
    search); the stream and the loss search of a campaign through the IPsec gateways are
    this test's (the former test_a_campaign_through_ipsec_gateways_carries_stream_and_loss_
    search, 20 s, ran the same things at 1300 B). Its IMIX search found no passing rate in
    2 of 3 CI runs without the 1 s fragment timeout; reproduced by hand: fwb's conntrack kept
    the incomplete datagrams of overloaded trials (libipsec's ESP socket at gwb drops single
    fragments) for 30 s until its 4 MB of reassembly memory was full, and then refused every
    fragment. The chain's namespaces now expire them after 1 s with room for 64 MiB
    (chain/build.py CHAIN_SYSCTLS; docs/chains.md, "Fragments in a chain")."""
    import json
    import os
    import subprocess
    import sys

    from tunbench.report import data

    out = tmp_path / "out"
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(tmp_path / "state")}
    r = subprocess.run([sys.executable, "-m", "tunbench", "run", "--preset", "sdwan",
                        "--scale", "0.001", "--sizes", "imix", "--out", str(out), "--quiet",
                        "--no-report"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    assert [(d["case"]["topology"], d["case"]["workload"]["name"], d["status"])
            for d in docs] == [("direct", "loss-search", "ok"), ("direct", "stream", "ok"),
                               ("chain", "loss-search", "ok"), ("chain", "stream", "ok")], \
        [d.get("error") for d in docs]
    for d in docs:
        assert ("chain" in d) == (d["case"]["topology"] == "chain")
        assert ours(d["case"]["run_id"]) == []
    chain = [d for d in docs if d["case"]["topology"] == "chain"]
    assert all(d["chain"]["probe"]["routers"] == 6 for d in chain)   # 2 routers, 2 fw, 2 gw
    assert all(d["testbed"]["chain"]["gateway_tunnel"]["label"] == "ipsec (libipsec)"
               for d in chain)
    stream = next(d for d in chain if d["case"]["workload"]["name"] == "stream")
    # TCP goodput through the gateways and the WAN
    assert {r["place"]: r for r in stream["chain"]["drops"]}["wan"]["tx_packets"] > 0
    cmp = {(r["workload"], r["metric"]): r for r in hops_report.chain_vs_direct(
        data.load(out).cases)}
    tput = cmp[("stream", "throughput")]
    assert tput["chain"] and tput["direct"]
    assert tput["pct"] == pytest.approx(100 * tput["chain"] / tput["direct"], rel=1e-9)
    assert cmp[("loss-search", "rfc2544_pps_imix")]["n_chain"] == 1
    search = next(d for d in chain if d["case"]["workload"]["name"] == "loss-search")
    assert search["metrics"]["rfc2544_pps_imix"]["value"] > 0
    assert "rfc2544_pps_361" not in search["metrics"]     # --sizes replaced the preset's
