"""Every methodology workload for real, at small scale, through VXLAN with native alongside:
figures make sense and the tunnel device carried the traffic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tunbench import spec
from tunbench.runner import run_campaign
from tunbench.testbed import local, netlink
from tunbench.testbed.base import Testbed
from tunbench.tunnels.base import Endpoints
from tunbench.workloads.base import Context
from tunbench.workloads.ping import Ping, PingParams

pytestmark = pytest.mark.correctness


def _campaign(out: Path, kinds: list[str], workloads: list[dict[str, Any]]
              ) -> dict[str, dict[str, Any]]:
    exp = spec.build({
        "experiment": {"repeats": 1, "duration": 2, "warmup": 1},
        "tunnel": [{"kind": k} for k in kinds], "workload": workloads}, "test")
    outcome = run_campaign(exp, out)
    docs = {f"{d['case']['tunnel']['kind']}/{d['case']['workload']['label']}": d
            for d in outcome.store.read_cases()}
    bad = {k: d["error"] for k, d in docs.items() if d["status"] != "ok"}
    assert not bad, bad
    return docs


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One small real campaign: every new workload over native and vxlan, but 512 streams
    on native only (streams512)."""
    return _campaign(tmp_path_factory.mktemp("camp"), ["native", "vxlan"],
                     [{"name": "latency", "protocol": "both"}, {"name": "ping"},
                      {"name": "line-rate-processes", "processes": 4}])


