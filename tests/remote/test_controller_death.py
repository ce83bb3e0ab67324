"""The controller (tunbench itself) dies mid-campaign between two sshd "hosts": the hosts
notice (its ssh processes die with it; the agents' heartbeat ends them even while a
connection outlives it) and undo the run's objects; `tunbench cleanup --run` ends the ssh
masters that outlived it here; `cleanup --site` ends an agent whose controller is gone and
leaves a live one alone.

The controller runs in a subprocess with its own TUNBENCH_STATE_DIR (its journal and ssh
control directory are the test's), so the cleanup run here touches nothing of other runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshhosts import SshHosts

from tunbench import proc
from tunbench.remote.agent.client import Agent
from tunbench.remote.transport import Connection

pytestmark = [pytest.mark.netns, pytest.mark.correctness]

HEARTBEAT = 3           # seconds: the agents' timeout in these tests (recorded, see below)
TB = [sys.executable, "-m", "tunbench"]
CONTROLLER = """
import json, sys
from pathlib import Path
from tunbench import spec
from tunbench.remote import transport
from tunbench.runner import run_campaign
if sys.argv[3] == "untethered":   # a controller whose ssh processes can outlive it
    transport._PDEATHSIG[:] = [False]
HOLD, NTH = (sys.argv[4] or ":0").split(":")
seen = 0
class Rep:
    def campaign_start(self, cases, plans): ...
    def case_start(self, case): ...
    def case_end(self, case, doc): ...
    def campaign_end(self, store): ...
    def phase(self, event):
        global seen
        print("PHASE", event.name, flush=True)
        if event.name == HOLD:
            seen += 1
            if seen == int(NTH):   # held here (its heartbeat goes on) until the test kills it
                sys.stdin.readline()
