"""Kinds beyond the first four, between two sshd "hosts" (namespaces each with a real sshd),
driven only over SSH: ipsec (libipsec: charon with a private /run, made by the agent's
privrun), wireguard with tunnels=2 (ECMP spread: routes and service addresses undone through
the agent), srv6 (over the hosts' IPv6 underlay, given in [sites]) and the ssh kinds. Each
case runs traffic, proves it crossed the tunnel with the datapath's own counters, and leaves
nothing on either host."""

from __future__ import annotations

import gzip
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts
from test_sites import assert_clean

from kinds_here import skip_unless_here
from skb_bounds import min_packets
from tunbench import proc, spec, tunnels
from tunbench.errors import SpecError, UnavailableError
from tunbench.runner import run_campaign

pytestmark = [pytest.mark.netns, pytest.mark.correctness]


def experiment(hosts: SshHosts, tunnel: dict[str, Any], workload: dict[str, Any],
               ipv6: bool = False) -> spec.Experiment:
    sites: dict[str, Any] = {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}
    if ipv6:
        for name in ("a", "b"):
            h = hosts.hosts[sites[name]]
            sites[name] = {"target": h.name, "underlay6": h.addr6}
    return spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                       "tunnel": [tunnel], "workload": [workload], "sites": sites}, "test")


def runs_here(kind: str, **raw: Any) -> None:
    """The hosts share this kernel and these binaries: what cannot run here cannot there."""
    skip_unless_here(kind, **raw)


def host_comms(hosts: SshHosts) -> set[str]:
    """Names of the processes running inside the hosts' namespaces (our look, not tunbench's)."""
    out = set()
    for h in hosts.hosts.values():
        for pid in proc.run(["ip", "netns", "pids", h.netns]).stdout.split():
            path = Path(f"/proc/{pid}/comm")
            if path.exists():
                out.add(path.read_text().strip())
    return out


def assert_daemon_cpu(c: dict[str, Any], comm: str, per_site: int) -> None:
    """The datapath daemons' CPU, sampled by each host's agent: every daemon of each site in
    that site's record and in the case's table (naming its site), with CPU time spent."""
    cpu = c["cpu"]
    for site in ("a", "b"):
        mine = {k: e for k, e in cpu["sites"][site]["processes"].items()
                if k.startswith(f"datapath-{site}[")}
        assert len(mine) == per_site, cpu["sites"][site]["processes"]
        for e in mine.values():
            assert e["comm"] == comm and e["cpu_seconds"] > 0, e
            assert 0 < e["busiest_thread_pct"] <= e["pct_of_one_core"] + 1e-6, e
        assert any(k.startswith("ksoftirqd/") for k in cpu["sites"][site]["processes"])
    top = [e for k, e in cpu["processes"].items() if k.startswith("datapath-")]
    assert sorted(e["site"] for e in top) == ["a"] * per_site + ["b"] * per_site


def one_ok_case(exp: spec.Experiment, out: Path) -> dict[str, Any]:
    cases = run_campaign(exp, out).store.read_cases()
    assert [c["status"] for c in cases] == ["ok"], [c.get("error") for c in cases]
    return dict(cases[0])


def test_ipsec_libipsec_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """charon per host with a private /run (its compiled-in /run/charon.* paths), configs and
    PSK written on each host, SAs installed by IKE between the hosts."""
    runs_here("ipsec", impl="libipsec")
    c = one_ok_case(experiment(hosts, {"kind": "ipsec", "impl": "libipsec"},
                               {"name": "stream"}), tmp_path / "r")
    assert c["metrics"]["throughput"]["value"] > 0
    delta = c["datapath_counters"]["delta"]
    assert delta["b"]["sa_in_bytes"] > 500_000, delta     # ESP decrypted on host h2
    assert delta["a"]["sa_out_bytes"] > 500_000, delta
    assert c["cpu"]["shared_by_sites"] is True    # the test hosts share this machine
    assert_daemon_cpu(c, "charon", per_site=1)
    assert_clean(hosts)
    assert "charon" not in host_comms(hosts)