@pytest.fixture(scope="module")
def streams512(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """512 streams in 4 iperf3 processes, on native: the aggregate over the common interval
    is the workload's own arithmetic, whatever carries the streams (a tunnel device's
    counters under several iperf3 processes: test_line_rate_processes, over vxlan; 512
    streams over vxlan ran here too until issue 27)."""
    return _campaign(tmp_path_factory.mktemp("camp512"), ["native"],
                     [{"name": "parallel-streams", "streams": [512]}])


def _tunnel_bytes(doc: dict[str, Any]) -> int:
    delta = doc["datapath_counters"]["delta"]
    return min(delta["b"]["rx_bytes"] + delta["b"]["tx_bytes"],
               delta["a"]["rx_bytes"] + delta["a"]["tx_bytes"])


@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_latency_percentiles_ordered_full_rtt(campaign: dict[str, Any], kind: str) -> None:
    doc = campaign[f"{kind}/latency"]
    m = {k: v["value"] for k, v in doc["metrics"].items()}
    for proto in ("tcp", "udp"):
        vals = [m[f"{proto}_rtt_{s}"] for s in ("min", "p50", "p90", "p99", "p99_9", "max")]
        assert vals == sorted(vals) and vals[0] > 0, (proto, vals)
        assert vals[0] <= m[f"{proto}_rtt_mean"] <= vals[-1]
        raw = doc["raw"][proto]
        assert raw["sockperf_summary"]["full_rtt"] is True     # round trips, not half
        st = raw["stats"]
        assert st["samples"] > 0 and st["seconds"] > 0   # warm-up excluded: below
        cdf = raw["cdf"]["rtt_us"]
        assert cdf[0] == vals[0] and cdf[500] == m[f"{proto}_rtt_p50"]
        # every request and reply of the kept samples crossed the tunnel device
        assert _tunnel_bytes(doc) >= 2 * st["samples"] * 64
    assert doc["cpu"]["warmup_excluded_samples"] >= 1


@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_ping_figures_and_hops(campaign: dict[str, Any], kind: str) -> None:
    doc = campaign[f"{kind}/ping"]
    m = {k: v["value"] for k, v in doc["metrics"].items()}
    assert m["rtt_min"] <= m["rtt_avg"] <= m["rtt_max"] and m["loss"] == 0
    assert m["ttl"] == 64 and m["hops"] == 0     # site b is the next hop (VXLAN is L2)
    assert len(doc["series"]["rtt"]) == 10       # 2 s at 0.2 s, the warm-up's 5 left out
    assert doc["raw"]["warmup_replies_skipped"] == 5


def test_512_streams_aggregate_is_sum_over_common_interval(
        streams512: dict[str, Any]) -> None:
    doc = streams512["native/parallel-streams-512"]
    raw = doc["raw"]["iperf3"]
    assert raw["layout"] == [128, 128, 128, 128]
    procs = raw["processes"]
    assert [p["streams"] for p in procs] == [128] * 4
    assert len({p["port"] for p in procs}) == 4
    agg = raw["aggregate"]
    # the aggregate series is, bin by bin, the sum of the processes' series
    for j, total in enumerate(agg["series_mbps"]):
        assert total == pytest.approx(sum(p["common_series_mbps"][j] for p in procs))
    assert doc["metrics"]["throughput"]["value"] == pytest.approx(
        sum(sum(p["common_series_mbps"]) / len(p["common_series_mbps"]) for p in procs))
    # (the processes' own whole-run figures differ from it by their edges, not checked here)
    assert agg["mbps"] > 0 and raw["sum_of_process_throughputs_mbps"] > 0
    # the window is exactly what every process measured: the latest first start and the
    # earliest last end, each process shifted by its start offset
    offs = raw["start_offsets_s"]
    lo = max(o + p["intervals"][0][0] for o, p in zip(offs, procs))
    hi = min(o + p["intervals"][-1][1] for o, p in zip(offs, procs))
    assert agg["window_s"] == pytest.approx([lo, hi], abs=1e-3)
    assert hi > lo                     # a common interval exists (its length is load's)
    moved = sum(p["bytes_received"] for p in procs)
    assert _tunnel_bytes(doc) >= moved
    assert {"cpu_busy", "cpu_busy_min", "cpu_busy_max"} <= set(doc["metrics"])
    m = doc["metrics"]
    assert m["cpu_busy_min"]["value"] <= m["cpu_busy"]["value"] <= m["cpu_busy_max"]["value"]


def _run_4_streams(out: Path, way: str) -> dict[str, Any]:
    """`tunbench run` of parallel-streams, 4 streams in 2 iperf3 processes, native, -t 2,
    with -R or --bidir as a user types it (the process split from an experiment file)."""
    exp = out.parent / f"{out.name}.toml"
    exp.write_text('[[workload]]\nname = "parallel-streams"\nstreams = 4\nper_process = 2\n')
    r = subprocess.run([sys.executable, "-m", "tunbench", "run", "--experiment", str(exp),
                        "--tunnels", "native", "-t", "2", "--warmup", "0", "--repeats", "1",
                        "--no-report", "--quiet", "--out", str(out), way],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (case,) = sorted((out / "cases").glob("*.json"))
    doc: dict[str, Any] = json.loads(case.read_text())
    assert doc["status"] == "ok", doc.get("error")
    raw = doc["raw"]["iperf3"]
    assert raw["layout"] == [2, 2] and [p["streams"] for p in raw["processes"]] == [2, 2]
    # the aggregate is, bin by bin, the sum of the processes over the common interval
    for j, total in enumerate(raw["aggregate"]["series_mbps"]):
        assert total == pytest.approx(sum(p["common_series_mbps"][j]
                                          for p in raw["processes"]))
    assert doc["metrics"]["throughput"]["value"] == pytest.approx(raw["aggregate"]["mbps"])
    return doc


def test_parallel_streams_reverse_site_b_sends(tmp_path: Path, root_unchanged: None) -> None:
    doc = _run_4_streams(tmp_path / "rev", "-R")
    params = doc["case"]["workload"]["params"]
    assert params["reverse"] is True and params["bidir"] is False
    procs = doc["raw"]["iperf3"]["processes"]
    assert all(p["reverse"] and not p["bidir"] for p in procs)     # as iperf3 itself says
    assert "throughput_a_to_b" not in doc["metrics"]
    moved = doc["datapath_counters"]["delta"]                      # the underlay veths
    got = sum(p["bytes_received"] for p in procs)
    assert got > 0
    # the bulk arrived at site a (the clients, receivers with -R) and left site b
    assert moved["a"]["rx_bytes"] >= got and moved["b"]["tx_bytes"] >= got
    assert moved["b"]["rx_bytes"] < got                            # only ACKs went a -> b


def test_parallel_streams_bidir_each_direction_apart(tmp_path: Path,
                                                     root_unchanged: None) -> None:
    doc = _run_4_streams(tmp_path / "bidir", "--bidir")
    assert doc["case"]["workload"]["params"]["bidir"] is True
    raw = doc["raw"]["iperf3"]
    procs = raw["processes"]
    assert all(p["bidir"] and not p["reverse"] for p in procs)
    m = {k: doc["metrics"][k]["value"] for k in ("throughput", "throughput_a_to_b",
                                                 "throughput_b_to_a")}
    assert m["throughput_a_to_b"] > 0 and m["throughput_b_to_a"] > 0
    assert m["throughput"] == pytest.approx(m["throughput_a_to_b"] + m["throughput_b_to_a"])
    series = doc["series"]
    assert len(series["throughput"]) == len(series["throughput_a_to_b"]) \
        == len(series["throughput_b_to_a"]) >= 1
    for total, ab, ba in zip(series["throughput"], series["throughput_a_to_b"],
                             series["throughput_b_to_a"]):
        assert total == pytest.approx(ab + ba)
    for way in ("a_to_b", "b_to_a"):   # each direction: the common-interval sum of processes
        assert m[f"throughput_{way}"] == pytest.approx(raw["aggregate"][f"{way}_mbps"])
        for j, total in enumerate(series[f"throughput_{way}"]):
            assert total == pytest.approx(sum(p[f"common_series_{way}_mbps"][j]
                                              for p in procs))
    # each direction's bytes went over the underlay that way
    ab = sum(p["bytes_a_to_b"] for p in procs)
    ba = sum(p["bytes_b_to_a"] for p in procs)
    assert ab > 0 and ba > 0
    moved = doc["datapath_counters"]["delta"]
    assert moved["a"]["tx_bytes"] >= ab and moved["b"]["rx_bytes"] >= ab
    assert moved["b"]["tx_bytes"] >= ba and moved["a"]["rx_bytes"] >= ba


def test_line_rate_processes(campaign: dict[str, Any]) -> None:
    doc = campaign["vxlan/line-rate-processes"]
    raw = doc["raw"]["iperf3"]
    assert raw["layout"] == [1, 1, 1, 1]
    assert "native" in doc["raw"]["line_rate"]["source"]
    assert _tunnel_bytes(doc) >= sum(p["bytes_received"] for p in raw["processes"])
    from tunbench.report import stats
    from tunbench.results.records import CaseRecord
    rows = {(r.tunnel, r.metric): r
            for r in stats.rows([CaseRecord.from_doc(d) for d in campaign.values()])
            if r.workload == "line-rate-processes"}
    vx = rows[("vxlan", "throughput")]
    assert vx.pct_of_line_rate == pytest.approx(vx.pct_of_native)
    assert vx.line_rate_source == "native throughput measured in the same campaign"


def test_ping_counts_a_routed_hop(testbed: Testbed) -> None:
    far = local.add_routed_hop(testbed)
    ep = Endpoints(a4=testbed.a.underlay4, b4=far, mtu=1500, overhead=0)
    out = Ping().run(Context(testbed, ep, duration=1, warmup=0), PingParams(interval=0.1))
    assert out.metrics["ttl"].value == 63 and out.metrics["hops"].value == 1
    near = Endpoints(a4=testbed.a.underlay4, b4=testbed.b.underlay4, mtu=1500, overhead=0)
    out = Ping().run(Context(testbed, near, duration=1, warmup=0), PingParams(interval=0.1))
    assert out.metrics["hops"].value == 0


def test_nothing_left(campaign: dict[str, Any], streams512: dict[str, Any],
                      tmp_path: Path) -> None:
    rids = {d["case"]["run_id"] for d in [*campaign.values(), *streams512.values()]}
    assert not [n for n in netlink.list_netns() if n.split("-")[1:2] and
                n.split("-")[1] in rids]
