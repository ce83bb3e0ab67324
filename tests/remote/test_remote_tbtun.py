"""tbtun (ebpf-vxlan) between two sshd "hosts", driven only over SSH: the object copied into
each host's case directory, loaded and pinned under that host's own bpffs (each "host" is a
mount namespace of its own, so its /sys/fs/bpf is not this machine's), attached with tc there,
rules written through its agent. Traffic must cross (b's per-rule counter and decap counter
moved) and nothing may stay pinned or attached on either host."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts
from test_remote_kinds import runs_here
from test_sites import assert_clean

from tunbench import proc, spec
from tunbench.errors import UnavailableError
from tunbench.remote.agent import bpfhost
from tunbench.remote.agent.client import Agent
from tunbench.remote.transport import Connection
from tunbench.runner import run_campaign
from tunbench.tbtun import loader
from tunbench.testbed import names
from tunbench.testbed.ledger import Ledger
from tunbench.testbed.remote import RemoteSite

pytestmark = [pytest.mark.netns, pytest.mark.correctness]
TB = [sys.executable, "-m", "tunbench"]


def host_bpf_state(hosts: SshHosts, name: str) -> dict[str, Any]:
    """What the host itself shows, asked over SSH: tunbench's pin directories in its bpffs,
    bpf programs on its links (tc filters, tcx links), and whether a bpffs is mounted there at all."""
    with Connection.open(name, options=hosts.options(), name="check") as c:
        mounts = c.run(["cat", "/proc/self/mounts"]).stdout
        pins = c.run(["sh", "-c", 'ls -d "$1"/tb-* 2>/dev/null || true', "tb-ls",
                      str(loader.BPFFS)]).stdout.split()
        links = [ln.split(":")[1].strip().split("@")[0]
                 for ln in c.run(["ip", "-o", "link"]).stdout.splitlines()]
        filters = {}
        for link in links:
            for hook in ("egress", "ingress"):
                out = c.run(["tc", "filter", "show", "dev", link, hook], check=False).stdout
                if "bpf" in out:
                    filters[f"{link} {hook}"] = out
                # tcx links (attach=auto takes them on Linux >= 6.6): no tool of the host
                # shows them, so asked of its namespace here (every "host" is one)
                ids = bpfhost.tcx_prog_ids(hosts.hosts[name].netns, link, hook)
                if ids:
                    filters[f"{link} {hook} tcx"] = str(ids)
    return {"bpffs": f" {loader.BPFFS} bpf " in mounts, "pins": pins, "filters": filters}


def test_tbtun_kinds_between_hosts(hosts: SshHosts, tmp_path: Path) -> None:
    runs_here("ebpf-vxlan")
    before = {n: host_bpf_state(hosts, n) for n in hosts.hosts}
    # the stream only: the tunnel is shipped, loaded, pinned and counted per case whatever
    # the workload (a latency case over it ran here too until issue 27: the same tbtun path,
    # 2 cases of ~12 s; latency between hosts is test_sites.py's)
    exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                      "tunnel": [{"kind": "ebpf-vxlan"}, {"kind": "ebpf-geneve"}],
                      "workload": [{"name": "stream"}],
                      "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2"}},
                     "test")
    cases = run_campaign(exp, tmp_path / "r").store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * 2, [c.get("error") for c in cases]
    assert {c["tunnel"]["info"]["encap"] for c in cases} == {"vxlan", "geneve"}
    for c in cases:
        tb = c["testbed"]
        assert tb["kind"] == "hosts" and tb["sites"]["b"]["host"] == "h2"
        # the object was shipped to each host's case directory (not found there otherwise)
        assert set(tb["tbtun_copied_to"]) == {"a", "b"}, tb
        assert c["tunnel"]["info"]["pins"]["b"] == str(loader.site_dir(tb["run_id"], "b"))
        delta = c["datapath_counters"]["delta"]
        # b encapsulated its answers by the rule towards a's inner IPv4 address (slot 0),
        # and decapsulated what a sent; a did the same the other way
        assert delta["b"]["rule0_packets"] > 0 and delta["b"]["decap"] > 0, delta
        assert delta["a"]["rule0_packets"] > 0 and delta["a"]["encap"] > 0, delta
        assert delta["b"]["decap_error"] == 0, delta
    for stream in cases:
        assert stream["metrics"]["throughput"]["value"] > 0
        assert stream["cpu"]["shared_by_sites"] is True   # hosts of one machine
    assert_clean(hosts)
    for name in hosts.hosts:     # nothing pinned, no bpf filter, bpffs as it was before
        after = host_bpf_state(hosts, name)
        assert after == before[name], (name, after)
        assert not after["pins"] and not after["filters"], after


def rules_cli_on_the_host(hosts: SshHosts, rid: str, where: Path) -> None:
    """`tunbench tunnel-rules --host` edits and lists the pinned maps on that host."""
    host = ["--host", "h2", "--ssh-config", str(hosts.ssh_config)]
    r = proc.run(TB + ["tunnel-rules", "add", "--site", f"{rid}/b", "198.19.9.0/24",
                       "--remote", hosts.hosts["h1"].addr, "--vni", "7", *host],
                 check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("rule 198.19.9.0/24 -> "), r.stdout
    r = proc.run(TB + ["tunnel-rules", "list", "--json", *host], check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    (doc,) = json.loads(r.stdout)["sites"]
    assert doc["site"] == str(where)
    added = [x for x in doc["rules"] if x["prefix"] == "198.19.9.0/24"]
    assert added and added[0]["vni"] == 7 and added[0]["remote"] == hosts.hosts["h1"].addr
    r = proc.run(TB + ["tunnel-rules", "list", "--host=-oProxyCommand=x"], check=False,
                 timeout=60)
    assert r.returncode == 2 and "invalid site target" in r.stderr, r.stderr


def test_tbtun_journaled_on_host(hosts: SshHosts) -> None:
    """The pins and the bpffs mount are journaled by the agent on the host: an agent whose
    connection ends undoes them there, with nothing done from this side. Meanwhile
    `tunnel-rules --host` reaches the site's maps over SSH."""
    runs_here("ebpf-vxlan")
    h = hosts.hosts["h2"]
    rid = names.new_run_id(set())
    with Connection.open("h2", options=hosts.options(), name="b") as conn:
        agent = Agent.start(conn, netlink=False)
        site = RemoteSite("b", None, f"tb{hosts.run_id}h2", h.addr, h.addr6, host="h2",
                          agent=agent)
        state = agent.hello["state"]
        obj = f"{state}/tbtun.bpf.o"
        agent.write_file(obj, loader.object_path().read_bytes())
        with Ledger(rid, journal=False) as ledger:
            where = loader.load(ledger, rid, "b", site, obj)
            loader.attach(ledger, None, site.underlay_if, where, "tc", site)
            assert site.exists(loader.map_path(where, "tb_config"))
            assert not loader.run_dir(rid).exists()     # pinned there, not on this machine
            assert loader.filters(None, site.underlay_if, site)["egress"]
            rules_cli_on_the_host(hosts, rid, where)
            journal = agent.read_file(f"{state}/journal.jsonl").decode()
            for kind in ("bpfpins", "tbtun-tc"):
                assert f'"kind": "{kind}"' in journal, journal
            agent.close()           # EOF: the agent undoes its journal on the host
            ledger.entries.clear()  # nothing undone from here
    state_after = host_bpf_state(hosts, "h2")
    assert not state_after["pins"] and not state_after["filters"], state_after
    assert not state_after["bpffs"]


