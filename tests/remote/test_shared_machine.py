"""Two sshd "hosts" that share this machine: one kernel, one machine id and one filesystem
(no private /run: /run/tunbench there is this machine's own, as for sshd in containers of one
box). tunbench detects it, records the sites as sharing the CPUs, and keeps each site's
working files apart, so the campaign runs as between separate hosts and leaves nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import SshHosts, build, comms_in

from tunbench import proc, spec
from tunbench.errors import SpecError
from tunbench.remote.agent.journal import ROOT
from tunbench.runner import run_campaign
from tunbench.testbed import netlink

pytestmark = [pytest.mark.netns, pytest.mark.correctness]

AGENT_DIR = re.compile(r"^tb-[0-9a-f]{6}-[ab]$")


@pytest.fixture(scope="module")
def shared_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    for tool in ("ssh", "sshd", "ssh-keygen"):
        if proc.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    h = build(Path(tmp_path_factory.mktemp("sharedhosts")) / "h", count=2, private_run=False)
    rid = h.run_id
    try:
        yield h
    finally:
        errors = h.close()
        assert not errors, errors
        assert not [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
        assert not [n for n in netlink.link_names(None) if n.startswith(f"tb{rid}")]


def _run_entries() -> set[str]:
    return {p.name for p in Path(ROOT).iterdir()} if Path(ROOT).is_dir() else set()


def test_sites_on_one_machine_run_apart_and_record_shared_cpus(shared_hosts: SshHosts,
                                                               tmp_path: Path) -> None:
    hosts = shared_hosts
    before = _run_entries()
    data = {"experiment": {"duration": 2, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}],
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}}
    cases = run_campaign(spec.build(data, "test"), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok", "ok"], [c.get("error") for c in cases]
    for c in cases:
        tb = c["testbed"]
        assert tb["kind"] == "hosts" and tb["shares_cpus"] is True
        assert tb["shared_machine"] == {"boot_id": True, "machine_id": True,
                                        "filesystem": True}
        cpu = c["cpu"]
        assert cpu["shared_by_sites"] is True and set(cpu["sites"]) == {"a", "b"}
        assert all(cpu["sites"][s]["shared_by_sites"] is True for s in ("a", "b"))
        assert c["metrics"]["throughput"]["value"] > 0
    vx = next(c for c in cases if c["case"]["tunnel"]["kind"] == "vxlan")
    assert vx["datapath_counters"]["delta"]["b"]["rx_bytes"] > 1_000_000
    # nothing left: no case or agent directory of this campaign in this machine's
    # /run/tunbench (shared with other runs: only new entries count), no process, no link
    rids = {c["case"]["run_id"] for c in cases}
    new = _run_entries() - before
    assert not [n for n in new if AGENT_DIR.match(n) or n.split("-")[0] in rids], new
    for h in hosts.hosts.values():
        comms = comms_in(h.netns)
        assert comms <= {"sshd"}, comms
        links = [ln.split(":")[1].strip().split("@")[0] for ln in proc.run(
            ["ip", "-n", h.netns, "-o", "link"], timeout=10).stdout.splitlines()]
        assert all(n == "lo" or n.startswith(f"tb{hosts.run_id}") for n in links), links


def test_one_host_twice_is_refused_before_any_change(shared_hosts: SshHosts,
                                                     tmp_path: Path) -> None:
    """Both sites are one sshd: one network namespace, where no tunnel can run."""
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "native"}], "workload": [{"name": "ping"}],
            "sites": {"ssh_config": str(shared_hosts.ssh_config), "a": "h1", "b": "h1-port"}}
    with pytest.raises(SpecError) as err:
        run_campaign(spec.build(data, "test"), tmp_path / "r")
    line = err.value.one_line()
    assert "sites a (h1) and b (h1-port) are one machine and one network namespace" in line
    assert "\n" not in line
