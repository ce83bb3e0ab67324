"""Test tiers: unit/ (no root), netns/ (root: real namespaces and traffic), vmlab (full kernel).

Tests that cannot run here are skipped with the specific reason, and pytest's -ra summary lists
every skip with it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
# Campaigns run by tests are not recorded in the user's results store; the store's own tests
# name a temporary one (--db or TUNBENCH_DB).
os.environ.setdefault("TUNBENCH_DB", "off")


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces (run make test as root)"
    if not shutil.which("ip"):
        return "iproute2 is not installed (apt-get install iproute2)"
    if not os.path.exists("/proc/self/ns/net"):
        return "kernel without network namespaces"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _netns_unavailable()
    for item in items:
        if "netns" in str(item.path.parent.name) or item.get_closest_marker("netns"):
            item.add_marker(pytest.mark.netns)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def data_dir() -> Path:
    return DATA
