"""sshd "hosts" that share this machine: one kernel, one machine id and one filesystem
(no private /run: /run/tunbench and /run/netns there are this machine's own, as for sshd in
containers of one box). tunbench detects it, records the sites as sharing the CPUs, and keeps
each site's working files apart, so every topology on hosts runs as between separate hosts
and leaves nothing: a pair of sites (native+vxlan), a hub with two spokes (native+vxlan) and a
chain router -> wan between two of them; wireguard-go on both sites of the pair (each daemon with its
own control socket in the shared /var/run/wireguard).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts, comms_in, hosts_for

from tunbench import proc, spec
from tunbench.errors import SpecError
from tunbench.remote.agent.journal import ROOT
from tunbench.runner import run_campaign
from tunbench.testbed import netlink

pytestmark = [pytest.mark.netns, pytest.mark.correctness]

AGENT_DIR = re.compile(r"^tb-[0-9a-f]{6}-[ab]$")


@pytest.fixture(scope="module")
def shared_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with hosts_for(Path(tmp_path_factory.mktemp("sharedhosts")) / "h", count=3,
                   tools=("ssh", "sshd", "ssh-keygen"), private_run=False) as h:
        yield h


def _wg_sockets() -> set[str]:
    d = Path("/var/run/wireguard")
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def _run_entries() -> set[str]:
    return {p.name for p in Path(ROOT).iterdir()} if Path(ROOT).is_dir() else set()


def _assert_nothing_left(hosts: SshHosts, cases: list[dict[str, Any]],
                         before: set[str]) -> None:
    """No case or agent directory of these cases in this machine's /run/tunbench (shared with
    other runs: only new entries count), no namespace of theirs in its /run/netns, no process
    but sshd in any host, no link but the fixture's in any host's namespace."""
    rids = {c["case"]["run_id"] for c in cases}
    new = _run_entries() - before
    assert not [n for n in new if AGENT_DIR.match(n) or n.split("-")[0] in rids], new
    left_ns = [n for n in netlink.list_netns() if n.split("-")[1:2] and n.split("-")[1] in rids]
    assert not left_ns, left_ns
    for h in hosts.hosts.values():
        comms = comms_in(h.netns)
        assert comms <= {"sshd"}, comms
        links = [ln.split(":")[1].strip().split("@")[0] for ln in proc.run(
            ["ip", "-n", h.netns, "-o", "link"], timeout=10).stdout.splitlines()]
        assert all(n == "lo" or n.startswith(f"tb{hosts.run_id}") for n in links), links


def test_sites_on_one_machine_run_apart_and_record_shared_cpus(shared_hosts: SshHosts,
                                                               tmp_path: Path) -> None:
    hosts = shared_hosts
    before = _run_entries()
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "native"}, {"kind": "vxlan"},
                       {"kind": "wireguard", "impl": "go"}],
            "workload": [{"name": "stream"}],
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}}
    wg_before = _wg_sockets()
    cases = run_campaign(spec.build(data, "test"), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok", "ok", "ok"], [c.get("error") for c in cases]
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
    # wireguard-go on both sites of one machine: one daemon per site, each with its own
    # control socket in the shared /var/run/wireguard (the interface names carry the site)
    wg = next(c for c in cases if c["case"]["tunnel"]["kind"] == "wireguard")
    assert wg["datapath_counters"]["delta"]["b"]["rx_bytes"] > 1_000_000
    assert _wg_sockets() == wg_before      # both sites' sockets went with their daemons
    _assert_nothing_left(hosts, cases, before)


def test_hub_on_one_machine_records_shared_cpus(shared_hosts: SshHosts,
                                                tmp_path: Path) -> None:
    """A hub and two spokes, three "hosts" of this machine sharing its /run: each site's case
    directory its own, the record says all three share the CPUs (per site too)."""
    hosts = shared_hosts
    sites = {"hub": "h1", "s1": "h2", "s2": "h3"}
    before = _run_entries()
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "testbed": {"kind": "hub"}, "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}],
            "sites": {"ssh_config": str(hosts.ssh_config), **sites}}
    cases = run_campaign(spec.build(data, "test"), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok", "ok"], [
        (c.get("error"), c.get("error_log")) for c in cases]
    for c in cases:
        tb = c["testbed"]
        assert tb["kind"] == "hub" and tb["on"] == "hosts"
        assert tb["shared_by_sites"] is True
        (group,) = tb["shared_machine"]
        assert sorted(group["sites"]) == sorted(sites)
        assert {k: group[k] for k in ("boot_id", "machine_id", "filesystem")} == {
            "boot_id": True, "machine_id": True, "filesystem": True}
        for name in sites:
            assert tb["sites"][name]["shared_by_sites"] is True
            assert sorted(tb["sites"][name]["shares_cpus_with"]) == sorted(set(sites) - {name})
        assert c["hub"]["one_mbps"] > 0 and all(x > 0 for x in c["hub"]["per_spoke_mbps"])
    vx = next(c for c in cases if c["case"]["tunnel"]["kind"] == "vxlan")
    rx = vx["datapath_counters"]["after"]["spoke_rx_packets"]
    assert rx["s1"] > 0 and rx["s2"] > 0, rx
    _assert_nothing_left(hosts, cases, before)


def test_chain_between_hosts_on_one_machine(shared_hosts: SshHosts, tmp_path: Path) -> None:
    """router -> wan between two "hosts" of this machine: the sites' and functions' namespaces
    in one /run/netns, each end's case directory its own in one /run/tunbench; the chain
    carries a stream through the WAN's carrier and the record says the ends share the CPUs."""
    hosts = shared_hosts
    before = _run_entries()
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}],
            "chain": {"path": ["router", "wan"], "wan": {"kind": "wan", "rate": "50mbit"}},
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}}
    cases = run_campaign(spec.build(data, "test"), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok", "ok"], [
        (c.get("error"), c.get("error_log")) for c in cases]
    for c in cases:
        tb = c["testbed"]
        assert tb["kind"] == "hosts-chain" and tb["shares_cpus"] is True
        assert tb["shared_machine"] == {"boot_id": True, "machine_id": True,
                                        "filesystem": True}
        assert tb["sites"]["a"]["host"] == "h1" and tb["sites"]["b"]["host"] == "h2"
        assert {h["name"]: h["host"] for h in tb["chain"]["hops"]} == {"router1": "h1",
                                                                        "wan": "h1"}
        cpu = c["cpu"]
        assert cpu["shared_by_sites"] is True and set(cpu["sites"]) == {"a", "b"}
        assert all(cpu["sites"][s]["shared_by_sites"] is True for s in ("a", "b"))
        assert c["metrics"]["throughput"]["value"] > 0
        wan = {r["place"]: r for r in c["chain"]["drops"]}["wan"]
        assert wan["tx_packets"] > 0, c["chain"]["drops"]
    _assert_nothing_left(hosts, cases, before)


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
