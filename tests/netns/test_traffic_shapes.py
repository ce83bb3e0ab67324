"""Traffic like the SD-WAN study's on a real testbed: a custom IMIX's size proportions over
100k packets sent (and those sizes, and no others, counted at the receiver), an RFC 6985
genome's letter counts, and the simple IMIX over IPv6 (its small packets raised to 60 B)."""

from __future__ import annotations

import time

import pytest

from tunbench import pcap, tunnels
from tunbench.report.metrics import display_name
from tunbench.runner import metric_record
from tunbench.testbed import local
from tunbench.testbed.base import Testbed
from tunbench.workloads import loadgen, traffic
from tunbench.workloads.base import Context
from tunbench.workloads.latency import Latency
from tunbench.workloads.loss_search import LossSearch

pytestmark = [pytest.mark.skipif(
    loadgen.find_binary() is None,
    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})"), pytest.mark.correctness]


def counted(tb: Testbed, dst: str, spec: loadgen.TrafficSpec, want: int,
            rate: float = 50000) -> tuple[dict[str, int], dict[str, int]]:
    """Packets sent and received per size over trials at `rate` until `want` were sent (the
    shared host may not keep the rate: a short trial is topped up with another)."""
    sent: dict[str, int] = {}
    recv: dict[str, int] = {}
    for _ in range(10):
        t = loadgen.run_trial(tb, dst, spec, 2.0, rate)
        assert t.received + t.lost == t.offered and t.received > 0, t
        for d, extra in ((sent, t.per_size_sent), (recv, t.per_size_received)):
            for k, v in extra.items():
                d[k] = d.get(k, 0) + v
        if sum(sent.values()) >= want:
            break
    assert sum(sent.values()) >= want, f"only {sum(sent.values())} packets sent"
    return sent, recv


def test_custom_mix_proportions_over_100k_packets(testbed: Testbed) -> None:
    # the study's customised IMIX (48/576/1438 B IP), with weights that are not the simple 7:4:1
    spec = loadgen.TrafficSpec(size="mix", mix="48:5,576:3,1438:2", flows=100, port=5321)
    assert spec.profile().mean_size == pytest.approx((48 * 5 + 576 * 3 + 1438 * 2) / 10)
    sent, recv = counted(testbed, local.UNDERLAY4[1], spec, 100_000)
    want = {"48": 0.5, "576": 0.3, "1438": 0.2}
    n = sum(sent.values())
    for size, frac in want.items():   # what the generator sent: the mix's proportions
        assert abs(sent[size] / n - frac) < 0.005, (size, sent)
    # what crossed the underlay: the mix's sizes and no other, none counted twice (an
    # overload's loss is not size-neutral: the received proportions depend on the load)
    assert set(recv) == set(want), recv
    assert all(0 < recv[size] <= sent[size] for size in want), (sent, recv)


def test_genome_letter_counts(testbed: Testbed) -> None:
    # RFC 6985: a=64, b=128, g=1518; the string is the repeating sequence (8 a, 4 b, 1 g)
    spec = loadgen.TrafficSpec(size="genome", genome="aaaaaaaabbbbg", flows=10, port=5322)
    sent, recv = counted(testbed, local.UNDERLAY4[1], spec, 20_000, rate=20000)
    assert set(recv) == {"64", "128", "1518"}, recv
    for size, frac in (("64", 8 / 13), ("128", 4 / 13), ("1518", 1 / 13)):
        # the sequence is not shuffled: counts hold to within one cycle
        assert abs(sent[size] - frac * sum(sent.values())) <= 8, sent
        assert 0 < recv[size] <= sent[size], (sent, recv)   # received: not the loss's mix


def dad_done(tb: Testbed) -> None:
    """The underlay's IPv6 addresses leave DAD (tentative addresses drop what they receive)."""
    for _ in range(50):
        if not any(s.run(["ip", "-6", "addr", "show", "tentative"]).stdout.strip()
                   for s in tb.sites()):
            return
        time.sleep(0.1)
    raise AssertionError("IPv6 addresses still tentative after 5 s")


