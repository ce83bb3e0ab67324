"""The agg kind without root: parameters, overhead and MTU arithmetic, and the parser of
tbagg's counter dumps on real dumps (tests/data/agg: site a after IPv4 and IPv6 pings; both
sites after a 1 s TCP stream a -> b with offload)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import tunnels
from tunbench.errors import SpecError
from tunbench.tunnels import agg

DATA = Path(__file__).resolve().parents[1] / "data" / "agg"


def test_defaults_and_their_meaning() -> None:
    p = tunnels.get("agg").default_params()
    assert (p.flush_us, p.port, p.vni, p.queues, p.underlay) == (50, 6636, 1, 1, 4)
    assert p.offload is True


@pytest.mark.parametrize(("raw", "needle"), [
    ({"flush_us": -1}, "flush_us -1 out of range (0..1000000)"),
    ({"flush_us": 2_000_000}, "flush_us 2000000 out of range"),
    ({"queues": 0}, "queues 0 out of range (1..16)"),
    ({"vni": 0}, "vni 0 out of range"),
    ({"port": 70000}, "port 70000 out of range"),
    ({"flush_us": "soon"}, "parameter 'flush_us' must be int"),
    ({"flush": 5}, "unknown parameter 'flush'"),
    ({"offload": "maybe"}, "parameter 'offload' must be bool"),
    ({"offload": 1}, "parameter 'offload' must be bool"),
])
def test_bad_params_are_one_line_errors(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as e:
        tunnels.get("agg").parse_params(raw)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_zero_flush_timeout_is_valid_and_means_no_aggregation() -> None:
    assert tunnels.get("agg").parse_params({"flush_us": 0}).flush_us == 0


def test_overhead_mtu_and_size_budget() -> None:
    drv = tunnels.get("agg")
    p4 = drv.parse_params({})
    p6 = drv.parse_params({"underlay": 6})
    assert drv.overhead(p4, 4) == 20 + 8 + 8 + 2
    assert drv.overhead(p6, 6) == 40 + 8 + 8 + 2
    assert drv.tunnel_mtu(p4, 1500) == 1462 and drv.tunnel_mtu(p6, 1500) == 1442
    # a lone full-size inner packet always fits the size budget
    for fam, p in ((4, p4), (6, p6)):
        budget = agg.max_payload(1500, fam)
        assert agg.AGG_HEADER + agg.SEPARATOR + drv.tunnel_mtu(p, 1500) == budget


def test_parse_stats_on_a_real_dump() -> None:
    d = agg.parse_stats((DATA / "stats-ping-a.json").read_text())
    c = d.counters
    assert d.dumps == 1
    assert c["tx_packets"] == c["tx_datagrams"] == c["rx_packets"] == 7   # idle: one each
    assert c["rx_malformed"] == 0 and c["tx_flush_time"] == 7 and c["tx_flush_size"] == 0
    # every packet's wait was recorded; lone packets wait out the 50 us timeout (and more)
    w = d.wait_us
    assert w["count"] == 7 and 50 <= w["p50"] <= w["p99"] <= w["max"]
    # wire bytes = inner bytes + 8 B header per datagram + 2 B length per packet
    assert c["tx_wire_bytes"] == c["tx_bytes"] + 8 * c["tx_datagrams"] + 2 * c["tx_packets"]
    assert c["rx_wire_bytes"] == c["rx_bytes"] + 8 * c["rx_datagrams"] + 2 * c["rx_packets"]


def test_parse_stats_on_real_dumps_of_a_stream_with_offload() -> None:
    a = agg.parse_stats((DATA / "stats-stream-offload-a.json").read_text())
    b = agg.parse_stats((DATA / "stats-stream-offload-b.json").read_text())
    for d in (a, b):   # what the kernel granted
        assert d.config["offload"] is True and d.config["offload_asked"] is True
        assert d.config["udp_gso"] is True and d.config["udp_gro"] is True
        assert d.config["offload_refused"] == ""
    ca, cb = a.counters, b.counters
    # a read TCP super-packets and cut them into MTU-sized segments, each counted as a packet
    assert ca["tx_gso_packets"] > 0 and ca["tx_gso_errors"] == 0
    assert ca["tx_gso_segments"] > 10 * ca["tx_gso_packets"]
    assert ca["tx_packets"] >= ca["tx_gso_segments"]
    # several datagrams per UDP GSO send on a, as many per UDP GRO read on b
    assert ca["tx_datagrams"] > 10 * ca["tx_udp_gso_sends"]
    assert cb["rx_udp_gro_reads"] == ca["tx_udp_gso_sends"]
    # b wrote most segments as coalesced super-packets
    assert cb["rx_coalesced_segments"] > 10 * cb["rx_coalesced"]
    assert cb["rx_coalesced_segments"] > 0.9 * cb["rx_packets"]
    # the wire arithmetic holds per segment, batched or not
    for c, side in ((ca, "tx"), (cb, "rx")):
        assert c[f"{side}_wire_bytes"] == (c[f"{side}_bytes"] + 8 * c[f"{side}_datagrams"]
                                           + 2 * c[f"{side}_packets"])


def test_parse_stats_of_a_dump_without_config() -> None:
    d = agg.parse_stats('{"tool": "tbagg", "dumps": 2, "counters": {"tx_packets": 1}}')
    assert d.config == {} and d.counters == {"tx_packets": 1}


@pytest.mark.parametrize("text", ['{"tool": "tunbench-loadgen", "dumps": 1, "counters": {}}',
                                  "[1, 2]"])
def test_parse_stats_refuses_what_is_not_a_tbagg_dump(text: str) -> None:
    with pytest.raises(ValueError):
        agg.parse_stats(text)


def test_missing_binary_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TUNBENCH_TBAGG", str(tmp_path / "nope"))
    m = agg.binary_missing()
    assert m is not None and "make loadgen" in m.one_line()
    drv = tunnels.get("agg")
    assert any(x.what == "tool tbagg" for x in drv.requirements(drv.default_params()))


def test_agg_tradeoff_preset_plans_the_sweep_and_scales() -> None:
    """The preset behind the report's trade-off figure: native, vxlan and agg at four flush
    timeouts, each with the 100 B loss search and the latency workload; --scale 0.1 keeps
    every variant and only shortens and coarsens."""
    from tunbench import presets, spec
    from tunbench.plan import plan
    assert "agg-tradeoff" in presets.names() and "flush" in presets.describe("agg-tradeoff")
    raw = presets.load("agg-tradeoff")
    exp = spec.build(raw, "preset agg-tradeoff", available={"native", "vxlan", "agg"})
    assert exp.rate == "20mbit"
    aggs = [t for t in exp.tunnels if t.kind == "agg"]
    assert [t.params.flush_us for t in aggs] == [0, 50, 200, 1000]
    assert len({t.label for t in exp.tunnels}) == 6
    one_round = [c for c in plan(exp) if c.repeat == 1]
    assert len(one_round) == 12
    ls = next(c for c in one_round if c.workload.name == "loss-search")
    assert ls.workload.params.sizes == ("100",) and ls.workload.params.latency_at_pct == (80.0,)
    quick = spec.build(presets.scale(raw, 0.1), "preset agg-tradeoff",
                       available={"native", "vxlan", "agg"})
    assert quick.repeats == 1 and quick.duration == presets.MIN_DURATION
    assert len(plan(quick)) == 12
    assert next(w for w in presets.scale(raw, 0.1)["workload"]
                if w["name"] == "loss-search")["resolution_pct"] == 5.0


def test_wire_cost_per_inner_packet_is_pure_arithmetic() -> None:
    """wirecost.cost: underlay packets/bytes and busy CPU around a trial, per inner packet
    (the loss search records them at its latency-under-load trials)."""
    from tunbench.workloads import wirecost
    a = wirecost.Snapshot(tx_packets=1000, tx_bytes=100_000, busy_jiffies=500)
    b = wirecost.Snapshot(tx_packets=1000 + 1500, tx_bytes=100_000 + 1_600_000,
                          busy_jiffies=560)
    got = wirecost.cost(a, b, 10_000, 1_000_000)
    assert got is not None
    assert got["wire_pkts_per_inner"] == pytest.approx(0.15)
    assert got["wire_bytes_per_inner_byte"] == pytest.approx(1.6)
    assert got["busy_core_s"] == pytest.approx(0.6)
    assert got["cpu_per_mpps"] == pytest.approx(60.0)   # 0.6 core-s per 0.01 Mpkt
    assert wirecost.cost(None, b, 10_000, 1_000_000) is None
    assert wirecost.cost(a, b, 0, 1_000_000) is None
    no_cpu = wirecost.cost(a, wirecost.Snapshot(2500, 1_700_000, None), 10_000, 1_000_000)
    assert no_cpu is not None and no_cpu["cpu_per_mpps"] is None
    assert got["datapath_cpu_per_mpps"] is None   # a kernel datapath: no daemon to read
    da = wirecost.Snapshot(0, 0, 0, datapath_ticks=1000)
    db = wirecost.Snapshot(2500, 1_700_000, 60, datapath_ticks=1025)
    dp = wirecost.cost(da, db, 10_000, 1_000_000)
    assert dp is not None and dp["datapath_cpu_per_mpps"] == pytest.approx(25.0)


def test_cost_metrics_name_the_load_and_size() -> None:
    from tunbench.workloads import loss_search
    spent = {"wire_pkts_per_inner": 0.2, "wire_bytes_per_inner_byte": 1.1,
             "cpu_per_mpps": 80.0, "datapath_cpu_per_mpps": None}
    m = loss_search.cost_metrics("100", 80.0, spent)
    assert sorted(m) == ["cpu_per_mpps_at_80pct_ndr_100",
                         "wire_bytes_per_inner_byte_at_80pct_ndr_100",
                         "wire_pkts_per_inner_at_80pct_ndr_100"]
    rec = m["wire_pkts_per_inner_at_80pct_ndr_100"]
    assert (rec.value, rec.base, rec.dims, rec.higher_is_better) == \
        (0.2, "wire_pkts_per_inner", {"load_pct": 80.0, "size": "100"}, False)
    with_daemon = loss_search.cost_metrics("100", 80.0, {**spent, "datapath_cpu_per_mpps": 7.5})
    assert with_daemon["datapath_cpu_per_mpps_at_80pct_ndr_100"].value == 7.5
