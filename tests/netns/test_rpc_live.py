"""rpc for real: a `tunbench run` of native and vxlan at one and 32 connections (one: blocking sockets, no poll) between two
namespaces (2 s each): transactions flow, the latency distribution is ordered, every
connection opened, both generator ends were sampled for CPU, the console sweep shows
transactions/s; and a bad size mix is refused in one line (exit 2) before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tunbench.workloads import rpc

TB = [sys.executable, "-m", "tunbench"]
ENV = {"TUNBENCH_DB": "off", "COLUMNS": "200", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
EXPERIMENT = """
[experiment]
repeats = 1
duration = 2
warmup = 1

[[tunnel]]
kind = "native"

[[tunnel]]
kind = "vxlan"

[[workload]]
name = "rpc"
connections = [1, 32]
"""

pytestmark = [pytest.mark.skipif(rpc.find_binary() is None,
                                reason="tunbench-rpc is not built (make loadgen)"), pytest.mark.correctness,
              pytest.mark.beside]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("rpc")
    exp = tmp / "rpc.toml"
    exp.write_text(EXPERIMENT)
    out = tmp / "camp"
    r = subprocess.run(TB + ["run", "--experiment", str(exp), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    docs = {f"{d['case']['tunnel']['kind']}/{d['case']['workload']['params']['connections']}": d
            for d in (json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json")))}
    bad = {k: d["error"] for k, d in docs.items() if d["status"] != "ok"}
    assert not bad, bad
    return out, r.stdout, docs


@pytest.mark.parametrize("kind", ["native", "vxlan"])
@pytest.mark.parametrize("conns", [1, 32])
def test_figures(campaign: tuple[Path, str, dict[str, Any]], kind: str, conns: int) -> None:
    doc = campaign[2][f"{kind}/{conns}"]
    m = {k: v["value"] for k, v in doc["metrics"].items()}
    client = doc["raw"]["client"]
    assert m["rpc_rate"] > 0 and client["transactions"] > 0
    assert m["connections"] == client["connected"] == conns
    assert m["rpc_latency_min"] <= m["rpc_latency_p50"] <= m["rpc_latency_p90"] \
        <= m["rpc_latency_p99"] <= m["rpc_latency_p99_9"] <= m["rpc_latency_max"]
    assert m["rpc_latency_std"] >= 0 and m["rpc_latency_mean"] > 0
    assert client["conn_errors"] == client["framing_errors"] == 0
    # the server answered every request the client completed, and closed when it left
    server = doc["raw"]["server"]
    assert server["accepted"] == conns and server["stop_reason"] == "clients-closed"
    assert server["transactions"] >= client["transactions"]
    # the window is the measurement: one count per second, none outside it
    assert len(doc["series"]["rpc_rate"]) == 2
    assert sum(doc["series"]["rpc_rate"]) == client["transactions"]
    assert {"cpu_busy"} <= set(m)
    procs = {k.split("[")[0] for k in doc["cpu"]["processes"]}
    assert {"rpc-client", "rpc-server"} <= procs
    wl = doc["case"]["workload"]
    assert wl["headline"][0] == "rpc_rate" and wl["sweep_param"] == "connections"


def test_console_and_report(campaign: tuple[Path, str, dict[str, Any]]) -> None:
    out, stdout, _ = campaign
    # the console's sweep table shows transactions/s per connection count, % of native below
    assert "transactions/s" in stdout and "tunnel \\ connections" in stdout
    assert "(100%)" in stdout
    report = (out / "report" / "index.html").read_text()
    assert "share of native RPC transactions, by connections: 1: vxlan" in report   # catalogue name
    assert (out / "report" / "sweep-rpc-connections-1500.svg").is_file()


def test_bad_mix_refused(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    exp.write_text(EXPERIMENT.replace("connections = [1, 32]", 'mix = "64-32:5"'))
    r = subprocess.run(TB + ["run", "--experiment", str(exp), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60, env=ENV)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "mix" in lines[0] and "reversed" in lines[0], r.stderr
    assert not (tmp_path / "o" / "cases").exists()