def test_imix_over_ipv6(testbed: Testbed) -> None:
    dad_done(testbed)
    spec = loadgen.TrafficSpec(size="imix", flows=20, port=5323, family=6)
    assert spec.mix_args() == ["--mix", "60:7,576:4,1500:1"]
    t = loadgen.run_trial(testbed, local.UNDERLAY6[1], spec, 1.0, 12000)
    sent, recv = t.per_size_sent, t.per_size_received
    n = sum(sent.values())
    assert t.received > 0 and t.received + t.lost == t.offered == n, t
    # the mix as sent (a shuffled 12-packet cycle: within one cycle of its weights)
    for size, weight in (("60", 7), ("576", 4), ("1500", 1)):
        assert abs(sent[size] - weight * n / 12) <= weight, sent
    # what arrived: those sizes over IPv6 and no other (the loss, and so the mix that arrives,
    # depends on the host's load)
    assert set(recv) == {"60", "576", "1500"}, recv
    assert all(recv[size] <= sent[size] for size in recv), (sent, recv)


@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_study_flows_are_100_distinct_4_tuples_on_the_wire(testbed: Testbed, kind: str) -> None:
    """flows = "5x5x100x100": 5 source x 5 destination addresses (the extra ones added on the
    tunnel's inner devices) and 100 x 100 ports stepped together = 100 flows; a capture on site
    b's inner device sees exactly 100 distinct 4-tuples, each carrying its share, and the
    added addresses are gone after teardown."""
    drv = tunnels.get(kind)
    ep = drv().up(testbed, drv.parse_params({}))
    fs = traffic.parse_flows("5x5x100x100")
    assert fs.count == 100
    srcs, dsts = loadgen.add_flow_addresses(testbed, (ep.a4, str(ep.a_ifname)),
                                            (ep.b4, str(ep.b_ifname)), fs)
    assert len(set(srcs)) == 5 and len(set(dsts)) == 5 and srcs[0] == ep.a4
    spec = loadgen.TrafficSpec(size="200", flows=fs.count, port=5330, srcs=srcs, dsts=dsts,
                               src_ports=fs.src_ports, ports_count=fs.dst_ports,
                               src_port=fs.src_port_base(5330))
    with pcap.capture(testbed, testbed.b, str(ep.b_ifname), f"flows-{kind}") as cap:
        t = loadgen.run_trial(testbed, ep.b4, spec, 1.0, 5000)
    # counts, not the rate: every one of the 100 flows needs a packet, 5,000 were asked for
    assert t.offered >= 100 and t.received > 0 and t.received + t.lost == t.offered, t
    data = [p for p in cap.packets if p.proto == 17 and p.dport is not None
            and 5330 <= p.dport < 5430 and p.length == 200]
    tuples: dict[tuple[str, int, str, int], int] = {}
    for p in data:
        key = (p.src, int(p.sport or 0), p.dst, int(p.dport))
        tuples[key] = tuples.get(key, 0) + 1
    assert len(tuples) == 100, sorted(tuples)[:10]
    assert {k[0] for k in tuples} == set(srcs) and {k[2] for k in tuples} == set(dsts)
    assert {k[1] for k in tuples} == set(range(10000, 10100))   # the study's source ports
    assert {k[3] for k in tuples} == set(range(5330, 5430))
    # the study's stepping: source and destination address advance with the flow number
    by_dport = {k[3]: k for k in tuples}
    assert [by_dport[5330 + i][2] for i in range(5)] == list(dsts)
    assert [by_dport[5330 + i][0] for i in range(5)] == list(srcs)
    assert all(by_dport[5330 + i][1] == 10000 + i for i in range(100))
    # every flow carried packets (the 100 keys above); the capture saw no more than was sent
    # (how many of each it saw depends on the load: loss, and tcpdump's own drops)
    assert sum(tuples.values()) == len(data) <= t.offered
    # each added address is undone by the ledger: undone now, the sites are as before
    added = {a for a in (*srcs[1:], *dsts[1:])}
    assert added <= _addrs(testbed)
    undo = [e for e in testbed.ledger.entries
            if e["kind"] == "command" and e["argv"][:3] == ["ip", "addr", "del"]]
    assert {e["argv"][3].split("/")[0] for e in undo} == added
    for e in undo:
        testbed.ledger.undo_entry(e)
        testbed.ledger.entries.remove(e)
    assert not added & _addrs(testbed)


def _addrs(tb: Testbed) -> set[str]:
    out: set[str] = set()
    for s in tb.sites():
        for line in s.run(["ip", "-o", "addr"]).stdout.splitlines():
            out.add(line.split()[3].split("/")[0])
    return out


