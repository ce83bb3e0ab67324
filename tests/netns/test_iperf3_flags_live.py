"""`tunbench run` with iperf3's own flags on a real native testbed: -t 2 -P 2 -R makes a case
that records reverse and 2 streams, iperf3 itself ran that way, and the bytes went from site b
to site a; --bidir moves bytes both ways at once and keeps each direction beside the sum."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]


def _run(out: Path, *flags: str) -> tuple[str, dict[str, Any]]:
    r = subprocess.run(TB + ["run", "--tunnels", "native", "--warmup", "0", "--repeats", "1",
                             "--no-report", "--quiet", "--out", str(out), *flags],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    (case,) = sorted((out / "cases").glob("*.json"))
    return r.stdout, json.loads(case.read_text())


def test_run_t_P_R_records_reverse_and_streams(tmp_path: Path, root_unchanged: None) -> None:
    stdout, doc = _run(tmp_path / "rev", "-t", "2", "-P", "2", "-R")
    assert doc["status"] == "ok"
    params = doc["case"]["workload"]["params"]
    assert params["reverse"] is True and params["streams"] == 2 and params["bidir"] is False
    ip = doc["raw"]["iperf3"]          # what iperf3 itself says it ran
    assert ip["reverse"] is True and ip["bidir"] is False and ip["streams"] == 2
    assert ip["bytes_received"] > 0 and doc["metrics"]["throughput"]["value"] > 0
    assert len(doc["series"]["throughput"]) == 2                   # -t 2, 1 s intervals
    moved = doc["datapath_counters"]["delta"]
    # the bulk arrived at site a (the iperf3 client, the receiver with -R), not at b
    assert moved["a"]["rx_bytes"] >= ip["bytes_received"]
    assert moved["a"]["rx_bytes"] > moved["b"]["rx_bytes"]
    assert "stream reverse" in stdout                              # named in the summary


def test_run_bidir_moves_bytes_both_ways(tmp_path: Path, root_unchanged: None) -> None:
    stdout, doc = _run(tmp_path / "bidir", "-t", "2", "--bidir")
    assert doc["status"] == "ok" and doc["case"]["workload"]["params"]["bidir"] is True
    ip = doc["raw"]["iperf3"]
    assert ip["bidir"] is True and ip["reverse"] is False
    m = {k: doc["metrics"][k]["value"] for k in ("throughput", "throughput_a_to_b",
                                                 "throughput_b_to_a")}
    assert m["throughput_a_to_b"] > 0 and m["throughput_b_to_a"] > 0
    assert m["throughput"] == pytest.approx(m["throughput_a_to_b"] + m["throughput_b_to_a"])
    moved = doc["datapath_counters"]["delta"]
    assert moved["a"]["rx_bytes"] > 0 and moved["b"]["rx_bytes"] > 0
    assert "stream bidir" in stdout
