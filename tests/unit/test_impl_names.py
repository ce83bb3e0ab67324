"""The report names implementations and labels encryption from what cases recorded.

tests/data/campaigns/v1-impls was recorded by a real `tunbench run` before cases recorded
their tunnel's implementation and encryption (format 1): native, wireguard, ssh-tun,
ssh-forward, ovs-vxlan and ipsec with automatic implementation choice, 1 s stream each. The
fallback must name what ran from what those files did record; a newer case's recorded values
win.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tunbench.report import console, data, export
from tunbench.results import reader, records
from tunbench.results.upgrade import v1_to_v2

V1 = Path(__file__).resolve().parents[1] / "data" / "campaigns" / "v1-impls"


def _raw() -> list[dict]:
    """The v1 files as recorded (the golden input, never rewritten)."""
    return [json.loads(p.read_text()) for p in sorted((V1 / "cases").glob("*.json"))]


def _cases() -> list[dict]:
    """Through the one reader: upgraded to the current format."""
    return reader.read_campaign(V1).cases


def test_old_files_get_display_names_and_encryption() -> None:
    camp = data.load(V1)
    assert camp.tunnels() == ["native", "wireguard (go)", "ssh-tun", "ssh-forward",
                              "ovs-vxlan (netdev)", "ipsec (libipsec)"]
    assert [t for t in camp.tunnels() if camp.encrypts(t)] == [
        "wireguard (go)", "ssh-tun", "ssh-forward", "ipsec (libipsec)"]
    assert {r.tunnel for r in camp.rows if r.metric == "throughput"} == set(camp.tunnels())


def test_export_rows_carry_display_impl_and_encrypts() -> None:
    rows = export.tidy_rows(data.load(V1).cases)
    got = {(r["tunnel"], r["kind"], r["impl"], r["encrypts"]) for r in rows}
    assert ("wireguard (go)", "wireguard", "go", True) in got
    assert ("ovs-vxlan (netdev)", "ovs-vxlan", "netdev", False) in got
    assert ("ssh-tun", "ssh-tun", None, True) in got
    assert ("native", "native", None, False) in got
    header = export.to_csv(rows).splitlines()[0]
    assert header.endswith(",status,impl,encrypts")


def test_console_summary_names_the_implementation(capsys: pytest.CaptureFixture[str]) -> None:
    console.print_summary(_cases(), str(V1))
    out = capsys.readouterr().out
    assert "wireguard (go)" in out and "ipsec (libipsec)" in out and "ovs-vxlan (netdev)" in out


def test_recorded_values_win_over_the_fallback() -> None:
    doc = next(d for d in _raw() if d["case"]["tunnel"]["kind"] == "wireguard")
    doc["case"]["tunnel"].update(impl="kernel", encrypts=True, display="wireguard (kernel)")
    assert records.identity(v1_to_v2(doc)["case"]["tunnel"]) == {
        "impl": "kernel", "encrypts": True, "display": "wireguard (kernel)"}


def test_one_label_keeps_one_name_when_an_old_failed_case_recorded_no_impl() -> None:
    raw = next(d for d in _raw() if d["case"]["tunnel"]["kind"] == "wireguard")
    failed = copy.deepcopy(raw)
    failed.update(status="failed", tunnel=None, metrics={}, error="tunnel did not come up")
    failed["case"]["id"] = "0006-wireguard-stream-mtu1500-r2"
    failed = v1_to_v2(failed)
    ok = v1_to_v2(raw)
    # alone: nothing to go on
    assert records.identity(failed["case"]["tunnel"])["display"] == "wireguard"
    named = records.name_tunnels([ok, failed])
    assert [d["case"]["tunnel"]["label"] for d in named] == ["wireguard (go)"] * 2
    assert [d["case"]["tunnel"]["given_label"] for d in named] == ["wireguard"] * 2
    assert ok["case"]["tunnel"]["label"] == "wireguard"              # input left as it was
    assert records.name_tunnels(named) == named                        # idempotent


def test_custom_label_keeps_the_users_name() -> None:
    doc = next(d for d in _raw() if d["case"]["tunnel"]["kind"] == "ipsec")
    doc["case"]["tunnel"]["label"] = "esp-fast"
    assert records.identity(v1_to_v2(doc)["case"]["tunnel"])["display"] == "esp-fast (libipsec)"
