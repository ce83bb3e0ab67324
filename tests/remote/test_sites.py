"""Campaigns between two sshd "hosts" (namespaces each running a real sshd): tunbench in the
root namespace drives them only over SSH (`[sites]`), through the agent. Tunnels come up
between the hosts, traffic runs, CPU is sampled on each site apart, and nothing is left on
either host (the `hosts` fixture checks /run/tunbench on each, over SSH, at the end)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts

from tunbench import proc, spec
from tunbench.errors import SpecError, TunbenchError, UnavailableError
from tunbench.remote.transport import Connection
from tunbench.runner import run_campaign
from tunbench.workloads import loadgen

pytestmark = pytest.mark.netns


def experiment(hosts: SshHosts, tunnels: list[str], workloads: list[Any],
               **exp: Any) -> spec.Experiment:
    data = {"experiment": {"duration": 2, "warmup": 0, "repeats": 1, **exp},
            "tunnel": [{"kind": k} for k in tunnels],
            "workload": [w if isinstance(w, dict) else {"name": w} for w in workloads],
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}}
    return spec.build(data, "test")


def ip_links(hosts: SshHosts, name: str) -> list[str]:
    with Connection.open(name, options=hosts.options(), name="check") as c:
        return c.run(["ip", "-o", "link"]).stdout.split("\n")


def assert_clean(hosts: SshHosts) -> None:
    for name in hosts.hosts:
        with Connection.open(name, options=hosts.options(), name="check") as c:
            assert c.run(["find", "/run/tunbench", "-mindepth", "1"],
                         check=False).stdout == ""
            links = c.run(["ip", "-o", "link"]).stdout
            assert f"tb-" not in links.replace(f"tb{hosts.run_id}", ""), links
        # the test's own look into the host's namespace (the PID namespace is shared with
        # other tests on this machine: only processes inside this "host" count)
        pids = proc.run(["ip", "netns", "pids", hosts.hosts[name].netns]).stdout.split()
        comms = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids
                 if Path(f"/proc/{p}/comm").exists()}
        for daemon in ("iperf3", "sockperf", "wireguard-go", "ovs-vswitchd", "ovsdb-server"):
            assert daemon not in comms, f"{daemon} left running on {name}"


def test_native_stream_latency_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    exp = experiment(hosts, ["native", "vxlan"], ["stream", "latency", "ping"])
    out = run_campaign(exp, tmp_path / "r")
    cases = out.store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * 6, [c.get("error") for c in cases]
    for c in cases:
        tb = c["testbed"]
        assert tb["kind"] == "hosts" and tb["shares_cpus"] is False
        assert tb["sites"]["a"]["host"] == "h1" and tb["sites"]["b"]["host"] == "h2"
        assert tb["sites"]["a"]["underlay4"] == hosts.hosts["h1"].addr
        assert abs(tb["clock"]["offset_b_minus_a_ms"]) < 50   # one kernel clock here
        cpu = c["cpu"]
        assert cpu["shared_by_sites"] is False and set(cpu["sites"]) == {"a", "b"}
        assert cpu["sites"]["b"]["ticks"] >= 1
        assert "cpu_busy_a" in c["metrics"] and "cpu_busy_b" in c["metrics"]
    stream = {c["case"]["tunnel"]["kind"]: c for c in cases
              if c["case"]["workload"]["name"] == "stream"}
    assert stream["native"]["metrics"]["throughput"]["value"] > 50
    assert stream["vxlan"]["metrics"]["throughput"]["value"] > 50
    # the vxlan counters prove the traffic crossed the vxlan device on both hosts
    assert stream["vxlan"]["datapath_counters"]["delta"]["b"]["rx_bytes"] > 1_000_000
    assert_clean(hosts)


def test_wireguard_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    exp = experiment(hosts, ["wireguard"], ["stream"])
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
    c = cases[0]
    assert c["metrics"]["throughput"]["value"] > 10
    assert c["datapath_counters"]["delta"]["b"]["wg_rx_bytes"] > 100_000
    assert_clean(hosts)


@pytest.mark.skipif(loadgen.find_binary() is None,
                    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})")
def test_loss_search_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """The load generator is copied into each host's case directory (the hosts have none on
    PATH), loss is counted with sockets there (the drop filter is local-only), and the copies
    go with the case directory."""
    exp = experiment(hosts, ["vxlan"], [{"name": "loss-search", "method": "rfc2544",
                                         "sizes": ["361"], "max_rate_pps": 20000,
                                         "resolution_pct": 20, "latency_at_pct": []}],
                     duration=1)
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
    c = cases[0]
    copied = c["testbed"]["loadgen_copied_to"]
    assert set(copied) == {"a", "b"} and all(p.startswith("/run/tunbench/") for p in
                                             copied.values())
    assert c["raw"]["receiver"]["mode"] == "socket"
    assert c["metrics"], c
    assert c["cpu"]["shared_by_sites"] is False
    assert_clean(hosts)
