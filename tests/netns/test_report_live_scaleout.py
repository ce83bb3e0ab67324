"""One live small campaign for the report side of issue 12: a real `tunbench run` of native
and wireguard swept over tunnels = 1, 2 (ECMP) with the stream and latency workloads, then
its report: the tunnel sweep figure and scale-out sentence, CPU per core, and the latency CDF
drawn from every transaction, each checked against the case files the run wrote."""

from __future__ import annotations

import html
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tunbench.report import headlines

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]
EXPERIMENT = """
[experiment]
repeats = 1
duration = 2
warmup = 0

[[tunnel]]
kind = "native"

[[tunnel]]
kind = "wireguard"
impl = "go"
tunnels = [1, 2]

[[workload]]
name = "stream"
streams = 4

[[workload]]
name = "latency"
protocol = "tcp"
"""


@pytest.mark.skipif(shutil.which("wireguard-go") is None or shutil.which("sockperf") is None,
                    reason="needs wireguard-go and sockperf (deps/apt-*.txt)")
def test_live_ecmp_sweep_report(tmp_path: Path, root_unchanged: None) -> None:
    exp = tmp_path / "ecmp.toml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "camp"
    r = subprocess.run(TB + ["run", "--experiment", str(exp), "--out", str(out)],
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    assert all(d["status"] == "ok" for d in docs), [d["error"] for d in docs]
    stream = {d["case"]["tunnel"]["label"]: d for d in docs
              if d["case"]["workload"]["name"] == "stream"}
    assert set(stream) == {"native", "wireguard-t1", "wireguard-t2"}
    for n in (1, 2):
        t = stream[f"wireguard-t{n}"]["case"]["tunnel"]
        assert t["base"] == "wireguard" and t["sweep"] == {"tunnels": n}
        procs: dict[str, Any] = stream[f"wireguard-t{n}"]["cpu"]["processes"]
        daemons = {k: e for k, e in procs.items() if k.startswith("datapath")}
        assert len(daemons) == 2 * n and all(e["comm"] == "wireguard-go"
                                             for e in daemons.values())
        assert all(e["busiest_thread_pct"] <= e["pct_of_one_core"] + 1e-6
                   and e["threads"] > 1 for e in daemons.values())
        assert any(e["comm"].startswith("ksoftirqd/") for e in procs.values())
    factor = (stream["wireguard-t2"]["metrics"]["throughput"]["value"]
              / stream["wireguard-t1"]["metrics"]["throughput"]["value"])

    rep = out / "report"
    page = html.unescape((rep / "index.html").read_text())
    assert (rep / "sweep-stream-tunnels-1500.svg").exists()
    assert (rep / "cores-stream-1500.svg").exists()
    # named with the implementation the cases recorded (data.name_tunnels)
    assert "wireguard (go) over N ECMP tunnels: throughput" in page
    assert f"×{factor:.2f} at 2" in page
    assert headlines.SINGLE_CAVEAT in page     # the single-run caveat, said once

    lat = {d["case"]["tunnel"]["label"]: d for d in docs
           if d["case"]["workload"]["name"] == "latency"}
    svg = (rep / "cdf-tcp_rtt-latency-1500.svg").read_text()
    for d in lat.values():
        n = d["raw"]["tcp"]["stats"]["samples"]
        # how many round trips fit the window is the host's (909 of them beside make test's
        # other tiers): the legend names the count recorded, whatever it is
        assert n > 0 and f"{d['case']['tunnel']['display']} (n={n:,})" in svg
    # the sketch's median is the recorded p50
    d = lat["native"]
    cdf = d["raw"]["tcp"]["cdf"]
    assert cdf["rtt_us"][cdf["pct"].index(50.0)] == d["metrics"]["tcp_rtt_p50"]["value"]
    assert statistics.fmean(cdf["rtt_us"][:1001]) > 0
