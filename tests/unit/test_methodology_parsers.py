"""Parsers of the methodology workloads on captured real output (tests/data/sockperf, ping)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunbench.errors import CommandFailed
from tunbench.workloads import _multi_iperf as mi
from tunbench.workloads import latency, ping, stream


@pytest.mark.parametrize("proto", ["tcp", "udp"])
@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_full_log_matches_sockperf_summary(data_dir: Path, proto: str, kind: str) -> None:
    printed = latency.parse_sockperf((data_dir / f"sockperf/pp-{proto}-{kind}.txt").read_text())
    assert printed["full_rtt"] is True
    tx, rtt = latency.read_full_log(data_dir / f"sockperf/full-{proto}-{kind}.csv")
    # the full log holds exactly sockperf's observations (its valid window)
    assert len(rtt) == printed["observations"] == printed["received"]
    st = latency.rtt_stats(tx, rtt, skip=0.0, duration=1e9)
    # min/max/mean over every sample are sockperf's own (it prints 3 decimals and its log
    # rounds the last one differently)
    assert st["min"] == pytest.approx(printed["min"], abs=2e-3)
    assert st["max"] == pytest.approx(printed["max"], abs=2e-3)
    assert st["mean"] == pytest.approx(printed["mean"], abs=2e-3)
    # sockperf's percentile rank convention differs from nearest rank by a few samples:
    # its printed value sits within 1% of n ranks of ours
    v = np.sort(rtt)
    n = len(v)
    for ours, key, q in (("p50", "p50.000", 50), ("p90", "p90.000", 90),
                         ("p99", "p99.000", 99), ("p99_9", "p99.900", 99.9)):
        rank = int(np.searchsorted(v, printed[key] - 2e-3))
        assert abs(rank - (np.ceil(q / 100 * n) - 1)) <= 0.01 * n + 2, (key, rank)
        assert st[ours] == latency.nearest_rank(v, q)
    assert st["min"] <= st["p50"] <= st["p90"] <= st["p99"] <= st["p99_9"] <= st["max"]
    cdf = st["cdf"]
    assert len(cdf["pct"]) == len(cdf["rtt_us"]) <= 1100
    assert cdf["rtt_us"][0] == st["min"] and cdf["rtt_us"][-1] <= st["max"]
    assert all(a <= b for a, b in zip(cdf["rtt_us"][:1001], cdf["rtt_us"][1:1001]))


def test_full_log_chunk_boundaries(data_dir: Path) -> None:
    path = data_dir / "sockperf/full-udp-vxlan.csv"
    tx, rtt = latency.read_full_log(path)
    tx2, rtt2 = latency.read_full_log(path, chunk_bytes=997)   # cuts lines everywhere
    assert np.array_equal(tx, tx2) and np.array_equal(rtt, rtt2)
    assert np.all(np.diff(tx) > 0)


def test_warmup_window_drops_early_samples(data_dir: Path) -> None:
    tx, rtt = latency.read_full_log(data_dir / "sockperf/full-tcp-native.csv")
    full = latency.rtt_stats(tx, rtt, 0.0, 1e9)
    cut = latency.rtt_stats(tx, rtt, 0.2, 0.3)
    assert cut["samples"] < full["samples"]
    assert cut["dropped_outside_window"] == full["samples"] - cut["samples"]
    kept_first = tx[tx >= tx[0] + 0.2][0]
    assert kept_first - tx[0] >= 0.2 and cut["seconds"] <= 0.3


def test_nearest_rank_known_values() -> None:
    v = np.arange(1.0, 101.0)
    assert latency.nearest_rank(v, 50) == 50.0
    assert latency.nearest_rank(v, 99) == 99.0
    assert latency.nearest_rank(v, 99.9) == 100.0
    assert latency.nearest_rank(np.array([7.0]), 50) == 7.0


def test_sockperf_without_results_is_an_error(data_dir: Path) -> None:
    with pytest.raises(CommandFailed, match="no results"):
        latency.parse_sockperf((data_dir / "sockperf/sr-tcp-native.txt").read_text())


def test_latency_argv_full_rtt() -> None:
    p = latency.LatencyParams(protocol="udp", msg_size=100)
    argv = latency.client_argv("udp", "198.19.0.2", 11111, 3, p, Path("/x.csv"))
    assert "--full-rtt" in argv and "--tcp" not in argv and argv[argv.index("-m") + 1] == "100"
    assert "--tcp" in latency.server_argv("tcp", "a", 1)


@pytest.mark.parametrize("name, ttl, hops", [("ping-native.txt", 64, 0),
                                             ("ping-vxlan.txt", 64, 0),
                                             ("ping-1hop-native.txt", 63, 1),
                                             ("ping-1hop-vxlan.txt", 63, 1)])
def test_ping_ttl_and_hops(data_dir: Path, name: str, ttl: int, hops: int) -> None:
    parsed = ping.parse_ping((data_dir / "ping" / name).read_text())
    assert parsed["transmitted"] == parsed["received"] == len(parsed["replies"]) == 5
    f = ping.figures(parsed["replies"], skip=0, initial_ttl=64)
    assert f["ttl"] == ttl and f["hops"] == hops
    # recomputed over every reply, they are ping's own summary (3 decimals)
    for key in ("min", "avg", "max", "mdev"):
        assert f[key] == pytest.approx(parsed[key], abs=1.5e-3)
    g = ping.figures(parsed["replies"], skip=1, initial_ttl=64)
    assert g["n"] == 4 and g["min"] <= g["avg"] <= g["max"]


def test_ping6_and_unreachable(data_dir: Path) -> None:
    p6 = ping.parse_ping((data_dir / "ping/ping6-vxlan.txt").read_text())
    assert p6["replies"] and p6["loss_pct"] == 0.0
    bad = ping.parse_ping((data_dir / "ping/ping-unreachable-native.txt").read_text())
    assert bad["replies"] == []
    with pytest.raises(CommandFailed):
        ping.figures([], 0, 64)


def test_split_streams() -> None:
    assert mi.split_streams(1) == [1]
    assert mi.split_streams(128) == [128]
    assert mi.split_streams(256) == [128, 128]
    assert mi.split_streams(512) == [128] * 4
    assert mi.split_streams(200) == [100, 100]
    assert mi.split_streams(129) == [65, 64]
    assert sum(mi.split_streams(1000, 100)) == 1000


def test_common_sum_known_values() -> None:
    # process 0: 100 Mbit/s in [0,3); process 1 starts 0.5 s later: 50 Mbit/s in [0,3)
    p0 = [(0.0, 1.0, 100.0), (1.0, 2.0, 100.0), (2.0, 3.0, 100.0)]
    p1 = [(0.0, 1.0, 50.0), (1.0, 2.0, 50.0), (2.0, 3.0, 50.0)]
    res = mi.common_sum([p0, p1], [0.0, 0.5])
    assert res["window"] == (0.5, 3.0)            # what both measured
    assert len(res["bins"]) == 2                  # ~1 s bins over 2.5 s
    assert res["sum"] == pytest.approx([150.0, 150.0])
    assert res["mean"] == pytest.approx(150.0)
    # time-weighted: a rate change inside a bin is weighted by its share of the bin
    q0 = [(0.0, 1.0, 100.0), (1.0, 2.0, 200.0)]
    res = mi.common_sum([q0], [0.0])
    assert res["sum"] == pytest.approx([100.0, 200.0])
    res = mi.common_sum([q0, [(0.0, 1.5, 10.0)]], [0.0, 0.5])   # window [0.5, 2.0]
    assert res["per_process"][0] == pytest.approx([100 * 0.5 / 0.75 + 200 * 0.25 / 0.75,
                                                   200.0])
    with pytest.raises(CommandFailed):
        mi.common_sum([p0, []], [0.0, 0.0])


def test_bidir_aggregate_known_values() -> None:
    """--bidir: each direction summed apart over one window, the total their sum."""
    ab0 = [(0.0, 1.0, 100.0), (1.0, 2.0, 100.0), (2.0, 3.0, 100.0)]
    ba0 = [(0.0, 1.0, 10.0), (1.0, 2.0, 10.0), (2.0, 3.0, 10.0)]
    ab1 = [(0.0, 1.0, 50.0), (1.0, 2.0, 50.0)]
    ba1 = [(0.0, 1.0, 5.0), (1.0, 2.5, 5.0)]          # b -> a of process 1 measured longer
    parsed = [{"bidir": True, "intervals": ab0, "intervals_a_to_b": ab0,
               "intervals_b_to_a": ba0},
              {"bidir": True, "intervals": ab1, "intervals_a_to_b": ab1,
               "intervals_b_to_a": ba1}]
    res = mi.aggregate(parsed, [0.0, 0.5])
    assert res["window"] == (0.5, 2.5)             # every process, both directions
    ways = res["directions"]
    assert ways["a_to_b"]["sum"] == pytest.approx([150.0, 150.0])
    assert ways["b_to_a"]["sum"] == pytest.approx([15.0, 15.0])
    assert res["sum"] == pytest.approx([165.0, 165.0])
    assert res["mean"] == pytest.approx(ways["a_to_b"]["mean"] + ways["b_to_a"]["mean"])
    assert res["per_process"][1] == pytest.approx([55.0, 55.0])
    one_way = mi.aggregate([{**p, "bidir": False} for p in parsed], [0.0, 0.5])
    assert "directions" not in one_way and one_way["sum"] == pytest.approx([150.0, 150.0])


def _pairs(data_dir: Path, way: str) -> tuple[list[Any], list[dict[str, Any]], list[float]]:
    """A capture of 2 iperf3 clients x 2 streams started together between two namespaces
    (scripts/capture_iperf3_pairs.py): the raw JSON documents, parsed runs, start offsets."""
    folder = data_dir / f"iperf3/pairs-{way}-native"
    texts = [(folder / f"client-{i}.json").read_text() for i in range(2)]
    offsets = json.loads((folder / "starts.json").read_text())["start_offsets_s"]
    return [json.loads(t) for t in texts], [stream.parse_iperf3(t) for t in texts], offsets


def test_bidir_pairs_aggregate_per_direction_on_capture(data_dir: Path) -> None:
    docs, parsed, offsets = _pairs(data_dir, "bidir")
    for doc, p in zip(docs, parsed):   # what iperf3 itself says, each direction apart
        assert p["bidir"] and not p["reverse"] and p["streams"] == 2
        kept = [iv for iv in doc["intervals"] if not iv["sum"]["omitted"]]
        assert len(kept) == 2 and len(kept) < len(doc["intervals"])      # -O 1 left out
        assert [v for _, _, v in p["intervals_a_to_b"]] == pytest.approx(
            [iv["sum"]["bits_per_second"] / 1e6 for iv in kept])
        assert [v for _, _, v in p["intervals_b_to_a"]] == pytest.approx(
            [iv["sum_bidir_reverse"]["bits_per_second"] / 1e6 for iv in kept])
        assert p["bytes_a_to_b"] == doc["end"]["sum_received"]["bytes"] > 0
        assert p["bytes_b_to_a"] == doc["end"]["sum_received_bidir_reverse"]["bytes"] > 0
    agg = mi.aggregate(parsed, offsets)
    lo = max(o + p[f"intervals_{w}"][0][0] for w in mi.WAYS for o, p in zip(offsets, parsed))
    hi = min(o + p[f"intervals_{w}"][-1][1] for w in mi.WAYS for o, p in zip(offsets, parsed))
    assert agg["window"] == pytest.approx((lo, hi)) and len(agg["bins"]) == 2
    ways = agg["directions"]
    for way in mi.WAYS:
        d = ways[way]
        assert d["sum"] == pytest.approx([sum(col) for col in zip(*d["per_process"])])
        assert d["mean"] > 0
        # the start skew is ms against 1 s bins: close to the processes' own interval means
        own = sum(sum(v for _, _, v in p[f"intervals_{way}"]) / 2 for p in parsed)
        assert d["mean"] == pytest.approx(own, rel=0.05)
    assert agg["sum"] == pytest.approx([x + y for x, y in zip(ways["a_to_b"]["sum"],
                                                              ways["b_to_a"]["sum"])])
    assert agg["mean"] == pytest.approx(ways["a_to_b"]["mean"] + ways["b_to_a"]["mean"])


def test_reverse_pairs_aggregate_on_capture(data_dir: Path) -> None:
    docs, parsed, offsets = _pairs(data_dir, "reverse")
    assert all(p["reverse"] and not p["bidir"] for p in parsed)
    assert all(d["start"]["test_start"]["reverse"] == 1 for d in docs)
    agg = mi.aggregate(parsed, offsets)
    assert "directions" not in agg
    assert agg["sum"] == pytest.approx([sum(col) for col in zip(*agg["per_process"])])
    own = sum(sum(v for _, _, v in p["intervals"]) / len(p["intervals"]) for p in parsed)
    assert agg["mean"] == pytest.approx(own, rel=0.05)


def test_parse_intervals_on_capture(data_dir: Path) -> None:
    res = mi.parse_intervals((data_dir / "iperf3/tcp-4streams-vxlan.json").read_text())
    assert res["streams"] == 4 and len(res["intervals"]) == 2
    assert res["intervals"][0][0] == 0 and res["intervals"][1][0] == res["intervals"][0][1]
    agg = mi.common_sum([res["intervals"]], [0.0])
    assert agg["mean"] == pytest.approx(res["throughput_mbps"], rel=0.05)
    with pytest.raises(CommandFailed, match="iperf3"):
        mi.parse_intervals((data_dir / "iperf3/error-refused.json").read_text())


def test_stream_affinity_reaches_iperf3_and_bad_values_are_named() -> None:
    p = stream.StreamParams(affinity="0,1", length=1 << 20, congestion="cubic")
    argv = stream.client_argv("198.19.0.2", 5201, 3, 1, p)
    assert argv[argv.index("-A") + 1] == "0,1" and argv[argv.index("-l") + 1] == "1048576"
    assert "-A" not in stream.client_argv("198.19.0.2", 5201, 3, 1, stream.StreamParams())
    assert stream.StreamParams(affinity="3").validate() == []
    for bad in ("0,", "a", "0,1,2", "-1"):
        (problem,) = stream.StreamParams(affinity=bad).validate()
        assert problem.startswith(f"affinity {bad!r} is not N or N,M")
