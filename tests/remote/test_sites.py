"""Campaigns between two sshd "hosts" (namespaces each running a real sshd): tunbench in the
root namespace drives them only over SSH (`[sites]`), through the agent. Tunnels come up
between the hosts, traffic runs, CPU is sampled on each site apart, and nothing is left on
either host (the `hosts` fixture checks /run/tunbench on each, over SSH, at the end)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts, comms_in

from tunbench import proc, spec
from tunbench.errors import SpecError, TunbenchError, UnavailableError
from tunbench.remote.transport import Connection
from tunbench.runner import run_campaign
from tunbench.testbed import netlink, topology
from tunbench.workloads import loadgen

pytestmark = [pytest.mark.netns, pytest.mark.correctness]


def experiment(hosts: SshHosts, tunnels: list[str], workloads: list[Any],
               **exp: Any) -> spec.Experiment:
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1, **exp},
            "tunnel": [{"kind": k} for k in tunnels],
            "workload": [w if isinstance(w, dict) else {"name": w} for w in workloads],
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}}
    return spec.build(data, "test")


def ip_links(hosts: SshHosts, name: str) -> list[str]:
    with Connection.open(name, options=hosts.options(), name="check") as c:
        return c.run(["ip", "-o", "link"]).stdout.split("\n")


def assert_clean(hosts: SshHosts, keep: tuple[str, ...] = ()) -> None:
    for name in hosts.hosts:
        with Connection.open(name, options=hosts.options(), name="check") as c:
            assert c.run(["find", "/run/tunbench", "-mindepth", "1"],
                         check=False).stdout == ""
            links = [ln.split(":")[1].strip().split("@")[0]
                     for ln in c.run(["ip", "-o", "link"]).stdout.splitlines()]
            # only the host's loopback and its management link from the fixture
            assert all(n == "lo" or n.startswith(f"tb{hosts.run_id}") or n in keep
                       for n in links), links
        # the test's own look into the host's namespace (the PID namespace is shared with
        # other tests on this machine: only processes inside this "host" count)
        comms = comms_in(hosts.hosts[name].netns)
        for daemon in ("iperf3", "sockperf", "wireguard-go", "ovs-vswitchd", "ovsdb-server"):
            assert daemon not in comms, f"{daemon} left running on {name}"


def test_native_stream_latency_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    # stream and latency (ping on hosts runs in the drop, reconnect and CLI tests below)
    # TCP latency only: UDP's ping-pong between hosts is the same agent path (the two-kernel
    # tier, tests/vmlab_sites, runs both), and each protocol is ~5 s of this tier per case
    exp = experiment(hosts, ["native", "vxlan"], ["stream", {"name": "latency",
                                                             "protocol": "tcp"}])
    out = run_campaign(exp, tmp_path / "r")
    cases = out.store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * 4, [c.get("error") for c in cases]
    for c in cases:
        tb = c["testbed"]
        # the test hosts are namespaces of this machine: one kernel, so one set of CPUs (a
        # private /run each: the other's files are not seen)
        assert tb["kind"] == "hosts" and tb["shares_cpus"] is True
        assert tb["shared_machine"] == {"boot_id": True, "machine_id": True,
                                        "filesystem": False}
        assert tb["sites"]["a"]["host"] == "h1" and tb["sites"]["b"]["host"] == "h2"
        assert tb["sites"]["a"]["underlay4"] == hosts.hosts["h1"].addr
        clock = tb["clock"]   # one kernel clock here: 0 within the recorded error (rtt/2)
        assert abs(clock["offset_b_minus_a_ms"]) <= clock["error_ms"] + 2.0, clock  # + slack
        cpu = c["cpu"]   # each end sampled by its own agent, labelled as sharing the CPUs
        assert cpu["shared_by_sites"] is True and set(cpu["sites"]) == {"a", "b"}
        assert cpu["sites"]["b"]["shared_by_sites"] is True
        assert cpu["sites"]["b"]["ticks"] >= 1
        assert "cpu_busy_a" in c["metrics"] and "cpu_busy_b" in c["metrics"]
    stream = {c["case"]["tunnel"]["kind"]: c for c in cases
              if c["case"]["workload"]["name"] == "stream"}
    assert stream["native"]["metrics"]["throughput"]["value"] > 0
    assert stream["vxlan"]["metrics"]["throughput"]["value"] > 0
    # the vxlan counters prove the traffic crossed the vxlan device on both hosts
    assert stream["vxlan"]["datapath_counters"]["delta"]["b"]["rx_bytes"] > 1_000_000
    assert_clean(hosts)
    # the report and the console read a campaign on hosts like any other
    r = proc.run([sys.executable, "-m", "tunbench", "report", str(tmp_path / "r")],
                 check=False, timeout=300)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r" / "report" / "index.html").read_text()
    # per-end CPU is recorded; the report says both ends share this machine's CPUs (the
    # per-end figures of separate hosts: the two-kernel tier, tests/vmlab_sites)
    assert "cpu_per_gbit_a" in stream["vxlan"]["metrics"]
    assert "cpu_per_gbit_b" in stream["vxlan"]["metrics"]
    assert "both sites share this host&#x27;s CPUs" in page or \
        "both sites share this host's CPUs" in page
    # the decision summary too, and advise pools it with a local campaign round by round
    advice = json.loads((tmp_path / "r" / "report" / "advice.json").read_text())
    vx = next(m for m in advice["summary"] if m["method"] == "vxlan")
    assert vx["mtu_left"] == 1450 and vx["share_single"]["n"] == 1
    assert set(vx["latency_added"]) == {"p50", "p99"}
    local = Path(__file__).parents[1] / "data" / "campaigns" / "basic"
    r = proc.run([sys.executable, "-m", "tunbench", "advise", str(tmp_path / "r"), str(local),
                  "--json"], check=False, timeout=300)
    assert r.returncode == 0, r.stderr
    pooled = json.loads(r.stdout)
    vx2 = next(m for m in pooled["summary"] if m["method"] == "vxlan")
    assert vx2["share_single"]["n"] == 1 + 3     # this campaign's round + basic's three
    assert any("2 campaigns pooled" in n for n in pooled["notes"])


def test_wireguard_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    exp = experiment(hosts, ["wireguard"], ["stream"])
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
    c = cases[0]
    assert c["metrics"]["throughput"]["value"] > 0
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
    assert c["cpu"]["shared_by_sites"] is True     # namespaces of one machine
    assert_clean(hosts)


# ---- bad input and broken hosts: one clear line, before anything changes on any host -------
def refused(hosts: SshHosts, tmp_path: Path, exc: type[Exception], clean: bool = True,
            **kw: Any) -> str:
    sites = kw.pop("sites", None)
    exp = experiment(hosts, ["native"], ["ping"], **kw)
    if sites is not None:
        exp = spec.build({**_data(hosts), "sites": {"ssh_config": str(hosts.ssh_config),
                                                    **sites}}, "test")
    with pytest.raises(exc) as err:
        run_campaign(exp, tmp_path / "r")
    if clean:
        assert_clean(hosts)
    assert not (tmp_path / "r" / "cases").exists() or not list((tmp_path / "r" / "cases")
                                                                .iterdir())
    line = err.value.one_line() if isinstance(err.value, TunbenchError) else str(err.value)
    assert "\n" not in line, line
    return line


def _data(hosts: SshHosts) -> dict[str, Any]:
    return {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "native"}], "workload": [{"name": "ping"}]}


def test_mtu_change_on_the_ssh_interface_is_refused(hosts: SshHosts, tmp_path: Path) -> None:
    line = refused(hosts, tmp_path, SpecError, mtus=[1400])
    assert "refusing MTU 1400 on tb" in line and "carries the SSH session" in line
    assert "--mtu 1500" in line


def test_shaping_the_ssh_interface_is_refused(hosts: SshHosts, tmp_path: Path) -> None:
    line = refused(hosts, tmp_path, SpecError, rate="100mbit")
    assert "refusing --rate/--delay/--loss" in line


def test_no_route_between_sites(hosts: SshHosts, tmp_path: Path) -> None:
    line = refused(hosts, tmp_path, UnavailableError,
                   sites={"a": "h1", "b": {"target": "h2", "underlay4": "203.0.113.7"}})
    assert line.startswith("no route from site a (h1) to site b's address 203.0.113.7")


def test_unreachable_underlay_address(hosts: SshHosts, tmp_path: Path) -> None:
    silent = str(hosts.subnet.network_address + 99)
    line = refused(hosts, tmp_path, UnavailableError,
                   sites={"a": "h1", "b": {"target": "h2", "underlay4": silent}})
    assert f"site a (h1) cannot reach site b at {silent}" in line


def test_missing_tool_on_the_sites(hosts: SshHosts) -> None:
    from tunbench.testbed.topology import SiteSpec, Topology
    topo = Topology({"a": SiteSpec("a", "h1"), "b": SiteSpec("b", "h2")}, hosts.options())
    with pytest.raises(UnavailableError) as err:
        topo.open(tools={"tb-no-such-tool": ["test"]})
    line = err.value.one_line()
    assert "site a (h1) lacks tb-no-such-tool (apt-get install tb-no-such-tool there)" in line
    assert "site b (h2) lacks" in line and "nothing was changed" in line
    assert_clean(hosts)


def test_unknown_host_key(hosts: SshHosts, tmp_path: Path) -> None:
    hosts.write_known_hosts(["h1"])
    try:
        line = refused(hosts, tmp_path, TunbenchError, clean=False)
    finally:
        hosts.write_known_hosts()
    assert line.startswith("h2: the host key is unknown"), line
    assert_clean(hosts)


def test_cli_sites_and_bad_target(hosts: SshHosts, tmp_path: Path) -> None:
    tb = [sys.executable, "-m", "tunbench"]
    r = proc.run(tb + ["run", "--site", "a=h1", "--site", "b=-oProxyCommand=x", "--ssh-config",
                       str(hosts.ssh_config), "--tunnels", "native", "--workloads", "ping"],
                 check=False, timeout=60)
    assert r.returncode == 2 and "invalid site target '-oProxyCommand=x'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = proc.run(tb + ["run", "--site", "a=h1", "--site", "b=h2", "--ssh-config",
                       str(hosts.ssh_config), "--tunnels", "native", "--workloads", "ping",
                       "--duration", "1", "--repeats", "1", "--warmup", "0", "--json",
                       "--no-report", "--quiet", "--out", str(tmp_path / "c")],
                 check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["failed_cases"] == []


# ---- the hosts are reached only over SSH; a dropped connection is survived ------------------
def test_no_local_shortcut_run_fails_when_sshd_is_stopped(hosts: SshHosts,
                                                          tmp_path: Path) -> None:
    hosts.hosts["h2"].stop_sshd()
    try:
        line = refused(hosts.__class__(**{**hosts.__dict__, "hosts": {"h1": hosts.hosts["h1"]}}),
                       tmp_path, TunbenchError)
    finally:
        hosts.hosts["h2"].start_sshd(hosts.authorized_keys)
    assert line.startswith("h2: connection refused on port 22"), line


class _KillOnMeasuring:
    """A reporter that drops host h2's SSH connections when the first case starts measuring
    (its sshd session processes killed: the connection is gone mid-case)."""

    def __init__(self, hosts: SshHosts) -> None:
        self.hosts = hosts
        self.killed: list[int] = []

    def campaign_start(self, cases: Any, plans: Any) -> None: ...
    def case_start(self, case: Any) -> None: ...
    def case_end(self, case: Any, doc: Any) -> None: ...
    def campaign_end(self, store: Any) -> None: ...

    def phase(self, event: Any) -> None:
        if event.name == "measuring" and not self.killed:
            self.killed = self.hosts.hosts["h2"].kill_sessions()


def test_dropped_connection_fails_the_case_and_the_campaign_goes_on(
        hosts: SshHosts, tmp_path: Path) -> None:
    exp = experiment(hosts, ["native", "vxlan"], ["stream"], duration=3)
    rep = _KillOnMeasuring(hosts)
    cases = run_campaign(exp, tmp_path / "r", rep).store.read_cases()  # type: ignore[arg-type]
    assert rep.killed
    first, second = cases
    assert first["status"] == "failed" and "connection to h2 (b) lost" in first["error"], first
    assert any("reconnected to site(s) b" in n for n in first["notes"]), first["notes"]
    assert second["status"] == "ok", second.get("error")
    assert_clean(hosts)


# ---- doctor --site and cleanup --site ---------------------------------------------------------
def test_doctor_site(hosts: SshHosts) -> None:
    tb = [sys.executable, "-m", "tunbench"]
    r = proc.run(tb + ["doctor", "--site", "h1", "--ssh-config", str(hosts.ssh_config),
                       "--json"], check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["root"] is True and doc["kernel"] and doc["tools"]["ip"] is True
    assert doc["tunnels"]["vxlan"]["available"] in (True, False)
    assert set(doc["tunnels"]["wireguard"]["variants"]) == {"kernel", "go"}
    # impl=auto as that host alone decides it (this kernel: no wireguard module -> go)
    from tunbench.tunnels import wireguard
    assert doc["tunnels"]["wireguard"]["auto"] == ("kernel" if wireguard.kernel_has_wireguard()
                                                   else "go")
    assert doc["tunnels"]["ovs-vxlan"]["auto"] in ("system", "netdev")
    assert doc["tunnels"]["vxlan"]["auto"] is None
    for why in doc["tunnels"]["wireguard"]["variants"].values():   # reasons carry the fix
        assert all(("install" in w or "kernel" in w) for w in why), why
    r = proc.run(tb + ["doctor", "--site", "h1", "--ssh-config", str(hosts.ssh_config)],
                 check=False, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("h1 (") and "tunnel kinds:" in r.stdout
    assert "[auto: " in r.stdout
    assert_clean(hosts)


def test_cleanup_site_sweeps_what_a_killed_agent_left(hosts: SshHosts) -> None:
    from tunbench.remote.agent.client import Agent
    with Connection.open("h1", options=hosts.options(), name="crash") as conn:
        agent = Agent.start(conn, netlink=False)
        sleeper = agent.spawn(["sleep", "300"], f"{agent.hello['state']}/sleep.log")
        with Connection.open("h1", options=hosts.options(), name="killer") as other:
            other.run(["kill", "-9", str(agent.hello["pid"])])   # the agent dies uncleanly
            assert other.run(["find", "/run/tunbench", "-name", "journal.jsonl"]).stdout
        agent.close()
    tb = [sys.executable, "-m", "tunbench"]
    r = proc.run(tb + ["cleanup", "--site", "h1", "--ssh-config", str(hosts.ssh_config)],
                 check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"process {sleeper.pid}" in r.stdout and "leftover object(s) removed" in r.stdout
    assert_clean(hosts)
    r = proc.run(tb + ["cleanup", "--site", "h1", "--ssh-config", str(hosts.ssh_config)],
                 check=False, timeout=60)
    assert "nothing left over" in r.stdout


# ---- OVS userspace datapath: it takes the underlay, so never the SSH interface -----------------
def test_ovs_userspace_on_the_ssh_interface_is_refused(hosts: SshHosts, tmp_path: Path) -> None:
    exp = experiment(hosts, ["ovs-vxlan"], ["stream"])
    with pytest.raises(SpecError) as err:
        run_campaign(exp, tmp_path / "r")
    assert "refusing ovs-vxlan (netdev) on site a (h1): it moves the addresses of" in \
        err.value.one_line()
    assert_clean(hosts)


def test_ovs_vxlan_userspace_over_a_second_link(hosts: SshHosts, second_link: tuple[str, str],
                                                tmp_path: Path) -> None:
    u1, u2 = second_link
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "ovs-vxlan", "datapath": "netdev"}],
            "workload": [{"name": "stream"}, {"name": "latency", "protocol": "udp"}],
            "sites": {"ssh_config": str(hosts.ssh_config),
                      "a": {"target": "h1", "underlay_if": u1, "underlay4": "192.0.2.1"},
                      "b": {"target": "h2", "underlay_if": u2, "underlay4": "192.0.2.2"}}}
    cases = run_campaign(spec.build(data, "test"), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok", "ok"], [(c.get("error"), c.get("notes"), c.get("error_log")) for c in cases]
    stream = cases[0]
    assert stream["testbed"]["sites"]["a"]["underlay_if"] == u1
    assert stream["metrics"]["throughput"]["value"] > 0
    delta = stream["datapath_counters"]["delta"]["b"]   # what OVS itself counted on host b
    assert delta["dp_underlay_rx_bytes"] > delta["dp_inner_tx_bytes"] > 1_000_000
    # the underlay got its address back, on each host
    for name, ifn, addr in (("h1", u1, "192.0.2.1/24"), ("h2", u2, "192.0.2.2/24")):
        with Connection.open(name, options=hosts.options(), name="check") as c:
            assert addr in c.run(["ip", "-o", "addr", "show", "dev", ifn]).stdout
    assert_clean(hosts, keep=second_link)


def test_local_site_and_a_remote_host(hosts: SshHosts, tmp_path: Path) -> None:
    """--site a=local: site a is this host's root namespace (here: the test process's), site
    b a host over SSH; the vxlan device and the inner address exist here only for the case."""
    data = {"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": "vxlan"}], "workload": [{"name": "stream"}],
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "local", "b": "h2"}}
    before = set(netlink.link_names(None))
    cases = run_campaign(spec.build(data, "test"), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
    c = cases[0]
    assert c["testbed"]["sites"]["a"]["host"] == "local"
    assert c["testbed"]["sites"]["a"]["underlay4"] == str(hosts.subnet.network_address + 1)
    assert set(c["cpu"]["sites"]) == {"a", "b"} and c["metrics"]["throughput"]["value"] > 0
    assert set(netlink.link_names(None)) == before
    assert "198.19." not in proc.run(["ip", "-4", "-o", "addr"]).stdout
    assert_clean(hosts)


class _StopOnMeasuring(_KillOnMeasuring):
    """Drops h2's connections and stops its sshd: the host stays unreachable."""

    def phase(self, event: Any) -> None:
        if event.name == "measuring" and not self.killed:
            self.killed = self.hosts.hosts["h2"].kill_sessions() or [0]
            self.hosts.hosts["h2"].stop_sshd()


