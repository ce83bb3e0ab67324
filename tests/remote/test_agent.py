"""The agent shipped over SSH to real sshd "hosts": round trips, files, CPU per core sampled on
the site, netlink, and a connection dropped mid-command (the site's sshd session killed):
the local call fails with one line, the agent on the far side undoes what it started, and
nothing is left under /run/tunbench or in the host's namespace."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts

from tunbench.errors import CommandFailed, UnavailableError
from tunbench.metrics.cpu import parse_proc_stat, usage
from tunbench.remote.agent.client import Agent
from tunbench.remote.transport import Connection, ConnectionLost
from tunbench.testbed import names
from tunbench.testbed.ledger import Ledger

pytestmark = [pytest.mark.netns, pytest.mark.correctness]


def gone(conn: Connection, pid: int) -> bool:
    """The process no longer runs on the site (absent, or a zombie awaiting its reaper: an
    orphan is re-parented to the host's init, which may reap late)."""
    state = conn.run(["ps", "-o", "stat=", "-p", str(pid)], check=False).stdout.strip()
    return state in ("", "Z") or state.startswith("Z")


def leftovers(conn: Connection) -> str:
    """What is under /run/tunbench on the site (empty when everything was undone)."""
    return conn.run(["find", "/run/tunbench", "-mindepth", "1"], check=False).stdout


@pytest.fixture
def agent(hosts: SshHosts) -> Iterator[Agent]:
    conn = Connection.open("h1", options=hosts.options(), name="a")
    a = Agent.start(conn)
    try:
        yield a
    finally:
        a.close()
        try:
            assert leftovers(conn) == ""
        finally:
            conn.close()


def test_round_trips(agent: Agent) -> None:
    assert agent.hello["euid"] == 0 and agent.hello["protocol"] == 1
    tricky = ["a b", "it's", "$HOME", "; x", "x\ny", ""]
    r = agent.run(["printf", "%s\\0", *tricky])
    assert r.stdout.split("\0")[:-1] == tricky
    assert agent.run(["cat"], input="in").stdout == "in"
    assert agent.run(["sh", "-c", "exit 4"], check=False).returncode == 4
    with pytest.raises(CommandFailed, match="on h1: command failed .exit 2.: ls"):
        agent.run(["ls", "/tb-none"])
    with pytest.raises(CommandFailed, match="timed out after 0.5s"):
        agent.run(["sleep", "10"], timeout=0.5)
    with pytest.raises(CommandFailed, match="tb-no-tool: not found on this host"):
        agent.run(["tb-no-tool"])


def test_files_live_on_the_host_only(agent: Agent) -> None:
    """A file written over the agent exists inside the host's private /run, not here."""
    state = agent.hello["state"]
    path = f"{state}/psk"
    agent.write_file(path, b"s3cret-key")
    assert agent.read_file(path) == b"s3cret-key"
    assert agent.conn.run(["stat", "-c", "%a", path]).stdout.strip() == "600"
    assert not Path(path).exists() and not Path(state).exists()
    agent.mkdir(f"{state}/d")
    agent.write_file(f"{state}/d/conf", "x = 1\n", mode=0o644)
    assert agent.conn.run(["stat", "-c", "%a", f"{state}/d/conf"]).stdout.strip() == "644"
    agent.remove(f"{state}/d")
    # a file of the host's own (made without the agent, in the host's private /run)
    agent.conn.run(["sh", "-c", "echo host > /run/tb-hostfile"])
    with pytest.raises(CommandFailed, match="was not created by tunbench: not replaced"):
        agent.write_file("/run/tb-hostfile", b"x")
    with pytest.raises(CommandFailed, match="was not created by tunbench: not removed"):
        agent.remove("/run/tb-hostfile")
    assert agent.conn.run(["cat", "/run/tb-hostfile"]).stdout == "host\n"
    agent.conn.run(["rm", "/run/tb-hostfile"])
    with pytest.raises(CommandFailed, match="no such file"):
        agent.read_file(f"{state}/d/conf")


def test_cpu_per_core_sampled_on_the_site(agent: Agent) -> None:
    cores = int(agent.run(["nproc", "--all"]).stdout)
    first = parse_proc_stat(agent.proc_stat())
    assert len([k for k in first if k != "cpu"]) == cores
    agent.cpu_start(interval=0.2)
    agent.run(["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"])
    # sampled on the site every 0.2 s: taken until three came (a busy host wakes late)
    samples: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
        samples += agent.cpu_take()
    samples += agent.cpu_take(stop=True)
    assert len(samples) >= 3, samples
    u = usage(parse_proc_stat(samples[0]["text"]), parse_proc_stat(samples[-1]["text"]))
    assert set(u) == {"cpu", *(f"cpu{i}" for i in range(cores))}
    assert all(0.0 <= v["busy"] <= 100.0 for v in u.values())
    assert samples[-1]["time"] > samples[0]["time"]


def test_netlink_on_the_site(hosts: SshHosts, agent: Agent) -> None:
    names = {link["ifname"] for link in agent.links()}
    assert names == {"lo", f"tb{hosts.run_id}h1"}      # the host's links, not ours
    agent.link_add("tbag0", "veth", peer={"ifname": "tbag1"})
    agent.addr_add("tbag0", "198.18.201.1/30")
    links = {link["ifname"]: link for link in agent.links()}
    assert {"tbag0", "tbag1"} <= set(links) and links["tbag0"]["kind"] == "veth"
    assert "198.18.201.1/30" in agent.run(["ip", "-o", "addr", "show", "tbag0"]).stdout
    with pytest.raises(CommandFailed, match="not a tunbench name"):
        agent.call("link_del", ifname="lo")
    agent.link_del("tbag0")
    assert "tbag0" not in {link["ifname"] for link in agent.links()}
    agent.link_add("tbag2", "veth", peer={"ifname": "tbag3"})   # left for close() to undo


def test_agent_processes_end_with_the_agent(agent: Agent) -> None:
    p = agent.spawn(["sleep", "300"], f"{agent.hello['state']}/sleep.log")
    assert p.poll() is None
    q = agent.spawn(["sh", "-c", "echo hello; exit 3"], f"{agent.hello['state']}/sh.log")
    assert q.wait(timeout=10) == 3 and q.output() == "hello\n" and q.log_tail(1) == "hello"
    with pytest.raises(CommandFailed, match="sleep on h1 did not finish within 0.2s"):
        p.wait(timeout=0.2)
    assert q.stop() == 3
    agent.close()
    assert gone(agent.conn, p.pid)


def test_connection_dropped_mid_command(hosts: SshHosts) -> None:
    """Kill the sshd session process serving us (one this test's sshd forked): the running
    call fails with one line, and the agent on the host ends what it started and removes its
    state, which a new connection confirms."""
    h1 = hosts.hosts["h1"]
    conn = Connection.open("h1", options=hosts.options(), name="a")
    agent = Agent.start(conn, netlink=True)
    state = agent.hello["state"]
    try:
        agent.link_add("tbdrop0", "veth", peer={"ifname": "tbdrop1"})
        sleeper = agent.spawn(["sleep", "3600"], f"{state}/sleep.log")
        agent.write_file(f"{state}/secret", b"k")
        err: list[BaseException] = []

        def long_call() -> None:
            try:
                agent.run(["sleep", "120.137"], timeout=150)
            except BaseException as exc:  # noqa: BLE001 - checked below
                err.append(exc)

        t = threading.Thread(target=long_call)
        t.start()
        time.sleep(0.5)
        assert h1.kill_sessions()
        t.join(timeout=30)
        assert not t.is_alive()
        assert err and isinstance(err[0], ConnectionLost), err
        assert "connection to h1 (a) lost during run" in err[0].message
        assert "\n" not in err[0].one_line()
        with pytest.raises(ConnectionLost):
            conn.run(["true"])
    finally:
        agent.close()
        conn.close()
    with Connection.open("h1", options=hosts.options(), name="b") as again:
        deadline = time.monotonic() + 20
        while leftovers(again) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftovers(again) == ""
        assert gone(again, sleeper.pid)
        assert gone(again, int(agent.hello["pid"]))      # the agent itself exited
        assert "tbdrop" not in again.run(["ip", "-o", "link"]).stdout
        assert "sleep 120.137" not in again.run(["ps", "-eo", "args"]).stdout


def test_sweep_undoes_a_killed_agent(hosts: SshHosts) -> None:
    """An agent that could not clean up (SIGKILL) leaves its journal; the next agent's sweep
    undoes it."""
    with Connection.open("h2", options=hosts.options(), name="a") as conn:
        first = Agent.start(conn, netlink=False)
        sleeper = first.spawn(["sleep", "3600"], f"{first.hello['state']}/s.log")
        with pytest.raises(CommandFailed, match="tunbench agent on h2 ended during run"):
            first.call("run", argv=["kill", "-KILL", str(first.hello["pid"])])
        assert conn.alive()
        first.close()
        assert first.agent_id in leftovers(conn)
        second = Agent.start(conn, netlink=False)
        undone = second.sweep()
        assert any(first.agent_id in u and str(sleeper.pid) in u for u in undone)
        assert gone(conn, sleeper.pid)
        second.close()
        assert leftovers(conn) == ""


def test_ledger_undo_ends_connection_and_agent(hosts: SshHosts) -> None:
    """A run that never gets to close() (an exception path): undoing its ledger stops the
    local ssh processes, so the agent on the site sees EOF and cleans up there."""
    ledger = Ledger(names.new_run_id(), journal=False)
    conn = Connection.open("h1", options=hosts.options(), name="a", ledger=ledger)
    agent = Agent.start(conn, netlink=False)
    sleeper = agent.spawn(["sleep", "3600"], f"{agent.hello['state']}/s.log")
    assert ledger.close() == []
    assert conn.master.poll() is not None and agent.process.poll() is not None
    assert not conn.control_path.exists() and not agent.err_path.exists()
    with Connection.open("h1", options=hosts.options(), name="b") as again:
        deadline = time.monotonic() + 20
        while leftovers(again) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftovers(again) == "" and gone(again, sleeper.pid)


def test_missing_python_on_the_site_is_one_line(hosts: SshHosts) -> None:
    with Connection.open("h1", options=hosts.options(), name="a") as conn:
        with pytest.raises(UnavailableError) as e:
            Agent.start(conn, python="tb-no-python3")
        assert "tb-no-python3 is not installed" in e.value.message
        assert "\n" not in e.value.one_line()
        assert conn.alive() and leftovers(conn) == ""


def test_default_control_dir_is_private(hosts: SshHosts) -> None:
    from tunbench.remote.transport import CONTROL_DIR
    opts = hosts.options(control_dir=CONTROL_DIR)
    with Connection.open("h1", options=opts, name="a") as conn:
        assert conn.control_path.parent == CONTROL_DIR
        assert conn.control_path.name.startswith("tb-") and conn.control_path.is_socket()
        assert CONTROL_DIR.stat().st_mode & 0o777 == 0o700
    assert not conn.control_path.exists() and not conn.log_path.exists()


def test_clock_offset_between_sites(agent: Agent) -> None:
    """The hosts are namespaces of this machine: one clock, so the measured offset must be
    within the uncertainty (rtt/2) plus scheduling slack of zero."""
    offset, rtt = agent.clock_offset(samples=7)
    assert rtt > 0
    assert abs(offset) <= rtt / 2 + 0.002, (offset, rtt)


def test_private_run_mounts_stay_the_daemons_own(agent: Agent) -> None:
    """spawn(private=...): the program sees a fresh tmpfs on /run (with the kept directory
    bind-mounted back and the asked one made), the same PID the agent journaled; the host's
    /run is untouched. tbagent.privrun refuses to mount outside a new mount namespace."""
    state = str(agent.hello["state"])
    marker = f"{state}/marker"
    agent.write_file(marker, b"kept\n")
    p = agent.spawn(["sh", "-c", 'ls -A /run; cat "$0"; echo pid $$; sleep 30', marker],
                    f"{state}/priv.log",
                    private={"tmpfs": ["/run"], "mkdir": ["/run/tb-made"], "keep": [state]})
    deadline = time.monotonic() + 10
    while "pid" not in (out := agent.read_file(f"{state}/priv.log").decode()):
        assert time.monotonic() < deadline, out
        time.sleep(0.05)
    seen = out.split()
    assert "kept" in seen and f"pid {p.pid}" in out          # exec kept the PID
    # a fresh /run: the kept directory's parent, the one made, and mount(8)'s own utab dir
    assert {"tunbench", "tb-made"} <= set(seen[:seen.index("kept")]) <= {
        "tunbench", "tb-made", "mount"}, out
    assert agent.run(["test", "-e", "/run/tb-made"], check=False).returncode == 1   # host's
    assert agent.run(["ls", "/run/sshd"]).ok                  # the host's /run as it was
    p.stop()
    bad = agent.run(["env", f"PYTHONPATH={state}/agent.pyz", "python3", "-m",
                     "tbagent.privrun", "--tmpfs", "/run", "--", "true"], check=False)
    assert bad.returncode == 2 and "refusing to mount" in bad.stderr, bad
