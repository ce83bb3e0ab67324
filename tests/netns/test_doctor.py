"""tunbench doctor: every registered kind, read-only, runs without root; --probe cleans up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tunbench import tunnels
from tunbench.testbed import netlink

pytestmark = pytest.mark.correctness

# Other runs create namespaces on this host concurrently, so "nothing changed" is proven by
# the ledger: doctor gets a state directory of its own; any object it created would have been
# journaled there (the directory is created by the first ledger entry).


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TUNBENCH_STATE_DIR": str(state)}


def test_doctor_json_as_nobody_changes_nothing(tmp_path: Path, root_unchanged: None) -> None:
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed: cannot drop to nobody")
    state = tmp_path / "state"
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                        sys.executable, "-m", "tunbench", "doctor", "--json"],
                       capture_output=True, text=True, timeout=120, env=_env(state))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["root"] is False and doc["euid"] != 0
    assert set(doc["tunnels"]) == set(tunnels.registry())
    for kind, entry in doc["tunnels"].items():
        assert isinstance(entry["available"], bool), kind
        assert isinstance(entry["reasons"], list), kind
        if not entry["available"] and not entry.get("variants"):
            assert entry["reasons"], f"{kind} unavailable without a reason"
    assert doc["kernel"]["release"] == os.uname().release
    assert "ethtool_k" not in doc["offloads"]     # not probed by default
    assert not state.exists(), "doctor journaled (created) something"


def test_doctor_probe_reports_veth_offloads_and_tears_down(tmp_path: Path,
                                                           root_unchanged: None) -> None:
    state = tmp_path / "state"
    r = subprocess.run([sys.executable, "-m", "tunbench", "doctor", "--probe", "--json"],
                       capture_output=True, text=True, timeout=120, env=_env(state))
    assert r.returncode == 0, r.stderr
    off = json.loads(r.stdout)["offloads"]
    assert off["ethtool_k"]["tx-checksumming"].startswith("on")
    assert "generic-receive-offload" in off["ethtool_k"]
    rid = off["run_id"]
    assert state.is_dir()                          # it did go through the ledger...
    assert list(state.iterdir()) == []             # ...which undid everything
    assert not [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