run_campaign(spec.build(json.loads(sys.argv[1]), "test"), Path(sys.argv[2]), Rep())
"""


@pytest.fixture
def short(tmp_path: Path) -> Iterator[Path]:
    """A short private directory (ssh control socket paths must fit 108 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="tbc-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _data(hosts: SshHosts, kind: str, heartbeat: float, duration: int) -> dict[str, Any]:
    return {"experiment": {"duration": duration, "warmup": 0, "repeats": 1},
            "tunnel": [{"kind": kind}], "workload": [{"name": "stream"}],
            "sites": {"ssh_config": str(hosts.ssh_config), "a": "h1", "b": "h2",
                      "heartbeat": heartbeat}}


def _in_host(hosts: SshHosts, name: str, argv: list[str]) -> str:
    """A look into host `name`'s own mount namespace (its private /run), not over SSH."""
    sshd = hosts.hosts[name].sshd
    assert sshd is not None
    return proc.run(["nsenter", "-t", str(sshd.pid), "-m", "--", *argv], check=False,
                    timeout=10).stdout


def leftovers(hosts: SshHosts) -> list[str]:
    """Everything of a run still on either host: agents and daemons (processes in the host's
    namespace other than sshd), links other than the fixture's, files under /run/tunbench,
    tunbench pins."""
    left = []
    for name, h in hosts.hosts.items():
        for pid in proc.run(["ip", "netns", "pids", h.netns], timeout=10).stdout.split():
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm != "sshd":
                left.append(f"{name}: process {pid} {comm}")
        for ln in proc.run(["ip", "-n", h.netns, "-o", "link"], timeout=10).stdout.splitlines():
            ifname = ln.split(":")[1].strip().split("@")[0]
            if ifname != "lo" and not ifname.startswith(f"tb{hosts.run_id}"):
                left.append(f"{name}: link {ifname}")
        left += [f"{name}: file {f}" for f in _in_host(
            hosts, name, ["find", "/run/tunbench", "-mindepth", "1"]).split()]
        left += [f"{name}: pin {f}" for f in _in_host(hosts, name, ["ls", "/sys/fs/bpf"]).split()
                 if f.startswith("tb-")]
    return left


def ssh_processes(control_dir: Path) -> list[int]:
    """ssh processes here (masters, mux clients) of the controller's control directory."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(control_dir) in cmd and cmd.split("\0")[0].endswith("ssh"):
                out.append(int(d.name))
    return out


def wait_for(cond: Any, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return bool(cond())


def start_controller(hosts: SshHosts, tmp_path: Path, short: Path, kind: str, *,
                     heartbeat: float, tethered: bool, duration: int = 20, hold: str = ""
                     ) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """The controller in a subprocess. hold="PHASE:N": it stops at the Nth start of that phase
    (its heartbeat thread goes on) until the test kills it, so the kill lands in that phase
    however slow the host is (a teardown of 2 s could end, journal and all, while the test
    was still reading the hosts)."""
    env = {**os.environ, "TUNBENCH_STATE_DIR": str(short / "state")}
    p = subprocess.Popen([sys.executable, "-c", CONTROLLER,
                          json.dumps(_data(hosts, kind, heartbeat, duration)), str(tmp_path / "r"),
                          "tethered" if tethered else "untethered", hold],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return p, env


def kill(p: subprocess.Popen[str]) -> None:
    """SIGKILL the controller (stopped or not): no chance to clean up."""
    if p.poll() is None:
        p.kill()
    p.wait(timeout=10)


def wait_phase(p: subprocess.Popen[str], phase: str, nth: int = 1) -> None:
    assert p.stdout is not None
    seen = 0
    for line in p.stdout:
        if line.startswith(f"PHASE {phase}"):
            seen += 1
            if seen == nth:
                return
    p.wait(timeout=30)
    raise AssertionError(f"the controller ended before {phase}: {p.stderr.read() if p.stderr else ''}")


def recorded_controller(hosts: SshHosts) -> list[dict[str, Any]]:
    """What each agent on the hosts recorded of its controller (controller.json)."""
    out = []
    for name in hosts.hosts:
        for f in _in_host(hosts, name, ["find", "/run/tunbench", "-name",
                                        "controller.json"]).split():
            text = _in_host(hosts, name, ["cat", f])
            if text.strip():
                out.append(json.loads(text))
    return out


def run_id_of(state: Path) -> str:
    journals = sorted(state.glob("*.jsonl"))
    assert journals, "the controller left no journal"
    return journals[-1].stem


@pytest.mark.parametrize("kind", ["wireguard", "vxlan"])
@pytest.mark.parametrize(("phase", "nth"), [("bring-up", 2), ("measuring", 1),
                                            ("teardown", 1)])
def test_controller_killed_hosts_clean_up(hosts: SshHosts, tmp_path: Path, short: Path,
                                          kind: str,
                                          phase: str, nth: int) -> None:
    """SIGKILL, its ssh masters left running (as where setpriv cannot tether them): within
    the heartbeat timeout nothing of the run is on either host; `tunbench cleanup --run`
    ends the masters here."""
    p, env = start_controller(hosts, tmp_path, short, kind, heartbeat=HEARTBEAT,
                              tethered=False, duration=20 if phase == "measuring" else 2,
                              hold=f"{phase}:{nth}")
    try:
        wait_phase(p, phase, nth)
        ctl = recorded_controller(hosts)
        assert [c["pid"] for c in ctl] == [p.pid, p.pid], ctl   # both agents know it
        timeout = max(float(c["heartbeat_s"]) for c in ctl)
        assert timeout == HEARTBEAT
        rid = run_id_of(short / "state")
    finally:
        kill(p)
    control = short / "state" / "ssh"
    masters = ssh_processes(control)
    assert masters, "no ssh master outlived the controller: nothing was tested"
    # the agents' own undo (stopping daemons, 3 s grace each) comes on top of the timeout
    assert wait_for(lambda: not leftovers(hosts), 3 * timeout + 20), leftovers(hosts)
    r = subprocess.run(TB + ["cleanup", "--run", rid], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ssh master" in r.stdout, r.stdout
    assert ssh_processes(control) == []
    assert not control.exists() or list(control.iterdir()) == []


def test_frozen_controller_is_noticed_by_its_heartbeat(hosts: SshHosts, tmp_path: Path,
                                                      short: Path) -> None:
    """SIGSTOP (a laptop that sleeps): every pipe and connection stays open, only the
    heartbeat stops; the hosts end the run by themselves within the timeout."""
    p, env = start_controller(hosts, tmp_path, short, "vxlan", heartbeat=HEARTBEAT,
                              tethered=True)
    try:
        wait_phase(p, "measuring")
        p.send_signal(signal.SIGSTOP)
        assert wait_for(lambda: not leftovers(hosts), 3 * HEARTBEAT + 20), leftovers(hosts)
        assert ssh_processes(short / "state" / "ssh"), "the connections stayed up"
    finally:
        kill(p)
    # tethered: its ssh processes end with it, before any cleanup
    assert wait_for(lambda: not ssh_processes(short / "state" / "ssh"), 10)


def test_tethered_ssh_processes_die_with_the_controller(hosts: SshHosts, tmp_path: Path,
                                                        short: Path) -> None:
    p, env = start_controller(hosts, tmp_path, short, "vxlan", heartbeat=HEARTBEAT,
                              tethered=True)
    try:
        wait_phase(p, "measuring")
        assert ssh_processes(short / "state" / "ssh")
    finally:
        kill(p)
    assert wait_for(lambda: not ssh_processes(short / "state" / "ssh"), 10)
    assert wait_for(lambda: not leftovers(hosts), 3 * HEARTBEAT + 20), leftovers(hosts)


AGENT_HOLDER = """
import subprocess, sys, time
from pathlib import Path
from tunbench.remote import transport
from tunbench.remote.agent.client import Agent
from tunbench.remote.transport import Connection, SshOptions
transport._PDEATHSIG[:] = [False]
opts = SshOptions(config_file=Path(sys.argv[1]), control_dir=Path(sys.argv[2]), heartbeat=0)
conn = Connection.open("h1", options=opts, name="gone")
agent = Agent.start(conn, netlink=True)
p = agent.spawn(["sleep", "300"], agent.hello["state"] + "/sleep.log")
agent.link_add("tb" + sys.argv[3] + "zz", "veth", peer={"ifname": "tb" + sys.argv[3] + "zy"})
# the agent's channel outlives us: a process of ours holds its stdin open (no EOF there)
keeper = subprocess.Popen(["sleep", "300"], pass_fds=[agent.process.popen.stdin.fileno()])
print(agent.hello["pid"], p.pid, keeper.pid, flush=True)
time.sleep(300)
"""


def test_cleanup_site_ends_the_agent_of_a_dead_controller_only(hosts: SshHosts,
                                                               short: Path) -> None:
    """Heartbeat off and the connection kept up (the master outlives its controller): the
    agent and its objects stay after the SIGKILL; `cleanup --site` ends them, and leaves the
    agent of a live controller (this test) alone."""
    ctl = short / "ctl"
    holder = subprocess.Popen([sys.executable, "-c", AGENT_HOLDER, str(hosts.ssh_config),
                               str(ctl), hosts.run_id], stdout=subprocess.PIPE, text=True)
    keeper = 0
    try:
        assert holder.stdout is not None
        agent_pid, sleeper, keeper = (int(x) for x in holder.stdout.readline().split())
        holder.kill()
        holder.wait(timeout=10)
        _test_body(hosts, ctl, agent_pid, sleeper)
    finally:
        if holder.poll() is None:
            holder.kill()
        if keeper:
            proc.kill_pid(keeper, grace=1.0)
    # the dead controller's master: what `tunbench cleanup` does for its control directory
    from tunbench.remote import transport
    assert any("ssh master" in x for x in transport.sweep_control_dir(ctl))
    assert ssh_processes(ctl) == []
    assert not leftovers(hosts), leftovers(hosts)


def _test_body(hosts: SshHosts, ctl: Path, agent_pid: int, sleeper: int) -> None:
    dead_link = f"tb{hosts.run_id}zz"
    with Connection.open("h1", options=hosts.options(), name="live") as conn:
        live = Agent.start(conn, netlink=False)
        try:
            live_sleep = live.spawn(["sleep", "300"], f"{live.hello['state']}/s.log")
            assert Path(f"/proc/{agent_pid}").exists(), "the agent ended: nothing to test"
            assert dead_link in proc.run(["ip", "-n", hosts.hosts["h1"].netns, "-o", "link"],
                                         timeout=10).stdout
            r = subprocess.run(TB + ["cleanup", "--site", "h1", "--ssh-config",
                                     str(hosts.ssh_config)], capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, r.stderr
            assert f"process {sleeper}" in r.stdout and "is gone" in r.stdout, r.stdout
            assert f"kept on h1: {Path(live.hello['state']).name}: a live run" in r.stdout, \
                r.stdout
            assert not Path(f"/proc/{agent_pid}").exists()
            assert not Path(f"/proc/{sleeper}").exists()
            assert dead_link not in proc.run(["ip", "-n", hosts.hosts["h1"].netns, "-o",
                                              "link"], timeout=10).stdout
            assert live.alive and live_sleep.poll() is None   # the live run is untouched
        finally:
            live.close()
