"""The CLI end to end: a real campaign, its files, --json, bad input, SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tunbench.results.model import FORMAT_VERSION
from tunbench.testbed import names, netlink

pytestmark = pytest.mark.correctness

TB = [sys.executable, "-m", "tunbench"]


def ours() -> set[str]:
    return {n for n in netlink.list_netns() if names.is_ours_netns(n)}


def test_run_json_and_result_folder(tmp_path: Path, root_unchanged: None) -> None:
    out = tmp_path / "camp"
    r = subprocess.run(TB + ["run", "--duration", "2", "--warmup", "0", "--repeats", "1",
                             "--out", str(out), "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["format"] == "tunbench-summary" and summary["failed_cases"] == []
    entries = {(e["tunnel"], e["metric"]): e for e in summary["entries"]}
    assert entries[("native", "throughput")]["pct_of_native"] == pytest.approx(100.0)
    vx = entries[("vxlan", "throughput")]
    assert vx["unit"] == "Mbit/s" and vx["n"] == 1 and vx["pct_of_native"] > 0
    # the decision summary rides along: one row per method, vxlan's single run untested
    decision = summary["decision"]
    assert decision["format"] == "tunbench-advice"
    rows = {r["method"]: r for r in decision["summary"]}
    assert rows["native"]["reference"] and rows["vxlan"]["mtu_left"] == 1450
    assert rows["vxlan"]["share_single"]["mean"] == pytest.approx(vx["pct_of_native"])
    assert rows["vxlan"]["share_single"]["decision"] == "untested"
    assert rows["vxlan"]["share_single"]["ci_low"] is None
    assert [r["method"] for r in decision["ranking"]] == ["vxlan"]
    index = json.loads((out / "index.json").read_text())
    assert index["format_version"] == FORMAT_VERSION and index["state"] == "complete"
    assert index["env"]["kernel"] and index["env"]["tools"]["iperf3"]
    cases = sorted((out / "cases").glob("*.json"))
    assert len(cases) == 2
    doc = json.loads(cases[1].read_text())
    assert doc["status"] == "ok" and doc["case"]["tunnel"]["kind"] == "vxlan"
    assert doc["tunnel"]["mtu"] == 1450 and doc["tunnel"]["overhead"] == 50
    assert len(doc["series"]["throughput"]) == 2
    assert doc["cpu"]["shared_by_sites"] is True and doc["cpu"]["samples"]
    assert doc["datapath_counters"]["delta"]["b"]["rx_bytes"] > 0
    assert any("/tb" in k for k in doc["offloads"]["before"])
    assert doc["testbed"]["underlay_mtu"] == 1500


def test_bad_input_one_line_nothing_changed(tmp_path: Path) -> None:
    # A private ledger directory: had the run created anything, its journal would be here.
    state = tmp_path / "state"
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(state)}
    for args, code, needle in (
        (["--tunnels", "vxlan,bogus"], 2, "unknown tunnel kind 'bogus'"),
        (["--mtu", "12"], 2, "is not an MTU"),
        (["--rate", "fast"], 2, "--rate 'fast' is not a rate"),
        (["--experiment", str(tmp_path / "none.toml")], 2, "does not exist"),
    ):
        r = subprocess.run(TB + ["run", "--out", str(tmp_path / "x"), *args],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == code, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tunbench: ") and needle in lines[0]
        assert "Traceback" not in r.stderr
    assert not state.exists() or not any(state.iterdir())
    assert not (tmp_path / "x").exists()


def test_not_root_refused_before_anything(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        *TB, "run", "--out", str(tmp_path / "y")],
                       capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert r.returncode == 3, r.stderr
    assert "root" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_run_leaves_nothing(tmp_path: Path, root_unchanged: None,
                                       sig: signal.Signals) -> None:
    # The run's ledger journal (in a private state directory) tells its run id, so other
    # tunbench runs on this host at the same time cannot confuse the test.
    state = tmp_path / "state"
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(state)}
    p, rid, pids = _start_and_wait_for_traffic(tmp_path, env)
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert f"interrupted by {sig.name}" in err
    assert f"continue it with `tunbench run --resume {tmp_path / 'c'}`" in err
    assert not [n for n in netlink.list_netns() if f"-{rid}-" in n]
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "iperf3" not in \
            Path(f"/proc/{pid}/cmdline").read_text()
    assert not (state / f"{rid}.jsonl").exists()
    assert not (state / rid).exists()
    index = json.loads((tmp_path / "c" / "index.json").read_text())
    assert index["state"] == "interrupted"


def _start_and_wait_for_traffic(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, list[str]]:
    state = Path(env["TUNBENCH_STATE_DIR"])
    p = subprocess.Popen(TB + ["run", "--duration", "20", "--repeats", "1",
                               "--out", str(tmp_path / "c")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journals: list[Path] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not journals:
        journals = list(state.glob("*.jsonl")) if state.exists() else []
        time.sleep(0.05)
    assert journals, "the run never created its testbed"
    rid = journals[0].stem
    pids: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not pids:
        pids = subprocess.run(["ip", "netns", "pids", f"tb-{rid}-a"], capture_output=True,
                              text=True).stdout.split()
        time.sleep(0.05)
    assert pids, "no traffic process started"
    return p, rid, pids


def test_cleanup_after_sigkill_removes_only_the_dead_run(tmp_path: Path,
                                                         root_unchanged: None) -> None:
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(tmp_path / "state")}
    # a live run of someone else (this test process owns it) must survive the cleanup
    from tunbench.testbed import local
    from tunbench.testbed.ledger import Ledger
    live_rid = names.new_run_id()
    live = Ledger(live_rid)
    try:
        local.build(live_rid, live)
        p, rid, pids = _start_and_wait_for_traffic(tmp_path, env)
        p.kill()  # SIGKILL: no chance to clean up
        p.communicate(timeout=10)
        assert [n for n in netlink.list_netns() if f"-{rid}-" in n], "nothing was left to clean"
        r = subprocess.run(TB + ["cleanup"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"tb-{rid}-a" in r.stdout
        assert not [n for n in netlink.list_netns() if f"-{rid}-" in n]
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "iperf3" not in \
                Path(f"/proc/{pid}/cmdline").read_text()
        assert f"tb-{live_rid}-a" in netlink.list_netns(), "cleanup removed a live run"
        again = subprocess.run(TB + ["cleanup"], env=env, capture_output=True, text=True,
                               timeout=60)
        assert f"-{rid}-" not in again.stdout
    finally:
        live.close()


def test_missing_tool_named_before_anything(tmp_path: Path) -> None:
    """A host without iperf3 (PATH without /usr/bin, where it lives): one line naming the
    tool and the package, exit 3, nothing created."""
    state = tmp_path / "state"
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(state), "PATH": "/usr/sbin:/sbin"}
    r = subprocess.run(TB + ["run", "--out", str(tmp_path / "m")], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 3, r.stderr
    assert "tool iperf3: not installed" in r.stderr and "apt-get install iperf3" in r.stderr
    assert "Traceback" not in r.stderr
    assert not state.exists() or not any(state.iterdir())
    assert not (tmp_path / "m").exists()
