"""`tunbench run` leaves an HTML report of that very run in DIR/report/."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]


def test_run_writes_report(tmp_path: Path, root_unchanged: None) -> None:
    out = tmp_path / "camp"
    r = subprocess.run(TB + ["run", "--duration", "1", "--warmup", "0", "--repeats", "2",
                             "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    page = out / "report" / "index.html"
    assert page.exists() and f"report: {page}" in r.stderr
    html = page.read_text()
    cases = sorted((out / "cases").glob("*.json"))
    assert len(cases) == 4
    for c in cases:
        assert f'href="../cases/{c.name}"' in html
        # result format v2 (docs/results.md): the file says what its figures mean
        doc = json.loads(c.read_text())
        assert doc["format_version"] == 2
        assert doc["case"]["workload"]["headline"][0] == "throughput"
        tput = doc["metrics"]["throughput"]
        assert (tput["base"], tput["dims"], tput["unit"]) == ("throughput", {}, "Mbit/s")
        assert {"impl", "encrypts", "display"} <= set(doc["case"]["tunnel"])
        # what tunbench advise --carries / --kernel-only read, from the driver at write time
        assert doc["case"]["tunnel"]["carries"] == (
            ["tcp", "udp", "l2"] if doc["case"]["tunnel"]["kind"] == "vxlan" else ["tcp", "udp"])
        assert doc["case"]["tunnel"]["kernel_datapath"] is True
    # the share of native the report states: paired round by round (the geometric mean of
    # vxlan / native in the same round, docs/methodology.md), computed here from the files
    by = {(d["case"]["tunnel"]["kind"], d["case"]["repeat"]): d["metrics"]["throughput"]["value"]
          for d in (json.loads(c.read_text()) for c in cases)}
    logs = [math.log(by[("vxlan", r)] / by[("native", r)]) for k, r in by if k == "vxlan"]
    pct = 100 * math.exp(sum(logs) / len(logs))
    assert len(logs) == 2 and f"vxlan keeps {pct:.1f}% of native throughput" in html
    assert (out / "report" / "results.csv").exists()
    assert (out / "report" / "results.parquet").exists()
    assert (out / "report" / "pct-native-stream-throughput.png").exists()
