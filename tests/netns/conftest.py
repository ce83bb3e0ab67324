"""Fixtures for root tests: a real two-namespace testbed, always torn down."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from testbeds import fresh_testbed

from tunbench.testbed.base import Testbed


@pytest.fixture
def testbed() -> Iterator[Testbed]:
    with fresh_testbed() as tb:
        yield tb


def _ip_json(*args: str) -> object:
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


VOLATILE = {"stats64", "stats", "operstate", "linkmode", "link_type", "flags", "qlen",
            "txqlen", "num_tx_queues", "num_rx_queues", "gso_max_size", "gso_max_segs",
            "valid_life_time", "preferred_life_time"}
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
           "net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad",
           "net/core/rmem_max", "net/core/wmem_max")


def _strip(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def root_snapshot() -> dict[str, object]:
    """The root namespace's links, addresses, routes and the sysctls tunbench could touch."""
    snap: dict[str, object] = {
        "links": _strip(_ip_json("link", "show")),
        "addrs": _strip(_ip_json("addr", "show")),
        "routes4": _ip_json("-4", "route", "show", "table", "all"),
        "routes6": _strip(_ip_json("-6", "route", "show", "table", "all")),
        "rules": _ip_json("rule", "show"),
    }
    for key in SYSCTLS:
        with open(f"/proc/sys/{key}") as f:
            snap[key] = f.read().strip()
    return snap


@pytest.fixture
def root_unchanged() -> Iterator[None]:
    before = root_snapshot()
    yield
    after = root_snapshot()
    assert after == before, "the root namespace changed"