def test_wireguard_two_tunnels_spread_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """tunnels=2: two wireguard-go devices per host, ECMP routes and service addresses on each
    host (undone there through the agent), both tunnels carrying traffic."""
    runs_here("wireguard", impl="go")
    c = one_ok_case(experiment(hosts, {"kind": "wireguard", "impl": "go", "tunnels": 2},
                               {"name": "stream", "streams": 16}), tmp_path / "r")
    delta = c["datapath_counters"]["delta"]["b"]
    # 16 streams and the control connection all hash onto one tunnel with p = 2^-16 only
    share = [delta["tun0_rx_bytes"], delta["tun1_rx_bytes"]]
    assert sum(share) > 1_000_000 and min(share) > 0, share   # both tunnels carried traffic
    assert_daemon_cpu(c, "wireguard-go", per_site=2)
    assert_clean(hosts)
    for h in hosts.hosts.values():   # the service addresses and routes went with the case
        lo = proc.run(["ip", "-o", "addr", "show", "dev", "lo"], netns=h.netns).stdout
        assert "198.19.255." not in lo, lo
        routes = proc.run(["ip", "route"], netns=h.netns).stdout
        assert "198.19." not in routes, routes


def test_srv6_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """SRv6 over the hosts' IPv6 underlay: routes added on each host over the agent, the far
    host's seg6local SIDs count the packets, and every route is deleted there."""
    runs_here("srv6")
    c = one_ok_case(experiment(hosts, {"kind": "srv6", "segments": 2}, {"name": "stream"},
                               ipv6=True), tmp_path / "r")
    assert c["metrics"]["throughput"]["value"] > 0
    b = c["datapath_counters"]["delta"]["b"]
    # each counted packet is an skb of at most 64 KiB (GSO): so many at least carried the stream
    least = min_packets(c["raw"]["iperf3"]["bytes_received"])
    assert b["end_dx4_packets"] >= least and b["end_packets"] >= least, (b, least)
    assert_clean(hosts)
    for h in hosts.hosts.values():
        routes = proc.run(["ip", "-6", "route"], netns=h.netns).stdout
        assert "seg6" not in routes and "2001:2:0:f" not in routes, routes