def test_loss_search_with_study_flows_and_a_custom_mix(testbed: Testbed) -> None:
    drv = tunnels.get("vxlan")
    ep = drv().up(testbed, drv.parse_params({}))
    p = LossSearch.parse_params({"sizes": ["361"], "mix": "48:7,576:4,1400:1",
                                 "flows": "5x5x100x100", "method": "rfc2544",
                                 "trial_duration": 1.0, "resolution_pct": 5.0,
                                 "latency_at_pct": [50], "max_rate_pps": 20000,
                                 "min_rate_pps": 1000})
    out = LossSearch().run(Context(testbed, ep, duration=1.0, warmup=0), p)
    assert out.raw["flows"]["flows"] == 100 and len(out.raw["flows"]["dst_addresses"]) == 5
    assert out.raw["receiver"]["mode"] == "capture"
    for key in ("361", "mix"):
        trials = out.raw["sizes"][key]["trials"]
        assert trials, out.raw["sizes"][key]
        first = trials[0]
        assert 0 < first["received"] <= first["offered"], first
        assert first["received"] + first["lost"] == first["offered"], first
        assert out.metrics[f"rfc2544_pps_{key}"].value > 0
    assert out.raw["sizes"]["mix"]["profile"]["weights"] == [[48, 7], [576, 4], [1400, 1]]
    # delay as the study reports it: mean and std of the one-way latency, as records with dims
    for key in ("361", "mix"):
        mean = out.metrics[f"lat_mean_us_at_50pct_ndr_{key}"]
        std = out.metrics[f"lat_std_us_at_50pct_ndr_{key}"]
        assert mean.base == std.base == "latency"
        assert std.dims == {"stat": "std", "goal": "ndr", "load_pct": 50, "size": key}
        lat = out.raw["sizes"][key]["latency_under_load"]["50"]["latency_us"]
        assert mean.value == lat["mean"] > 0 and std.value == lat["std"] > 0
        assert lat["min"] <= mean.value <= lat["max"]
        assert out.metrics[f"lat_std_us_at_rfc2544_{key}"].value is not None


def test_latency_reports_mean_and_std(testbed: Testbed) -> None:
    drv = tunnels.get("native")
    ep = drv().up(testbed, drv.parse_params({}))
    p = Latency.parse_params({"protocol": "udp"})
    out = Latency().run(Context(testbed, ep, duration=1.0, warmup=0.5), p)
    st = out.raw["udp"]["stats"]
    std = out.metrics["udp_rtt_std"]
    # (a standard deviation needs two samples; how many a busy host gives is not asserted)
    assert std.dims == {"stat": "std"} and std.value == st["std"] > 0 and st["samples"] > 1
    assert out.metrics["udp_rtt_mean"].value == st["mean"]
    # a standard deviation never exceeds the range of the samples
    assert std.value <= (st["max"] - st["min"])
    assert display_name("udp_rtt_std", metric_record("udp_rtt_std", std)) == "UDP RTT std dev"


def test_4_tuple_flows_over_ipv6(testbed: Testbed) -> None:
    """The same over IPv6: extra addresses at the top of the inner /64 (no DAD wait), the
    receiver on ::, 2 x 2 addresses and 4 x 4 ports = 4 distinct 4-tuples."""
    dad_done(testbed)
    drv = tunnels.get("vxlan")
    ep = drv().up(testbed, drv.parse_params({}))
    assert ep.a6 and ep.b6
    fs = traffic.parse_flows("2x2x4x4")
    srcs, dsts = loadgen.add_flow_addresses(testbed, (ep.a6, str(ep.a_ifname)),
                                            (ep.b6, str(ep.b_ifname)), fs)
    assert all(":" in a for a in (*srcs, *dsts)) and len({*srcs, *dsts}) == 4
    spec = loadgen.TrafficSpec(size="200", flows=fs.count, port=5340, family=6, srcs=srcs,
                               dsts=dsts, src_ports=fs.src_ports, ports_count=fs.dst_ports,
                               src_port=fs.src_port_base(5340))
    with pcap.capture(testbed, testbed.b, str(ep.b_ifname), "flows-v6") as cap:
        t = loadgen.run_trial(testbed, ep.b6, spec, 1.0, 2000)
    # counts (4 flows), not the rate or the loss
    assert t.offered >= 4 and t.received > 0 and t.received + t.lost == t.offered, t
    tuples = {(p.src, p.sport, p.dst, p.dport) for p in cap.packets
              if p.version == 6 and p.proto == 17 and p.dport in range(5340, 5344)}
    assert tuples == {(srcs[i % 2], 10000 + i, dsts[i % 2], 5340 + i) for i in range(4)}