def test_host_that_stays_unreachable_stops_the_campaign(hosts: SshHosts, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # the same tries at a test's pace: each is refused at once (sshd stopped), so the 5 s
    # between them (topology.RECONNECT_PAUSE, for a host that reboots) would only be waited
    monkeypatch.setattr(topology, "RECONNECT_PAUSE", 0.2)
    exp = experiment(hosts, ["native", "vxlan"], ["ping"])
    rep = _StopOnMeasuring(hosts)
    try:
        with pytest.raises(TunbenchError) as err:
            run_campaign(exp, tmp_path / "r", rep)  # type: ignore[arg-type]
    finally:
        hosts.hosts["h2"].start_sshd(hosts.authorized_keys)
    assert err.value.one_line().startswith("h2: connection refused on port 22")
    cases = json.loads((tmp_path / "r" / "index.json").read_text())["cases"]
    assert [c["status"] for c in cases] == ["failed", "pending"]   # resumable
    assert json.loads((tmp_path / "r" / "index.json").read_text())["state"] == "stopped"
    assert_clean(hosts)


def test_kernel_option_missing_on_the_sites(hosts: SshHosts, tmp_path: Path) -> None:
    """geneve needs CONFIG_GENEVE, which this kernel (the hosts') lacks: read from each
    host's own kernel configuration, refused before anything is changed."""
    from tunbench.capabilities import kernel_config
    conf = kernel_config()
    if conf is None or conf.get("CONFIG_GENEVE") in ("y", "m"):
        pytest.skip("needs a readable kernel configuration without CONFIG_GENEVE")
    exp = spec.build({**_data(hosts), "tunnel": [{"kind": "geneve"}],
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    with pytest.raises(UnavailableError) as err:
        run_campaign(exp, tmp_path / "r")
    line = err.value.one_line()
    assert "site a (h1): kernel lacks CONFIG_GENEVE (geneve)" in line and "site b (h2)" in line
    assert "\n" not in line
    assert_clean(hosts)