def test_srv6_without_ipv6_underlay_is_one_line_before_connecting(hosts: SshHosts,
                                                                   tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        run_campaign(experiment(hosts, {"kind": "srv6"}, {"name": "stream"}), tmp_path / "r")
    line = err.value.one_line()
    assert "IPv6 underlay" in line and "underlay6" in line and "\n" not in line, line


# Each host already runs its own sshd on port 22 of that address (the one tunbench reaches it
# over): the tunnel's sshd listens on another port, as it must on a real host.
SSH_PORT = 2022


def test_ssh_tun_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """Each key made on the host that uses it, the tunnel's own sshd on h2 (private /run),
    ssh -w on h1; traffic crosses both tun devices; sshd's session process is adopted by h2's
    agent and gone at the end."""
    runs_here("ssh-tun")
    c = one_ok_case(experiment(hosts, {"kind": "ssh-tun", "port": SSH_PORT},
                               {"name": "stream"}), tmp_path / "r")
    assert c["metrics"]["throughput"]["value"] > 0
    delta = c["datapath_counters"]["delta"]
    assert delta["b"]["rx_bytes"] > 500_000, delta                 # the tun device on h2
    assert delta["b"]["ssh_tcp_bytes_received"] > delta["b"]["rx_bytes"], delta
    assert_clean(hosts)
    # only each host's own sshd is left: one per host, nothing of the tunnel's
    for h in hosts.hosts.values():
        pids = proc.run(["ip", "netns", "pids", h.netns]).stdout.split()
        assert len(pids) == 1, (h.name, [Path(f"/proc/{p}/cmdline").read_bytes()
                                         for p in pids if Path(f"/proc/{p}").exists()])


def test_ssh_forward_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    runs_here("ssh-forward")
    c = one_ok_case(experiment(hosts, {"kind": "ssh-forward", "port": SSH_PORT},
                               {"name": "stream"}), tmp_path / "r")
    assert c["metrics"]["throughput"]["value"] > 0
    delta = c["datapath_counters"]["delta"]
    assert delta["b"]["ssh_tcp_bytes_received"] > 500_000, delta
    assert_clean(hosts)
    # only each host's own sshd is left: one per host, nothing of the tunnel's
    for h in hosts.hosts.values():
        pids = proc.run(["ip", "netns", "pids", h.netns]).stdout.split()
        assert len(pids) == 1, (h.name, [Path(f"/proc/{p}/cmdline").read_bytes()
                                         for p in pids if Path(f"/proc/{p}").exists()])


# ---- impl=auto decided from each site's own kernel ----------------------------------------
@contextmanager
def kernel_config(hosts: SshHosts, changes: dict[str, dict[str, str]]) -> Iterator[None]:
    """Give host `name` a kernel configuration of its own: this kernel's, with `changes`
    ("" unsets an option), bind-mounted over /proc/config.gz in that host's mount namespace
    (its sshd's, which every session inherits). Only what tunbench reads there changes."""
    real = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    mounted = []
    try:
        for name, opts in changes.items():
            h = hosts.hosts[name]
            assert h.sshd is not None
            lines = [ln for ln in real.splitlines() if ln.split("=")[0] not in opts]
            lines += [f"{k}={v}" for k, v in opts.items() if v]
            path = h.dir / "config.gz"
            path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
            proc.run(["nsenter", "-t", str(h.sshd.pid), "-m", "mount", "--bind", str(path),
                      "/proc/config.gz"], timeout=10)
            mounted.append(h.sshd.pid)
        yield
    finally:
        for pid in mounted:
            proc.run(["nsenter", "-t", str(pid), "-m", "umount", "/proc/config.gz"],
                     timeout=10, check=False)


def needs_config_gz() -> None:
    if not Path("/proc/config.gz").exists():
        pytest.skip("this kernel has no /proc/config.gz to derive a host's configuration from")


def test_impl_auto_from_each_hosts_kernel_sites_agree(hosts: SshHosts, tmp_path: Path) -> None:
    """h1's kernel says WireGuard, h2's does not: alone, h1 would choose kernel and h2 go;
    both can run go, so go it is on both, recorded with what each site chose."""
    needs_config_gz()
    runs_here("wireguard", impl="go")
    with kernel_config(hosts, {"h1": {"CONFIG_WIREGUARD": "y"}, "h2": {"CONFIG_WIREGUARD": ""}}):
        c = one_ok_case(experiment(hosts, {"kind": "wireguard"}, {"name": "stream"}),
                        tmp_path / "r")
    assert c["case"]["tunnel"]["impl"] == "go"
    assert c["testbed"]["impl_auto"] == {
        "wireguard": {"impl": "go", "auto_per_site": {"a": "kernel", "b": "go"}}}
    assert c["datapath_counters"]["delta"]["b"]["wg_rx_bytes"] > 100_000
    assert_clean(hosts)


def test_impl_auto_sites_cannot_agree_is_one_line(hosts: SshHosts, tmp_path: Path) -> None:
    """h2 has neither WireGuard nor TUN (so no wireguard-go): h1 would run the kernel module,
    h2 nothing both can run: one line naming each site's lack, nothing changed."""
    needs_config_gz()
    lacking = {"h1": {"CONFIG_WIREGUARD": "y"},
               "h2": {"CONFIG_WIREGUARD": "", "CONFIG_TUN": ""}}
    with kernel_config(hosts, lacking), pytest.raises(SpecError) as err:
        run_campaign(experiment(hosts, {"kind": "wireguard"}, {"name": "stream"}),
                     tmp_path / "r")
    line = err.value.one_line()
    assert "\n" not in line
    assert "impl=auto chooses kernel on site a (h1) but go on site b (h2)" in line, line
    assert "CONFIG_WIREGUARD" in line and "CONFIG_TUN" in line, line
    assert_clean(hosts)


def test_kernel_only_kind_judged_by_the_remote_kernel(hosts: SshHosts, tmp_path: Path) -> None:
    """l2tp's kernel options are checked in each host's configuration, not this one's: absent
    on h2 only -> the line names h2 alone; present on both -> the checks pass and the case
    runs (and fails at bring-up here, where the module really is absent)."""
    needs_config_gz()
    drv = tunnels.get("l2tp")
    options = [k.option for k in drv.declared(None).kernel]
    present = dict.fromkeys(options, "m")
    absent_on_b = {"h1": present, "h2": dict.fromkeys(options, "")}
    with kernel_config(hosts, absent_on_b), pytest.raises(UnavailableError) as err:
        run_campaign(experiment(hosts, {"kind": "l2tp"}, {"name": "ping"}), tmp_path / "r")
    line = str(err.value)
    assert "site b (h2): kernel lacks" in line and "site a (h1)" not in line, line
    if not drv.requirements(drv.default_params()):
        return   # this kernel runs l2tp: the rest is about a kernel that cannot
    with kernel_config(hosts, {"h1": present, "h2": present}):
        cases = run_campaign(experiment(hosts, {"kind": "l2tp"}, {"name": "ping"}),
                             tmp_path / "r2").store.read_cases()
    assert [c["status"] for c in cases] == ["failed"], cases
    assert_clean(hosts)


def test_doctor_site_shows_the_hosts_own_auto_choice(hosts: SshHosts) -> None:
    needs_config_gz()
    tb = [sys.executable, "-m", "tunbench", "doctor", "--ssh-config", str(hosts.ssh_config)]
    with kernel_config(hosts, {"h1": {"CONFIG_WIREGUARD": "y"}, "h2": {"CONFIG_WIREGUARD": ""}}):
        docs = {h: json.loads(proc.run(tb + ["--site", h, "--json"], timeout=60).stdout)
                for h in ("h1", "h2")}
    assert docs["h1"]["tunnels"]["wireguard"]["auto"] == "kernel"
    assert docs["h2"]["tunnels"]["wireguard"]["auto"] == "go"
    assert_clean(hosts)


def test_datapath_daemon_dying_on_a_host_fails_the_case(hosts: SshHosts,
                                                        tmp_path: Path) -> None:
    """wireguard-go on h2 is SIGKILLed mid-measurement (by this test, inside h2): the watch
    asks h2's agent, the case fails at once with the daemon's name and exit, the campaign
    goes on with the next case, and nothing is left on either host."""
    runs_here("wireguard", impl="go")
    exp = spec.build({"experiment": {"duration": 8, "warmup": 0, "repeats": 1},
                      "tunnel": [{"kind": "wireguard", "impl": "go"}, {"kind": "native"}],
                      "workload": [{"name": "stream"}],
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    killed: dict[str, int] = {}

    def in_host(name: str, comm: str) -> list[int]:
        out = []
        for p in proc.run(["ip", "netns", "pids", hosts.hosts[name].netns]).stdout.split():
            try:
                if Path(f"/proc/{p}/comm").read_text().strip() == comm:
                    out.append(int(p))
            except OSError:
                continue   # ended meanwhile
        return out

    def killer() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            wg, iperf = in_host("h2", "wireguard-go"), in_host("h1", "iperf3")
            if wg and iperf:
                time.sleep(1.5)                       # mid-measurement
                os.kill(wg[0], signal.SIGKILL)
                killed["pid"] = wg[0]
                return
            time.sleep(0.1)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    t.join(timeout=5)
    assert killed, "wireguard-go was never seen running on h2"
    assert [c["status"] for c in cases] == ["failed", "ok"], [c.get("error") for c in cases]
    err = cases[0]["error"]
    assert f"wireguard-go0-b (PID {killed['pid']}, site b) died during the measurement" in err
    assert "exited with code -9" in err, err
    assert_clean(hosts)


# ---- --offloads on remote sites ------------------------------------------------------------
def offload_experiment(hosts: SshHosts, sites: dict[str, Any]) -> spec.Experiment:
    return spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                       "tunnel": [{"kind": "vxlan"}], "workload": [{"name": "stream"}],
                       "offloads": [{"name": "default"},
                                    {"name": "no-tso-gro", "tso": "off", "gro": "off"}],
                       "sites": {"ssh_config": str(hosts.ssh_config), **sites}}, "test")


def test_offloads_on_the_ssh_interface_are_refused(hosts: SshHosts, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        run_campaign(offload_experiment(hosts, {"a": "h1", "b": "h2"}), tmp_path / "r")
    line = err.value.one_line()
    assert "refusing --offloads no-tso-gro on" in line and "carries the SSH session" in line
    assert "\n" not in line
    assert_clean(hosts)


def test_offloads_on_each_hosts_devices_and_set_back(hosts: SshHosts,
                                                     second_link: tuple[str, str],
                                                     tmp_path: Path) -> None:
    """ethtool -K on each host's underlay (a link apart from the SSH path) and tunnel device,
    over the agent; the host's own underlay gets its features back after the case."""
    u1, u2 = second_link
    feats = ("tcp-segmentation-offload", "generic-receive-offload")

    def features(name: str, ifn: str) -> dict[str, str]:
        text = proc.run(["ethtool", "-k", ifn], netns=hosts.hosts[name].netns).stdout
        return {k: v for k, _, v in (ln.strip().partition(": ") for ln in text.splitlines())
                if k in feats}

    before = {n: features(n, i) for n, i in (("h1", u1), ("h2", u2))}
    sites = {"a": {"target": "h1", "underlay_if": u1, "underlay4": "192.0.2.1"},
             "b": {"target": "h2", "underlay_if": u2, "underlay4": "192.0.2.2"}}
    cases = run_campaign(offload_experiment(hosts, sites), tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok", "ok"], [c.get("error") for c in cases]
    varied = next(c for c in cases if c["case"]["offloads"]["name"] == "no-tso-gro")
    req = varied["offloads"]["requested"]
    assert {f"h1/{u1}", f"h2/{u2}"} <= set(req) and len(req) == 4, req   # + tunnel devices
    for host, dev in (("h1", u1), ("h2", u2)):   # a veth has TSO on: really changed there
        assert before[host]["tcp-segmentation-offload"] == "on", before
        assert req[f"{host}/{dev}"]["tso"] == "set", req
        assert req[f"{host}/{dev}"]["gro"] in ("set", "unchanged"), req
        applied = varied["offloads"]["applied"][f"{host}/{dev}"]
        assert applied["tcp-segmentation-offload"].startswith("off"), applied
    assert varied["metrics"]["throughput"]["value"] > 0
    assert {n: features(n, i) for n, i in (("h1", u1), ("h2", u2))} == before
    assert_clean(hosts, keep=second_link)


def test_agg_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    """tbagg (a Rust daemon built in this checkout) copied to each host that lacks it, run
    there, its counters dumped by signal on that host and read through the agent; small UDP
    packets are aggregated between the hosts as on the local testbed."""
    runs_here("agg")
    c = one_ok_case(experiment(hosts, {"kind": "agg", "flush_us": 200},
                               {"name": "loss-search", "method": "rfc2544", "sizes": ["100"],
                                "max_rate_pps": 20000, "resolution_pct": 20,
                                "latency_at_pct": []}), tmp_path / "r")
    copied = c["testbed"]["tbagg_copied_to"]
    assert set(copied) == {"a", "b"} and all(p.startswith("/run/tunbench/") and
                                             p.endswith("/tbagg") for p in copied.values())
    delta = c["datapath_counters"]["delta"]
    # inner packets crossed: a's tbagg sent them, b's unpacked them, fewer datagrams than
    # packets (several 100 B packets under one header at these rates, flush 200 µs)
    sent_pkts, sent_dgrams = delta["a"]["agg_tx_packets"], delta["a"]["agg_tx_datagrams"]
    assert sent_pkts > 1000 and delta["b"]["agg_rx_packets"] > 1000, delta
    assert sent_dgrams < sent_pkts, delta
    assert delta["b"]["agg_rx_malformed"] == 0, delta
    assert_daemon_cpu(c, "tbagg", per_site=1)
    assert_clean(hosts)
    assert "tbagg" not in host_comms(hosts)
