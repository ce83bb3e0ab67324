"""The lab itself: a full kernel, no path to the outside, a read-only tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.correctness


def test_guest_has_no_physical_network_device() -> None:
    # -nic none: only virtual devices (lo, and gre0/tunl0/... made by the tunnel modules).
    physical = [d.name for d in Path("/sys/class/net").iterdir() if (d / "device").exists()]
    assert physical == []


def test_tunnel_modules_loaded() -> None:
    for mod in ("geneve", "ip_gre", "wireguard", "esp4", "chacha20poly1305", "sch_netem",
                "openvswitch", "vport_vxlan"):
        assert Path(f"/sys/module/{mod}").is_dir(), mod


def test_project_tree_is_read_only() -> None:
    assert os.environ.get("TUNBENCH_IN_VMLAB") == "1" and Path.cwd() == Path("/mnt/tb")
    probe = Path.cwd() / ".tunbench-write-probe"
    try:
        probe.write_text("x")
    except OSError:
        return
    probe.unlink()
    raise AssertionError(f"{Path.cwd()} is writable in the guest")
