"""Open vSwitch tunnels for real: private daemons per site, iperf3 through the userspace
datapath, exact MTU, STT refused with its reason, a dying ovs-vswitchd, nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tunbench import proc, spec, tunnels
from tunbench.errors import UnavailableError
from tunbench.plan import plan
from tunbench.runner import run_case
from tunbench.testbed import names, netlink
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import STATE_DIR
from tunbench.tunnels.ovs import OvsSite
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams

pytestmark = [pytest.mark.skipif(not proc.which("ovs-vswitchd"),
                                reason="Open vSwitch is not installed "
                                       "(apt-get install openvswitch-switch)"), pytest.mark.correctness,
              pytest.mark.beside]

SYSTEM_DB = Path("/etc/openvswitch/conf.db")


def _db_stamp() -> tuple[int, int] | None:
    try:
        st = SYSTEM_DB.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def _ovs_pids(under: list[Path] | None = None) -> set[int]:
    """PIDs of OVS daemons; with `under`, only those whose command line names one of these
    directories (this test's own daemons, whatever other runs do on the host meanwhile)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                comm = (d / "comm").read_text().strip()
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if comm in ("ovs-vswitchd", "ovsdb-server") and (
                    under is None or any(str(u) in cmd for u in under)):
                out.add(int(d.name))
    return out


def _ping(tb: Testbed, addr: str, size: int, wait: int = 1) -> bool:
    """One DF ping waiting `wait` s for its reply: 1 s where none should come (or in a retry
    loop), 5 s where one must (a busy host may answer late)."""
    return tb.a.run(["ping", "-c", "1", "-W", str(wait), "-M", "do", "-s", str(size), addr],
                    check=False, timeout=wait + 10).ok


def _up(tb: Testbed, kind: str) -> tuple[Any, Any]:
    drv = tunnels.get(kind)
    ep = drv().up(tb, drv.parse_params({"datapath": "netdev", "vni": 777}))
    deadline = time.monotonic() + 10
    while not _ping(tb, ep.b4, 56) and time.monotonic() < deadline:
        pass
    return drv, ep


@pytest.mark.parametrize("kind", ["ovs-vxlan", "ovs-geneve", "ovs-gre"])
def test_ovs_tunnel_carries_iperf3_through_the_datapath(testbed: Testbed, kind: str,
                                                        root_unchanged: None) -> None:
    others = _ovs_pids()
    db_before = _db_stamp()
    drv, ep = _up(testbed, kind)
    assert ep.info["datapath"] == "netdev" and ep.mtu == 1500 - ep.overhead
    # the datapath daemons are the two ovs-vswitchd we started, one per site
    for site in ("a", "b"):
        (pid,) = ep.datapath_pids[site]
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "ovs-vswitchd"
        assert pid not in others
    assert netlink.link_mtu(testbed.a.netns, str(ep.a_ifname)) == ep.mtu
    # port_order "fixed" (the default): the same datapath port numbers at every bring-up,
    # whatever the run id in the names, so INNER (3) is polled after the underlay (2)
    # (tunnels/ovs.py, "Port order"); read back from the datapath, per site
    assert ep.info["port_order"] == "fixed"
    for site in (testbed.a, testbed.b):
        ports = ep.info["dp_ports"][site.name]
        assert ports["ovs-netdev"] == 0, ports
        assert (ports[ep.info["phy_bridge"]], ports[site.underlay_if],
                ports[ep.info["bridge"]]) == (1, 2, 3), ports
        assert sorted(ports.values()) == [0, 1, 2, 3, 4], ports   # + the tunnel's backer

    # exact tunnel MTU: the largest DF packet passes, one byte more does not
    assert _ping(testbed, ep.b4, ep.mtu - 28, wait=5)
    assert not _ping(testbed, ep.b4, ep.mtu - 27)
    # and the overhead is not overstated: with the inner MTU one byte larger, that packet
    # no longer fits the underlay once encapsulated and is dropped
    oa = OvsSite(testbed.a, Path(ep.info["ovs_dirs"]["a"]))
    oa.vsctl("set", "interface", str(ep.a_ifname), f"mtu_request={ep.mtu + 1}")
    assert netlink.link_mtu(testbed.a.netns, str(ep.a_ifname)) == ep.mtu + 1
    assert not _ping(testbed, ep.b4, ep.mtu - 27)
    oa.vsctl("set", "interface", str(ep.a_ifname), f"mtu_request={ep.mtu}")

    before = drv().counters(testbed, ep)
    ctx = Context(testbed, ep, duration=2, warmup=0)
    out = Stream().run(ctx, StreamParams())
    after = drv().counters(testbed, ep)
    got = out.raw["iperf3"]["bytes_received"]
    assert got > 1_000_000

    def delta(site: str, key: str) -> int:
        return int(after[site][key] - before[site][key])

    # OVS decapsulated at least every byte iperf3 received and handed it to the inner port...
    assert delta("b", "flows_tnl_pop_bytes") >= got
    assert delta("b", "dp_inner_tx_bytes") >= got
    # ...which site a's OVS had taken from its inner port and encapsulated
    assert delta("a", "flows_tnl_push_bytes") >= got
    assert delta("a", "dp_inner_rx_bytes") >= got
    # and it crossed the underlay as bigger (encapsulated) packets, through OVS's veth port
    assert delta("b", "dp_underlay_rx_bytes") > delta("b", "dp_inner_tx_bytes")
    # the CPU sampler followed both ovs-vswitchd
    assert ctx.cpu_record is not None
    procs = ctx.cpu_record.summary()["processes"]
    assert any(k.startswith("datapath-a") for k in procs), procs
    assert any(k.startswith("datapath-b") for k in procs), procs

    # teardown leaves nothing: daemons, sockets, db files; the system OVS db is untouched
    dirs = [Path(d) for d in ep.info["ovs_dirs"].values()]
    assert all((d / "db.sock").exists() for d in dirs)
    mine = _ovs_pids(dirs)
    assert len(mine) == 4   # ovsdb-server + ovs-vswitchd per site
    assert not testbed.ledger.close()
    assert not (_ovs_pids() & mine)
    assert not any(d.exists() for d in dirs)
    assert not testbed.workdir.exists()
    assert _db_stamp() == db_before


def test_stt_reported_unavailable_and_really_drops(testbed: Testbed) -> None:
    drv = tunnels.get("ovs-stt")
    params = drv.parse_params({"datapath": "netdev"})
    missing = drv.requirements(params)
    assert missing and "drops every packet" in missing[0].why
    with pytest.raises(UnavailableError, match="userspace datapath"):
        drv().up(testbed, params)
    # nothing was started by the refused up()
    assert not list(testbed.workdir.glob("ovs-*"))
    # what the Missing says, shown: built anyway, OVS accepts the port and moves nothing
    ep = drv().build(testbed, params, "netdev")  # type: ignore[arg-type]
    assert not any(_ping(testbed, ep.b4, 56) for _ in range(3))
    c = drv().counters(testbed, ep)
    assert c["a"]["dp_inner_rx_packets"] > 0          # the pings entered OVS...
    assert c["a"]["flows_tnl_push_packets"] == 0      # ...and were never encapsulated
    assert c["b"]["dp_inner_tx_packets"] == 0


def test_stt_refused_by_the_cli_before_anything(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "tunbench", "run", "--tunnels", "ovs-stt",
                        "--out", str(tmp_path / "x")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 3, r.stderr
    assert "ovs-stt" in r.stderr and "drops every packet" in r.stderr
    assert "nothing was changed" in r.stderr and not (tmp_path / "x").exists()


def test_bad_parameter_in_experiment_file_one_line(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text('[[tunnel]]\nkind = "ovs-geneve"\ndatapath = "dpdk"\n')
    r = subprocess.run([sys.executable, "-m", "tunbench", "run", "--experiment", str(f),
                        "--out", str(tmp_path / "x")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "datapath" in lines[0] and "'netdev'" in lines[0]


def _netns_pids(ns: str) -> list[int]:
    r = proc.run(["ip", "netns", "pids", ns], check=False, timeout=10)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_vswitchd_dying_mid_measurement_fails_the_case_cleanly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    exp = spec.build({"experiment": {"duration": 4, "warmup": 0, "repeats": 1},
                      "tunnel": [{"kind": "ovs-vxlan", "datapath": "netdev"}, {"kind": "native"}]})
    ovs_case, native_case = plan(exp)
    assert ovs_case.tunnel.kind == "ovs-vxlan"
    # learn the run id run_case picks (other test runs share this host's namespaces)
    rids: list[str] = []
    real_new_run_id = names.new_run_id

    def recording_new_run_id(taken: set[str] | None = None) -> str:
        rids.append(real_new_run_id(taken))
        return rids[-1]

    monkeypatch.setattr(names, "new_run_id", recording_new_run_id)
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(doc=run_case(exp, ovs_case)))
    t.start()
    killed: dict[str, int] = {}
    started: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not killed and t.is_alive():
        if rids:
            pids = {site: _netns_pids(f"tb-{rids[0]}-{site}") for site in "ab"}
            started |= {p for ps in pids.values() for p in ps
                        if _comm(p) in ("ovs-vswitchd", "ovsdb-server")}
            if any(_comm(p) == "iperf3" for p in pids["a"]):   # the measurement is running
                time.sleep(1.0)
                vsd = next(p for p in pids["a"] if _comm(p) == "ovs-vswitchd")
                os.kill(vsd, 9)   # the daemon this test's run started, by PID
                killed["a"] = vsd
        time.sleep(0.05)
    t.join(timeout=120)
    assert killed, "the measurement never started"
    doc = result["doc"]
    assert doc["status"] == "failed"
    assert "ovs-vswitchd" in doc["error"], doc["error"]
    assert "--- ovs-vswitchd-a.log" in doc["error_log"]
    assert "bridge" in doc["error_log"]      # its last log lines, not just a name
    rid = doc["case"]["run_id"]
    # nothing left behind: namespaces, daemons of both sites, journal, workdir
    assert not [n for n in netlink.list_netns() if f"-{rid}-" in n]
    assert not [p for p in started if proc.pid_alive(p)]
    assert not (STATE_DIR / f"{rid}.jsonl").exists() and not (STATE_DIR / rid).exists()
    # the campaign goes on: the next case runs normally
    assert run_case(exp, native_case)["status"] == "ok"


def test_ovs_geneve_over_ipv6_underlay_exact_mtu(testbed: Testbed) -> None:
    drv = tunnels.get("ovs-geneve")
    ep = drv().up(testbed, drv.parse_params({"datapath": "netdev", "underlay": 6}))
    assert ep.overhead == 70 and ep.mtu == 1430
    deadline = time.monotonic() + 10
    while not _ping(testbed, ep.b4, 56) and time.monotonic() < deadline:
        pass
    before = drv().counters(testbed, ep)
    assert _ping(testbed, ep.b4, ep.mtu - 28, wait=5)
    assert not _ping(testbed, ep.b4, ep.mtu - 27)
    after = drv().counters(testbed, ep)
    # the full-size packet went out encapsulated in IPv6 by OVS (40-byte outer header)
    assert after["a"]["flows_tnl_push_bytes"] - before["a"]["flows_tnl_push_bytes"] >= ep.mtu
    flows = OvsSite(testbed.a, Path(ep.info["ovs_dirs"]["a"])).appctl("dpctl/dump-flows").stdout
    assert "ipv6(src=2001:2::1,dst=2001:2::2" in flows
