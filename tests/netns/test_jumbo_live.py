"""A live jumbo campaign: `tunbench run` with native and vxlan at `--mtu 1500,9000`, through the
whole path: each case's testbed at its underlay MTU, the tunnel MTU derived from the overhead
(vxlan over IPv4: 50 B), the DF probes at the tunnel MTU (passed) and one byte above
(refused) recorded in the case, the TCP stream's segment size following the MTU, and the
report's MTU take-away checked with the recorded campaign's assertions (tests/jumbo_checks.py).
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

import pytest

from jumbo_checks import check_jumbo
from tunbench import pathmtu
from tunbench.report import build

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]
OVERHEAD = {"native": 0, "vxlan": 14 + 8 + 8 + 20}   # inner Ethernet, VXLAN, UDP, outer IPv4
TCP_IP_HEADERS = 20 + 20                              # MSS = MTU - these (- options in use)


def test_jumbo_campaign_through_the_whole_path(tmp_path: Path, root_unchanged: None) -> None:
    out = tmp_path / "jumbo"
    r = subprocess.run(TB + ["run", "--tunnels", "native,vxlan", "--workloads", "stream",
                             "--mtu", "1500,9000", "--duration", "2", "--warmup", "0",
                             "--repeats", "1", "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["failed_cases"] == []
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    assert sorted((d["case"]["tunnel"]["kind"], d["case"]["mtu"]) for d in docs) == [
        ("native", 1500), ("native", 9000), ("vxlan", 1500), ("vxlan", 9000)]
    for d in docs:
        kind, mtu = d["case"]["tunnel"]["kind"], d["case"]["mtu"]
        inner = mtu - OVERHEAD[kind]
        assert d["status"] == "ok", d["error"]
        assert d["testbed"]["underlay_mtu"] == mtu
        assert (d["tunnel"]["mtu"], d["tunnel"]["overhead"]) == (inner, OVERHEAD[kind])
        # the DF probes: a packet of the tunnel MTU crossed the path unfragmented (over vxlan
        # its outer packet filled the underlay MTU), one byte more was refused
        probe = d["path_mtu"]
        assert probe["family"] == 4 and probe["mtu"] == inner and probe["verified"] is True
        at = probe["at_mtu"]
        assert (at["size"], at["passed"]) == (inner, True) and at["rtt_ms"] > 0
        above = probe["above_mtu"]
        assert above["size"] == inner + 1 and above["passed"] is False
        # it waited a few of the first probe's RTTs, not ping's whole second
        assert above["wait_s"] == pathmtu.above_wait(at["rtt_ms"])   # the wait follows the RTT (no latency bound)
        assert f"mtu={inner}" in above["reply"].replace(" ", ""), above["reply"]
        assert not [n for n in d["notes"] if "DF packet" in n], d["notes"]
        # the stream's TCP segments follow the tunnel MTU (timestamps take 12 B of options)
        mss = d["raw"]["iperf3"]["mss"]
        assert inner - TCP_IP_HEADERS - 12 <= mss <= inner - TCP_IP_HEADERS, (kind, mtu, mss)
        assert d["metrics"]["throughput"]["value"] > 0
    written = (out / "report" / "index.html").read_text()   # before build() rewrites it
    rep = build.build(out)
    jumbo = check_jumbo(out, rep)
    # the report `tunbench run` wrote states the same take-away
    assert html.escape(jumbo.text) in written
