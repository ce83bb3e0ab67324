"""Fixtures for root tests: a real two-namespace testbed, always torn down."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator

import pytest
from testbeds import fresh_testbed

from tunbench.testbed import names
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


# the remote tier's one root-namespace object, its hosts' management link (tests/remote/
# sshhosts.py: tb<run>m0, with its address and routes), which comes and goes with the remote
# tests that make test runs beside the netns tests marked `beside`: not this test's change
REMOTE_MGMT = re.compile(rf"^{names.PREFIX}[0-9a-f]{{{names.RUN_ID_LEN}}}m0$")


def _not_remote_mgmt(objs: object) -> object:
    """The entries of an `ip -j` list whose device is not a remote-tier management link."""
    if not isinstance(objs, list):
        return objs
    return [o for o in objs if not (isinstance(o, dict) and any(
        REMOTE_MGMT.match(str(o.get(k, ""))) for k in ("ifname", "dev")))]


def root_snapshot() -> dict[str, object]:
    """The root namespace's links, addresses, routes and the sysctls tunbench could touch
    (without the remote tier's management links: REMOTE_MGMT)."""
    snap: dict[str, object] = {
        "links": _strip(_not_remote_mgmt(_ip_json("link", "show"))),
        "addrs": _strip(_not_remote_mgmt(_ip_json("addr", "show"))),
        "routes4": _not_remote_mgmt(_ip_json("-4", "route", "show", "table", "all")),
        "routes6": _strip(_not_remote_mgmt(_ip_json("-6", "route", "show", "table", "all"))),
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