def test_doctor_site_judges_tbtun_on_that_host(hosts: SshHosts) -> None:
    """doctor --site asks the host for bpftool, tc and nsenter (each missing one with that
    distribution's install command) and judges its kernel release against 6.1."""
    r = proc.run(TB + ["doctor", "--site", "h2", "--ssh-config", str(hosts.ssh_config),
                       "--json"], check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for tool in ("bpftool", "tc", "nsenter"):
        assert tool in doc["tools"], sorted(doc["tools"])
    kernel_ok = loader.kernel_too_old(doc["kernel"]) is None
    for kind in ("ebpf-vxlan", "ebpf-geneve"):
        e = doc["tunnels"][kind]
        assert e["available"] == (kernel_ok and all(doc["tools"][t] for t in
                                                    ("bpftool", "tc", "nsenter"))), e
        if not kernel_ok:
            assert any("Linux >= 6.1 needed" in w for w in e["reasons"]), e


def test_cleanup_site_sweeps_tbtun_of_a_killed_agent(hosts: SshHosts) -> None:
    """An agent SIGKILLed with tbtun pinned and attached undoes nothing itself; its journal on
    the host lets `tunbench cleanup --site` remove the filters, the pins and the bpffs mount."""
    runs_here("ebpf-vxlan")
    h = hosts.hosts["h1"]
    rid = names.new_run_id(set())
    with Connection.open("h1", options=hosts.options(), name="crash") as conn:
        agent = Agent.start(conn, netlink=False)
        site = RemoteSite("a", None, f"tb{hosts.run_id}h1", h.addr, h.addr6, host="h1",
                          agent=agent)
        obj = f"{agent.hello['state']}/tbtun.bpf.o"
        agent.write_file(obj, loader.object_path().read_bytes())
        ledger = Ledger(rid, journal=False)
        where = loader.load(ledger, rid, "a", site, obj)
        loader.attach(ledger, None, site.underlay_if, where, "tc", site)
        with Connection.open("h1", options=hosts.options(), name="killer") as other:
            other.run(["kill", "-9", str(agent.hello["pid"])])
        ledger.entries.clear()          # this side forgets: only the host's journal knows
    left = host_bpf_state(hosts, "h1")
    assert left["pins"] and left["filters"], left
    r = proc.run(TB + ["cleanup", "--site", "h1", "--ssh-config", str(hosts.ssh_config)],
                 check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"tbtun-tc tb{hosts.run_id}h1" in r.stdout and "bpfpins /sys/fs/bpf/tb-" in r.stdout
    after = host_bpf_state(hosts, "h1")
    assert not after["pins"] and not after["filters"] and not after["bpffs"], after


def test_a_host_without_bpftool_is_named_before_any_change(hosts: SshHosts,
                                                           tmp_path: Path) -> None:
    """bpftool hidden on h2 (a 0600 empty file bind-mounted over it in that host's mount
    namespace: neither `command -v` nor the sbin search take it): doctor --site names it with
    the install command, and a campaign is refused in one line before anything is changed."""
    runs_here("ebpf-vxlan")
    real = proc.which("bpftool")
    assert real is not None
    h = hosts.hosts["h2"]
    assert h.sshd is not None
    blank = tmp_path / "no-bpftool"
    blank.write_bytes(b"")
    blank.chmod(0o600)
    proc.run(["nsenter", "-t", str(h.sshd.pid), "-m", "mount", "--bind", str(blank), real],
             timeout=10)
    try:
        r = proc.run(TB + ["doctor", "--site", "h2", "--ssh-config", str(hosts.ssh_config),
                           "--json"], check=False, timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["tools"]["bpftool"] is False
        install = doc["install_command"]
        assert doc["missing_tools"]["bpftool"] == f"{install} bpftool"
        assert f"tool bpftool: not installed ({install} bpftool)" in \
            doc["tunnels"]["ebpf-vxlan"]["reasons"]
        exp = spec.build({"experiment": {"duration": 1, "warmup": 0, "repeats": 1},
                          "tunnel": [{"kind": "ebpf-vxlan"}], "workload": [{"name": "ping"}],
                          "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1",
                                    "b": "h2"}}, "test")
        with pytest.raises(UnavailableError) as err:
            run_campaign(exp, tmp_path / "r")
        line = err.value.one_line()
        assert f"site b (h2) lacks bpftool ({install} bpftool there)" in line, line
        assert "site a" not in line and "\n" not in line
    finally:
        proc.run(["nsenter", "-t", str(h.sshd.pid), "-m", "umount", real], timeout=10,
                 check=False)
    assert host_bpf_state(hosts, "h2")["pins"] == []
    assert_clean(hosts)
