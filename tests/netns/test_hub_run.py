"""`tunbench run --testbed hub --spokes 3` end to end with real traffic: vxlan (3 kernel VXLAN
devices on the hub) and ebpf-vxlan (one tbtun attach point with 3 rules), stream 2 s to one
spoke and to all 3 at once; setup time and hub memory recorded, the hub table in the console
and the report, every namespace, pin and state folder gone afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunbench import tunnels
from tunbench.capabilities import root_missing
from tunbench.tbtun import loader
from tunbench.testbed import names, netlink
from tunbench.testbed.ledger import STATE_DIR

pytestmark = pytest.mark.correctness

TB = [sys.executable, "-m", "tunbench"]


def _why_not() -> str | None:
    if root_missing():
        return "needs root"
    drv = tunnels.get("ebpf-vxlan")
    missing = drv.requirements(drv.default_params())
    return missing[0].one_line() if missing else None


def ours() -> set[str]:
    return {n for n in netlink.list_netns() if names.is_ours_netns(n)}


@pytest.mark.skipif(_why_not() is not None, reason=f"tbtun hub run: {_why_not()}")
def test_hub_campaign_vxlan_and_ebpf_vxlan_to_one_and_all_spokes(
        tmp_path: Path, root_unchanged: None) -> None:
    out = tmp_path / "hub"
    r = subprocess.run(TB + ["run", "--testbed", "hub", "--spokes", "3", "--tunnels",
                             "vxlan,ebpf-vxlan", "--duration", "2", "--warmup", "0",
                             "--repeats", "1", "--out", str(out), "--db", "off"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "hub and spokes" in r.stdout and "ebpf-vxlan" in r.stdout, r.stdout
    docs = {d["case"]["tunnel"]["kind"]: d for d in
            (json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json")))}
    assert set(docs) == {"vxlan", "ebpf-vxlan"}
    for kind, d in docs.items():
        assert d["status"] == "ok", d["error"]
        h, m = d["hub"], d["metrics"]
        assert d["testbed"]["kind"] == "hub" and d["testbed"]["spokes"] == 3
        assert h["spokes"] == 3 and h["all_spokes"] == 3 and h["kind"] == kind
        assert h["setup_s"] > 0 and isinstance(h["memory_kb"], int)
        assert h["one_mbps"] > 0 and h["all_mbps"] > 0, h
        assert len(h["per_spoke_mbps"]) == 3 and min(h["per_spoke_mbps"]) > 0, h
        assert m["throughput"]["value"] == h["one_mbps"]
        assert m["throughput_all"]["value"] == h["all_mbps"]
        assert m["hub_setup"]["unit"] == "s" and not m["hub_setup"]["higher_is_better"]
        assert d["raw"]["one"]["sum_received"]["bytes"] > 1_000_000
    assert docs["vxlan"]["hub"]["devices"] == 3
    tb = docs["ebpf-vxlan"]["hub"]
    assert tb["devices"] == 0 and tb["attach_points"] == 1 and tb["rules"] == 3
    assert tb["attach"] == "tc" and tb["created_with"] == "bpftool+tc", tb   # the default
    assert 50 < tb["maps_kb"] < 1024, tb
    # every rule carried traffic (the all-spokes measurement): the hub's counters say so
    ctr = docs["ebpf-vxlan"]["datapath_counters"]["after"]
    assert ctr["rules_with_traffic"] == 3 and ctr["hub"]["encap"] >= 3, ctr
    assert ctr["hub"]["no_rule"] == 0 and ctr["hub"]["decap_error"] == 0, ctr
    # the report carries the hub table
    rep = (out / "report" / "index.html").read_text()
    assert "<h2 id=hub>Hub and spokes</h2>" in rep and "ebpf-vxlan" in rep
    # nothing left: namespaces, pins, state folders of both cases
    for d in docs.values():
        rid = d["case"]["run_id"]
        assert not [n for n in ours() if n.startswith(f"tb-{rid}-")]
        assert not loader.run_dir(rid).exists()
        assert not (STATE_DIR / rid).exists() and not (STATE_DIR / f"{rid}.jsonl").exists()
