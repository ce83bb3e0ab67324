"""Issue 12, report side: the latency CDF from the recorded distribution, CPU per core and the
one-core bottleneck, read from campaigns recorded by a real `tunbench run`:

- `latency`: `--tunnels native,vxlan,wireguard,ipsec --workloads latency --duration 2
  --repeats 2` (wireguard-go and strongSwan libipsec here);
- `encrypted`: `--tunnels native,ssh-forward,wireguard,ipsec --workloads stream --duration 3
  --repeats 2` (with each tracked process's command name and busiest thread).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunbench.report import build, cores, data, figures, takeaways
from tunbench.results import reader, records
from tunbench.results.model import CASE_FORMAT

LATENCY = ("latency", 1500, "default")
STREAM = ("stream", 1500, "default")


def _docs(root: Path) -> list[dict[str, Any]]:
    return [reader.read_json(p, CASE_FORMAT) for p in sorted((root / "cases").glob("*.json"))]


def _shown(d: dict[str, Any]) -> str:
    """The name the report gives a case's tunnel ('wireguard (go)'): records.identity."""
    return str(records.identity(d["case"]["tunnel"])["display"])


def _by_tunnel(root: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for d in _docs(root):
        if d["status"] == "ok":
            out.setdefault(_shown(d), []).append(d)
    return out


def test_latency_cdf_is_the_recorded_distribution(built: Callable[[str], build.Report]) -> None:
    """Every tunnel's curve is the workload's 1000-quantile sketch of every transaction, the
    repeats pooled as an equal-weight mixture; not the three percentile metrics."""
    rep = built("latency")
    root = rep.html.parent.parent
    c = data.load(root)
    dists = {d.name: d for d in data.distributions(c, LATENCY)}
    assert set(dists) == {"tcp_rtt", "udp_rtt"}
    for proto in ("tcp", "udp"):
        dist = dists[f"{proto}_rtt"]
        assert dist.unit == "µs"
        for tun, docs in _by_tunnel(root).items():
            sketches = [d["raw"][proto]["cdf"] for d in docs]
            assert dist.dense(tun) and len(dist.quantiles[tun]) == len(sketches[0]["pct"])
            assert dist.counts[tun] == sum(d["raw"][proto]["stats"]["samples"] for d in docs)
            q = dist.quantiles[tun]
            # the ends are the pooled minimum and maximum kept
            assert q[0][1] == pytest.approx(min(s["rtt_us"][0] for s in sketches))
            assert q[-1][1] == pytest.approx(max(s["rtt_us"][-1] for s in sketches))
            # at each drawn point, the repeats' own CDFs average to the drawn fraction
            for f, x in q[100:1000:100]:
                mean_f = np.mean([np.interp(x, s["rtt_us"], np.array(s["pct"]) / 100)
                                  for s in sketches])
                assert mean_f == pytest.approx(f, abs=2e-3), (proto, tun, f)
            # and the pooled median lies between the repeats' medians
            p50 = next(x for f, x in q if f == pytest.approx(0.5))
            meds = [d["metrics"][f"{proto}_rtt_p50"]["value"] for d in docs]
            assert min(meds) - 1e-9 <= p50 <= max(meds) + 1e-9

    svg = (rep.html.parent / "cdf-tcp_rtt-latency-1500.svg").read_text()
    for tun in _by_tunnel(root):
        assert f"{tun} (n={dists['tcp_rtt'].counts[tun]:,})" in svg
    assert "tail" in svg   # the 1 - F panel, where p99 and p99.9 are apart


def test_cdf_of_files_without_a_sketch_falls_back_to_percentiles(
        campaign: Callable[[str], Path]) -> None:
    """A case file written before the sketch (no raw.<proto>.cdf) still gets a CDF, from its
    percentile metrics, marked as such."""
    root = campaign("latency")
    for p in (root / "cases").glob("*.json"):
        d = reader.read_json(p, CASE_FORMAT)
        for proto in ("tcp", "udp"):
            d["raw"][proto].pop("cdf", None)
        p.write_text(json.dumps(d))
    c = data.load(root)
    tcp = next(d for d in data.distributions(c, LATENCY) if d.name == "tcp_rtt")
    for tun in c.tunnels():
        assert not tcp.dense(tun)
        # p99.9 too: its record says {"q": 99.9} (the v1 name tcp_rtt_p99_9 escaped the old
        # name pattern)
        assert [f for f, _ in tcp.quantiles[tun]] == pytest.approx([0.5, 0.9, 0.99, 0.999])
    # the CDF figures alone, as report.build draws them (figures.render): the whole report
    # of this campaign is built and checked by the tests that read it unchanged
    out = root / "report"
    figs = {f.name: f for f in figures.cdf_figures(c, out, figures.Palette(c.tunnels()))}
    svg = figs["cdf-tcp_rtt-latency-1500"].svg.read_text()
    assert "native (percentiles only)" in svg


def _ranked_busy(docs: list[dict[str, Any]]) -> list[float]:
    ticks = [sorted((u["busy"] for k, u in s["cpus"].items() if k != "cpu"), reverse=True)
             for d in docs for s in d["cpu"]["samples"]]
    return [float(np.mean([t[i] for t in ticks])) for i in range(len(ticks[0]))]


def test_cpu_per_core_and_bottleneck_from_the_recording(built: Callable[[str], build.Report]) -> None:
    rep = built("encrypted")
    root = rep.html.parent.parent
    c = data.load(root)
    profs = {p.tunnel: p for p in cores.profiles(c) if p.scenario == STREAM}
    by_tun = _by_tunnel(root)
    assert set(profs) == set(by_tun)
    expected_bound = set()
    for tun, docs in by_tun.items():
        p = profs[tun]
        assert p.busy == pytest.approx(_ranked_busy(docs))
        assert p.busy == sorted(p.busy, reverse=True) and p.cores == 2
        for part, busy in zip(p.parts, p.busy):   # the split adds up to the busy share
            assert sum(part.values()) == pytest.approx(busy, abs=0.5)
        threads = [e["busiest_thread_pct"] for d in docs for e in d["cpu"]["processes"].values()]
        top_thread = max(float(np.mean([max(e["busiest_thread_pct"] for k, e in
                                            d["cpu"]["processes"].items()
                                            if k.startswith(prefix)) for d in docs]))
                         for prefix in {k.split("[")[0] for k in docs[0]["cpu"]["processes"]})
        assert threads
        if top_thread >= cores.SATURATED or (
                p.busy[0] >= cores.SATURATED and p.busy[0] - p.busy[-1] >= cores.ROOM):
            expected_bound.add(tun)
    # the userspace datapaths are named by their command, per site
    assert {"wireguard-go (datapath-a)", "wireguard-go (datapath-b)"} <= set(
        profs["wireguard (go)"].processes)
    assert {"charon (datapath-a)", "charon (datapath-b)"} <= set(profs["ipsec (libipsec)"].processes)
    # wireguard-go spreads its work over its threads: its busiest thread is a fraction of it
    wg = profs["wireguard (go)"].processes["wireguard-go (datapath-a)"]
    assert wg["busiest_thread_pct"] < wg["pct_of_one_core"]
    found = {t.facts["tunnel"] for t in takeaways.one_core(c)}
    assert found == expected_bound

    assert "cores-stream-1500" in {f.name for f in rep.figures}
    svg = (rep.html.parent / "cores-stream-1500.svg").read_text()
    for tun in by_tun:
        assert tun in svg
    assert "busiest" in svg and "least busy" in svg
    assert ("⚠ one core" in svg) == bool(expected_bound)


def test_ecmp_sweep_figure_and_scale_out_takeaway(built: Callable[[str], build.Report]) -> None:
    """tests/data/campaigns/ecmp = tests/data/experiments/ecmp-sweep.toml: wireguard-go and
    libipsec with tunnels = 1, 2, 4 and 8 streams (one wireguard-t4 case failed while
    recording: wireguard-go's UAPI socket; the sweep uses the repeats that measured)."""
    rep = built("ecmp")
    root = rep.html.parent.parent
    c = data.load(root)
    tput: dict[str, dict[int, list[float]]] = {}
    dp: dict[str, dict[int, list[float]]] = {}
    for d in _docs(root):
        t = d["case"]["tunnel"]
        if d["status"] != "ok" or "sweep" not in t:
            continue
        n = t["sweep"]["tunnels"]
        assert t["params"]["tunnels"] == n and t["label"] == f"{t['base']}-t{n}"
        tput.setdefault(t["base"], {}).setdefault(n, []).append(
            d["metrics"]["throughput"]["value"])
        daemons = [e["pct_of_one_core"] for k, e in d["cpu"]["processes"].items()
                   if k.startswith("datapath")]
        assert len(daemons) == 2 * n          # one daemon per tunnel per site
        dp.setdefault(t["base"], {}).setdefault(n, []).append(sum(daemons))
    assert set(tput) == {"wireguard", "ipsec"}
    # the report names a sweep like its points, with the implementation (records.name_tunnels)
    shown = {"wireguard": "wireguard (go)", "ipsec": "ipsec (libipsec)"}
    assert {r.tunnel.base for r in c.cases if r.tunnel.sweep} == set(shown.values())
    sw = next(s for s in data.sweeps(c) if s.over == "tunnel")
    assert sw.param == "tunnels" and sorted(sw.points["throughput"]["wireguard (go)"]) == [1, 2, 4]
    takes = {t.facts["tunnel"]: t for t in takeaways.scale_out(c)}
    assert set(takes) == set(shown.values())
    for tun, pts in tput.items():
        factors = {n: np.mean(v) / np.mean(pts[1]) for n, v in pts.items()}
        t = takes[shown[tun]]
        assert t.facts["factors"] == pytest.approx(factors)
        assert f"×{factors[4]:.2f} at 4" in t.text and f"×{factors[2]:.2f} at 2" in t.text
        best = max(pts, key=lambda n: np.mean(pts[n]))
        assert t.facts["datapath_cpu"] == pytest.approx((np.mean(dp[tun][1]),
                                                         np.mean(dp[tun][best])))
        # "significant" only when the CIs of best and 1 are apart
        a, b = (data.stats.summarize(pts[x]) for x in (1, best))
        assert t.facts["scales"] == (best != 1 and not data.overlap(a, b))
        assert ("significant (" in t.text) == t.facts["scales"]
    names = {f.name for f in rep.figures}
    assert "sweep-stream-tunnels-1500" in names
    svg = (rep.html.parent / "sweep-stream-tunnels-1500.svg").read_text()
    assert "ECMP tunnels" in svg and "datapath_cpu" in svg
    page = html.unescape(rep.html.read_text())
    assert all(t.text in page for t in takes.values())


@pytest.mark.parametrize("name", ["basic", "encrypted"])
def test_goodput_against_the_wire(name: str, campaign: Callable[[str], Path]) -> None:
    """On-wire rate and efficiency from what each case recorded: iperf3's MSS, the tunnel's
    MTU and header overhead (a 1500-byte native packet carries 1448 bytes; libipsec's
    1400-byte inner MTU plus 62 bytes of ESP makes 1462)."""
    root = campaign(name)
    c = data.load(root)
    expect: dict[str, list[tuple[float, float, float]]] = {}
    for d in _docs(root):
        if d["status"] != "ok" or d["tunnel"].get("relay"):
            continue
        mss = d["raw"]["iperf3"]["mss"]
        frame = d["tunnel"]["mtu"] + d["tunnel"]["overhead"]
        good = d["metrics"]["throughput"]["value"]
        expect.setdefault(_shown(d), []).append(
            (good, good * frame / mss, mss / frame))
    take = next(t for t in takeaways.compute(c) if t.topic == "on-wire")
    assert set(take.facts["efficiency"]) == set(expect)
    for tun, vals in expect.items():
        assert take.facts["goodput"][tun] == pytest.approx(np.mean([v[0] for v in vals]))
        assert take.facts["on_wire"][tun] == pytest.approx(np.mean([v[1] for v in vals]))
        assert take.facts["efficiency"][tun] == pytest.approx(vals[0][2])
        assert f"{100 * vals[0][2]:.1f}% of the wire is goodput" in take.text
    assert take.facts["efficiency"]["native"] == pytest.approx(1448 / 1500)
    if name == "encrypted":
        assert "ssh-forward" not in take.text            # a stream relay has no packets
        assert take.facts["efficiency"]["ipsec (libipsec)"] < take.facts["efficiency"]["native"]


def test_a_swept_workload_gets_one_cores_figure(built: Callable[[str], build.Report]) -> None:
    """tests/data/campaigns/sweep (stream at 1, 4, 16 streams): one CPU-per-core figure for
    the sweep, its rows labelled by count in sweep order, not one figure per count."""
    rep = built("sweep")
    names = [f.name for f in rep.figures if f.name.startswith("cores-")]
    assert names == ["cores-stream-1500"]
    svg = (rep.html.parent / "cores-stream-1500.svg").read_text()
    ys = [svg.index(f"native · streams={n}") for n in (1, 4, 16)]
    assert ys == sorted(ys)
