"""Fixtures for the remote tier: sshd "hosts" in namespaces (see sshhosts.py), always removed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import SshHosts, hosts_for

from tunbench.remote.transport import Connection
from tunbench.testbed import names, netlink
from tunbench.testbed.ledger import Ledger

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with hosts_for(Path(tmp_path_factory.mktemp("sshhosts")) / "h", count=2) as h:
        yield h
        for name in h.hosts:        # nothing left on any host, seen the only way: over SSH
            with Connection.open(name, options=h.options(), name="check") as c:
                left_run = c.run(["find", "/run/tunbench", "-mindepth", "1"],
                                 check=False).stdout
                assert left_run == "", f"left under /run/tunbench on {name}: {left_run}"


@pytest.fixture
def second_link(hosts: SshHosts) -> Iterator[tuple[str, str]]:
    """A second link between the two hosts, for an underlay apart from the SSH path (the
    test's own setup, inside the host namespaces it created)."""
    rid = names.new_run_id({hosts.run_id})
    u1, u2 = names.link_name(rid, "u1"), names.link_name(rid, "u2")
    h1, h2 = hosts.hosts["h1"].netns, hosts.hosts["h2"].netns
    with Ledger(rid, journal=False) as ledger:
        netlink.add_veth(u1, h1, u2, h2)
        ledger.link(u1, h1)
        for ns, ifn, addr in ((h1, u1, "192.0.2.1/24"), (h2, u2, "192.0.2.2/24")):
            netlink.add_addr(ns, ifn, addr)
            netlink.set_link(ns, ifn, state="up")
        yield u1, u2
