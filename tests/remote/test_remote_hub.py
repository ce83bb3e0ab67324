"""The hub testbed on hosts over SSH: three sshd "hosts" (sshhosts.py), h1 the hub, h2 and h3
the spokes (`[sites]` hub, s1, s2), driven only over SSH. One campaign runs vxlan (two kernel
VXLAN devices on the hub host) and ebpf-vxlan (one tbtun attach point with two rules and one
route per spoke), stream 1 s to one spoke and to both at once. Traffic must reach each spoke
host (its own VXLAN device's counter, and tbtun's per-rule counters), the record must say
where each site was, and nothing may be left on any host: links, inner addresses and routes,
pins, tc filters, /run/tunbench."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import TOOLS, SshHosts, hosts_for
from test_remote_kinds import runs_here
from test_remote_tbtun import host_bpf_state
from test_sites import assert_clean

from tunbench import proc, spec
from tunbench.errors import UnavailableError
from tunbench.remote.transport import Connection
from tunbench.runner import run_campaign
from tunbench.tbtun import hub as tbhub
from tunbench.testbed import names
from tunbench.testbed.hubhosts import HubHosts
from tunbench.testbed.ledger import Ledger
from tunbench.testbed.topology import SiteSpec

pytestmark = [pytest.mark.netns, pytest.mark.correctness]
TB = [sys.executable, "-m", "tunbench"]
SITES = {"hub": "h1", "s1": "h2", "s2": "h3"}


@pytest.fixture(scope="module")
def hosts3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with hosts_for(Path(tmp_path_factory.mktemp("sshhosts3")) / "h", count=3,
                   tools=(*TOOLS, "iperf3")) as h:
        yield h


def overlay_left(hosts: SshHosts) -> dict[str, str]:
    """Inner (198.19.0.0/16) addresses and routes on each host, asked over SSH."""
    out = {}
    for name in hosts.hosts:
        with Connection.open(name, options=hosts.options(), name="check") as c:
            text = c.run(["ip", "-4", "addr"]).stdout + c.run(["ip", "-4", "route"]).stdout
        out[name] = "\n".join(ln for ln in text.splitlines() if "198.19." in ln)
    return out


def test_hub_campaign_with_spokes_on_hosts(hosts3: SshHosts, tmp_path: Path) -> None:
    runs_here("vxlan")
    runs_here("ebpf-vxlan")
    before = {n: host_bpf_state(hosts3, n) for n in hosts3.hosts}
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                      "testbed": {"kind": "hub"},
                      "tunnel": [{"kind": "vxlan"}, {"kind": "ebpf-vxlan"}],
                      "workload": [{"name": "stream"}],
                      "sites": {"ssh_config": str(hosts3.ssh_config), **SITES}}, "test")
    assert exp.hub is not None and exp.hub.spokes == 2
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * 2, [(c.get("error"), c.get("error_log"))
                                                        for c in cases]
    addr = {n: h.addr for n, h in hosts3.hosts.items()}
    for c in cases:
        tb = c["testbed"]
        assert tb["kind"] == "hub" and tb["on"] == "hosts" and tb["spokes"] == 2
        for site, host in SITES.items():    # where each site was, and its real underlay
            assert tb["sites"][site]["target"] == host, tb["sites"]
            assert tb["sites"][site]["underlay4"] == addr[host], tb["sites"]
        # the spokes share the hub's link: each is its own next hop (its own MAC)
        assert tb["sites"]["s2"]["nexthop4"] == addr["h3"]
        assert tb["hub_underlay4"] == addr["h1"] and tb["underlay_mtu"] == 1500
        # the test hosts are namespaces of this machine (a private /run each): one kernel,
        # so every site shares its CPUs with the others, and says so
        assert tb["shared_by_sites"] is True
        (group,) = tb["shared_machine"]
        assert sorted(group["sites"]) == sorted(SITES) and group["filesystem"] is False
        assert group["boot_id"] is True and group["machine_id"] is True
        for site in SITES:
            assert tb["sites"][site]["shared_by_sites"] is True
            assert sorted(tb["sites"][site]["shares_cpus_with"]) == sorted(set(SITES) - {site})
        h = c["hub"]
        assert h["one_mbps"] > 0 and h["all_mbps"] > 0 and h["all_spokes"] == 2, h
        assert all(x > 0 for x in h["per_spoke_mbps"]) and len(h["per_spoke_mbps"]) == 2, h
        assert c["metrics"]["throughput"]["value"] > 0
        assert c["metrics"]["hub_setup"]["value"] > 0
        rx = c["datapath_counters"]["after"]["spoke_rx_packets"]
        assert rx["s1"] > 0 and rx["s2"] > 0, rx   # each spoke host's own VXLAN device
    vx, eb = (next(c for c in cases if c["case"]["tunnel"]["kind"] == k)
              for k in ("vxlan", "ebpf-vxlan"))
    assert vx["hub"]["devices"] == 2
    assert eb["hub"]["attach_points"] == 1 and eb["hub"]["rules"] == 2
    assert eb["hub"]["routes"] == 2 and eb["hub"]["maps_kb"] > 0
    ctr = eb["datapath_counters"]["after"]
    assert ctr["rules_with_traffic"] == 2 and ctr["hub"]["encap"] > 0, ctr
    assert ctr["hub"]["decap"] > 0 and ctr["hub"].get("no_rule", 0) == 0, ctr
    # nothing left on any host: links (assert_clean), overlay addresses and routes, bpf
    assert_clean(hosts3)
    assert overlay_left(hosts3) == {n: "" for n in hosts3.hosts}
    for name in hosts3.hosts:
        assert host_bpf_state(hosts3, name) == before[name], name


def test_a_hub_that_reaches_no_spoke_is_refused_before_any_change(hosts3: SshHosts,
                                                                  tmp_path: Path) -> None:
    """A spoke's underlay4 the hub has no route to: one line naming the site, nothing made
    (the run's case directory never exists on any host)."""
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                      "testbed": {"kind": "hub"}, "tunnel": [{"kind": "vxlan"}],
                      "workload": [{"name": "stream"}],
                      "sites": {"ssh_config": str(hosts3.ssh_config), "hub": "h1", "s1": "h2",
                                "s2": {"target": "h3", "underlay4": "203.0.113.9"}}}, "test")
    with pytest.raises(UnavailableError) as err:
        run_campaign(exp, tmp_path / "r")
    line = err.value.one_line()
    assert "site s2" in line and "203.0.113.9" in line and "\n" not in line, line
    assert_clean(hosts3)


