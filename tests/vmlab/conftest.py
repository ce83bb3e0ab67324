"""Guest-side test tier: these tests run INSIDE the VM lab guest (a full Debian kernel).

On the host they are not collected (the host kernel lacks Geneve, GRE, WireGuard...): the host
runs them through tests/vmlab_bridge, which boots the VM once and reports each guest test as
one host test. TUNBENCH_IN_VMLAB=1 is set by the guest runner; TUNBENCH_VMLAB_COLLECT=1 lets
the bridge list them on the host without running them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tunbench import proc

IN_GUEST = os.environ.get("TUNBENCH_IN_VMLAB") == "1"
LISTING = os.environ.get("TUNBENCH_VMLAB_COLLECT") == "1"

if not (IN_GUEST or LISTING):
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header() -> str | None:
    if IN_GUEST or LISTING:
        return None
    return "tests/vmlab runs only inside the VM lab; on the host run tests/vmlab_bridge"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vmlab: runs in the full-kernel VM lab (qemu)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/vmlab/" in item.nodeid:
            item.add_marker(pytest.mark.vmlab)


@dataclass(frozen=True)
class NsPair:
    """Two namespaces joined by a veth pair: a (10.200.0.1) <-> b (10.200.0.2)."""

    rid: str
    a: str
    b: str
    ip_a: str = "10.200.0.1"
    ip_b: str = "10.200.0.2"

    def name(self, suffix: str) -> str:
        """A device name with the prefix and run id, within IFNAMSIZ."""
        n = f"tb{self.rid}{suffix}"
        assert len(n) <= 15, n
        return n


@pytest.fixture
def nspair() -> Iterator[NsPair]:
    rid = secrets.token_hex(3)
    pair = NsPair(rid, f"tb-{rid}-a", f"tb-{rid}-b")
    created: list[str] = []
    try:
        for ns in (pair.a, pair.b):
            proc.run(["ip", "netns", "add", ns])
            created.append(ns)
            proc.run(["ip", "link", "set", "lo", "up"], netns=ns)
        va, vb = pair.name("va"), pair.name("vb")
        proc.run(["ip", "link", "add", va, "netns", pair.a, "type", "veth",
                  "peer", "name", vb, "netns", pair.b])
        for ns, dev, ip in ((pair.a, va, pair.ip_a), (pair.b, vb, pair.ip_b)):
            proc.run(["ip", "addr", "add", f"{ip}/24", "dev", dev], netns=ns)
            proc.run(["ip", "link", "set", dev, "up"], netns=ns)
        yield pair
    finally:
        for ns in reversed(created):
            proc.run(["ip", "netns", "del", ns], check=False)