def test_cleanup_site_removes_a_hub_whose_agents_were_killed(hosts3: SshHosts) -> None:
    """The hub's tbtun (pins, filters, the bridge holding its inner address and the routes
    using it) and the spokes' VXLAN devices, with every agent SIGKILLed: nothing is undone
    from here, each host's journal lets `tunbench cleanup --site` remove all of it."""
    runs_here("ebpf-vxlan")
    before = {n: host_bpf_state(hosts3, n) for n in hosts3.hosts}
    hh = HubHosts({n: SiteSpec(n, t) for n, t in SITES.items()}, hosts3.options())
    hh.open(["ebpf-vxlan"])
    rid = names.new_run_id(set())
    try:
        h = hh.build(rid, Ledger(rid, journal=False))
        tbhub.tbtun(h)
        left = overlay_left(hosts3)
        assert all(left.values()), left     # inner addresses and routes on every host
        assert host_bpf_state(hosts3, "h1")["filters"]
        with Connection.open("h1", options=hosts3.options(), name="killer") as killer:
            for ep in hh.endpoints.values():
                assert ep.agent is not None
                # every "host" is a namespace of this machine: one kill reaches each agent
                killer.run(["kill", "-9", str(ep.agent.hello["pid"])])
    finally:
        hh.close()         # the ledger was never closed: only the hosts' journals know
    for host in hosts3.hosts:
        r = proc.run(TB + ["cleanup", "--site", host, "--ssh-config", str(hosts3.ssh_config)],
                     check=False, timeout=120)
        assert r.returncode == 0, r.stderr
        assert f"link tb{rid}" in r.stdout, r.stdout
    assert overlay_left(hosts3) == {n: "" for n in hosts3.hosts}
    assert_clean(hosts3)
    for name in hosts3.hosts:
        assert host_bpf_state(hosts3, name) == before[name], name


def test_a_case_failing_on_a_spoke_host_is_recorded_and_leaves_nothing(
        hosts3: SshHosts, tmp_path: Path) -> None:
    """Port 5201 taken on h3 (spoke s2) by a listener of this test: the hub's stream to s1
    runs, the all-spokes measurement cannot start s2's iperf3 server, the case fails with that
    reason and s2's own log read through its agent, and teardown leaves nothing on any host."""
    runs_here("ebpf-vxlan")
    squatter = proc.spawn(["iperf3", "-s", "--forceflush", "-p", "5201"],
                          netns=hosts3.hosts["h3"].netns, log_path=tmp_path / "squatter.log",
                          label="squatter")
    try:
        proc.wait_ready(squatter, ready_text="Server listening", timeout=15)
        exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                          "testbed": {"kind": "hub"}, "tunnel": [{"kind": "ebpf-vxlan"}],
                          "workload": [{"name": "stream"}],
                          "sites": {"ssh_config": str(hosts3.ssh_config), **SITES}}, "test")
        (case,) = run_campaign(exp, tmp_path / "r").store.read_cases()
    finally:
        squatter.stop()
    assert case["status"] == "failed", case
    assert "iperf3-s2" in case["error"], case["error"]
    assert "--- s2:iperf3-s2.log" in case["error_log"], case["error_log"]
    assert case["testbed"]["sites"]["s2"]["target"] == "h3"
    assert_clean(hosts3)
    assert overlay_left(hosts3) == {n: "" for n in hosts3.hosts}
    assert not any(host_bpf_state(hosts3, n)["filters"] for n in hosts3.hosts)
