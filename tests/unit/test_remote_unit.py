"""Remote pieces that need no root: ssh error classification on captured ssh output, the one
quoting point, target validation, the zipapp, and the agent's request handling run locally."""

from __future__ import annotations

import base64
import json
import os
import shlex
import sys
import time
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.errors import SpecError
from tunbench.remote import transport
from tunbench.remote.agent import client, core
from tunbench.remote.agent import journal as journal_mod
from tunbench.remote.transport import ConnectError, check_target, classify, remote_command

CAPTURES = {   # tests/data/ssh/<name>.txt: stderr of OpenSSH 9.2 -M -N with our options
    "unknown-host-key": (ConnectError, "host key is unknown"),
    "changed-host-key": (ConnectError, "host key CHANGED"),
    "refused": (ConnectError, "connection refused on port 22"),
    "timeout": (ConnectError, "connection timed out after 2s"),
    "no-route": (ConnectError, "no route to host"),
    "auth-wrong-user": (ConnectError, "authentication refused (publickey)"),
    "dns": (SpecError, "unknown host 'tb-no-such-host.invalid'"),
}


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_classify_captured_ssh_errors(data_dir: Path, name: str) -> None:
    cls, text = CAPTURES[name]
    target = "tb-no-such-host.invalid" if name == "dns" else "root@198.18.200.11"
    err = classify((data_dir / "ssh" / f"{name}.txt").read_text(), target, connect_timeout=2)
    assert type(err) is cls
    assert text in err.message
    assert err.hint and "\n" not in err.one_line()


def test_changed_key_hint_names_the_host() -> None:
    text = (Path(__file__).parent.parent / "data" / "ssh" / "changed-host-key.txt").read_text()
    assert "ssh-keygen -R 198.18.200.11" in classify(text, "root@198.18.200.11").hint


TRICKY = ["printf", "%s\n", "a b", "it's", '"q"', "$HOME", "`id`", "; rm -rf /", "x\ny",
          "back\\slash", "*", "", "-n", "~", "a|b&c>d<e", "tab\there", "ünïcode"]


def test_remote_command_round_trips_through_a_posix_shell_parser() -> None:
    assert shlex.split(remote_command(TRICKY)) == TRICKY


def test_remote_command_refuses_shell_strings() -> None:
    with pytest.raises(TypeError, match="never a shell string"):
        remote_command("ls -l")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["-oProxyCommand=x", "a b", "", "user@", "@host", "h;ls",
                                 "h\nx", "$(id)"])
def test_bad_targets_are_spec_errors(bad: str) -> None:
    with pytest.raises(SpecError, match="invalid site target"):
        check_target(bad)


@pytest.mark.parametrize("good", ["host", "root@198.18.200.11", "me@db-1.example.org",
                                  "my_alias", "2001:db8::1"])
def test_good_targets(good: str) -> None:
    assert check_target(good) == good


def test_zipapp_holds_the_agent_and_pyroute2() -> None:
    names = zipfile.ZipFile(BytesIO(client.build_zipapp(netlink=True))).namelist()
    assert {"tbagent/core.py", "tbagent/journal.py", "tbagent/nl.py",
            "pyroute2/__init__.py"} <= set(names)
    small = zipfile.ZipFile(BytesIO(client.build_zipapp(netlink=False))).namelist()
    assert not any(n.startswith("pyroute2/") for n in small)


def test_zipapp_ships_bytecode_the_site_python_runs(tmp_path: Path) -> None:
    """Every module of the zip has its bytecode beside it, which a Python of this version
    imports as it is (the module's file is the .pyc); with bytecode of another version
    (another magic number) the same zip still imports, from the sources."""
    data = client.build_zipapp(netlink=True)
    names = set(zipfile.ZipFile(BytesIO(data)).namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert {n[:-3] + ".pyc" for n in sources} == names - sources
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tbagent.core, tbagent.nl; "
            "from pyroute2 import IPRoute; import pyroute2; "
            "print(tbagent.core.__file__, pyroute2.__file__)")
    good = tmp_path / "agent.pyz"
    good.write_bytes(data)
    r = proc.run([sys.executable, "-I", "-S", "-c", code, str(good)], timeout=60)
    assert [f.rsplit("/", 2)[-2:] for f in r.stdout.split()] == [
        ["tbagent", "core.pyc"], ["pyroute2", "__init__.pyc"]], r.stdout
    other = tmp_path / "other.pyz"   # as a site of another Python version sees it
    with zipfile.ZipFile(BytesIO(data)) as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            raw = src.read(info)
            dst.writestr(info, b"\x00\x00\r\n" + raw[4:] if info.filename.endswith(".pyc")
                         else raw)
    r = proc.run([sys.executable, "-I", "-S", "-c", code, str(other)], timeout=60)
    assert [f.rsplit("/", 2)[-2:] for f in r.stdout.split()] == [
        ["tbagent", "core.py"], ["pyroute2", "__init__.py"]], r.stdout


def _req(agent: core.Agent, op: str, **args: object) -> dict:
    reply = agent.handle(json.dumps({"id": 3, "op": op, "args": args}).encode())
    assert reply["id"] == 3
    return reply


def test_agent_ops_and_undo_in_a_local_state_dir(tmp_path: Path) -> None:
    """The agent's request handling, run here on real processes and files (no SSH)."""
    state = tmp_path / "tb-unit-a"
    state.mkdir(mode=0o700)
    agent = core.Agent(str(state))
    r = _req(agent, "run", argv=["sh", "-c", 'printf "%s" "$1"; echo err >&2; exit 3', "x",
                                 "a b"])
    assert r["ok"] and r["result"] == {"returncode": 3, "stdout": "a b", "stderr": "err\n"}
    r = _req(agent, "run", argv=["cat"], input="through stdin")
    assert r["result"]["stdout"] == "through stdin"
    assert _req(agent, "run", argv=["sleep", "60"], timeout=0.3)["type"] == "timeout"
    assert _req(agent, "run", argv=["tb-no-such-tool"])["type"] == "notfound"
    secret = tmp_path / "psk"
    assert _req(agent, "write_file", path=str(secret),
                data=base64.b64encode(b"s3cret").decode(), mode=0o600)["ok"]
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.read_bytes() == b"s3cret"
    sp = _req(agent, "spawn", argv=["sleep", "60"], log=str(tmp_path / "sleep.log"))["result"]
    assert _req(agent, "poll", pid=sp["pid"])["result"]["returncode"] is None
    assert _req(agent, "stop", pid=os.getpid())["type"] == "notours"
    sp2 = _req(agent, "spawn", argv=["sleep", "61"], log=str(tmp_path / "s2.log"))["result"]
    journal = [json.loads(x) for x in (state / "journal.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in journal] == ["path", "path", "process", "path", "process"]
    assert _req(agent, "stop", pid=sp["pid"], grace=1)["result"]["returncode"] == -15
    assert _req(agent, "bogus")["type"] == "protocol"
    assert agent.close() == []
    assert not secret.exists() and not (tmp_path / "s2.log").exists()
    assert core.starttime(sp2["pid"]) is None   # the still-running one was ended
    assert not state.exists()


# A daemon's process tree as sshd's looks a moment after a login: one child still titled as
# in authentication (argv[0] "sshd: [net]", what /proc/PID/cmdline shows) that exits on its
# own after 2 s, and one that stays (the session)
TITLED = "import os, shutil; os.execv(shutil.which('sleep'), ['sshd: [net]', '2'])"
TREE = ["sh", "-c", '"$1" -c "$2" & sleep 60 & wait', "tb-daemon", sys.executable, TITLED]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _titled_and_survivor(top: int) -> tuple[int, int]:
    """The PIDs of the tree's titled child and of the one that stays, once both run."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = {_cmdline(k): k for k in proc.descendants(top)}
        titled = [k for c, k in kids.items() if c.startswith(b"sshd: [net]\x00")]
        if titled and b"sleep\x0060\x00" in kids:
            return titled[0], kids[b"sleep\x0060\x00"]
        time.sleep(0.01)
    raise AssertionError(f"the tree below {top} did not start: {list(kids)}")


@pytest.mark.parametrize("where", ["local", "agent"])
def test_adopt_waits_until_no_child_has_a_settle_title(where: str, tmp_path: Path) -> None:
    """adopt with settle_titles, on real processes: on this host (Site.adopt_children) and
    by a remote site's agent (op_adopt), one wait (proc.settle_descendants): it returns only
    once the titled child has exited, and adopts the child that stays, not the gone one."""
    from tunbench.testbed.base import Site
    from tunbench.testbed.ledger import Ledger
    ledger = Ledger("tbunitadopt", journal=False)
    agent = None
    if where == "local":
        daemon = proc.spawn(TREE, label="tb-daemon")
        top = daemon.pid
    else:
        state = tmp_path / "tb-unit-adopt"
        state.mkdir(mode=0o700)
        agent = core.Agent(str(state))
        top = _req(agent, "spawn", argv=TREE, log=str(tmp_path / "d.log"))["result"]["pid"]
    try:
        titled, survivor = _titled_and_survivor(top)
        # the wait itself: at once without titles, False when its time runs out
        assert proc.settle_descendants(top, (), 0.0)
        assert not proc.settle_descendants(top, ("[net]",), 0.05)
        assert proc.pid_alive(titled)       # still there when adopt is called
        if agent is None:
            site = Site("b", None, "tb-x", "192.0.2.2", "2001:db8::2")
            adopted = site.adopt_children(ledger, daemon, "tb-session", grace=1.0,
                                          settle_titles=("[net]",), settle_timeout=10.0)
            assert [e["pid"] for e in ledger.entries] == [survivor]
        else:
            r = _req(agent, "adopt", pid=top, grace=1.0, settle_titles=["[net]"],
                     settle_timeout=10.0)
            adopted = [c["pid"] for c in r["result"]["processes"]]
        assert not proc.pid_alive(titled)   # it returned only after the titled child exited
        assert adopted == [survivor]
    finally:
        if agent is None:
            assert ledger.undo_all() == []
            daemon.stop(grace=1.0)
        else:
            assert agent.close() == []
    assert not proc.pid_alive(survivor)


def test_spawn_piped_is_a_line_channel(tmp_path: Path) -> None:
    """proc.spawn_piped: what the agent's SSH session is built on (stdin/stdout pipes)."""
    from tunbench import proc
    p = proc.spawn_piped(["sh", "-c", "read -r x; echo \"got $x\"; echo oops >&2"],
                         stderr_path=tmp_path / "err")
    assert p.popen.stdin is not None and p.popen.stdout is not None
    p.popen.stdin.write(b"ping\n")
    p.popen.stdin.close()
    assert p.popen.stdout.readline() == b"got ping\n"
    assert p.wait(timeout=10) == 0
    p.popen.stdout.close()
    assert (tmp_path / "err").read_text() == "oops\n"
    with pytest.raises(TypeError, match="never a shell string"):
        proc.spawn_piped("cat", stderr_path=tmp_path / "e2")  # type: ignore[arg-type]


def test_bpfhost_undo_only_touches_tunbench_objects() -> None:
    """The undo the agent runs on a host from its journal: tbtun's tc filters by their
    priority (or the clsact qdisc it created), pins only under /sys/fs/bpf/tb-<run>, bpffs
    only on /sys/fs/bpf, whatever an entry says."""
    from tunbench.remote.agent import bpfhost
    ran: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str]:
        ran.append(argv)
        return 0, ""

    assert bpfhost.tc_undo_argvs({"name": "eth1", "qdisc": False, "xdp": False}) == [
        ["tc", "filter", "del", "dev", "eth1", "egress", "prio", "0x7b"],
        ["tc", "filter", "del", "dev", "eth1", "ingress", "prio", "0x7b"]]
    assert bpfhost.tc_undo_argvs({"name": "eth1", "qdisc": True, "xdp": True}) == [
        ["tc", "qdisc", "del", "dev", "eth1", "clsact"],
        ["ip", "link", "set", "dev", "eth1", "xdpdrv", "off"]]
    assert bpfhost.tc_undo_argvs({"name": "v", "netns": "tb-x-a"})[0][:2] == [
        "nsenter", "--net=/run/netns/tb-x-a"]
    for bad in ("/sys/fs/bpf", "/sys/fs/bpf/cilium", "/sys/fs/bpf/tb-1/../x", "/etc",
                "/sys/fs/bpf/tb-abcde/a"):
        with pytest.raises(OSError, match="not a tunbench pin directory"):
            bpfhost.undo_pins({"kind": "bpfpins", "path": bad}, run)
    with pytest.raises(OSError, match="not unmounted"):
        bpfhost.undo_bpffs({"kind": "bpffs", "path": "/mnt"}, run)
    # tcx: no tc filter to delete (the links go by unpinning), XDP still detached
    assert bpfhost.tc_undo_argvs({"name": "eth1", "tcx": True, "xdp": False}) == []
    assert bpfhost.tc_undo_argvs({"name": "eth1", "tcx": True, "xdp": True}) == [
        ["ip", "link", "set", "dev", "eth1", "xdpdrv", "off"]]
    for bad in ("/etc/passwd", "/sys/fs/bpf/cilium/link", "/sys/fs/bpf/tb-1/../../etc/x"):
        with pytest.raises(OSError, match="not in a tunbench pin directory"):
            bpfhost.undo_tcx({"kind": "tbtun-tc", "name": "eth1", "links": [bad]}, run)
        with pytest.raises(OSError, match="not in a tunbench pin directory"):
            bpfhost.tcx_attach(None, "lo", "egress", "/sys/fs/bpf/tb-x/a/tb_encap", bad)
    assert ran == []
    mounts = "bpf /sys/fs/bpf bpf rw 0 0\nsysfs /sys sysfs rw 0 0\n"
    assert bpfhost.mounted(mounts, "/sys/fs/bpf") and not bpfhost.mounted(mounts, "/sys")


def test_agent_journals_only_bpf_host_objects(tmp_path: Path) -> None:
    """host_record accepts tbtun's kinds only; host_undo of something never journaled is
    "already gone" (notfound), which teardown skips."""
    state = tmp_path / "tb-state"
    state.mkdir()
    agent = core.Agent(str(state))
    bad = _req(agent, "host_record", entry={"kind": "process", "pid": 1})
    assert not bad["ok"] and bad["type"] == "protocol", bad
    gone = _req(agent, "host_undo", entry={"kind": "bpfpins", "path": "/sys/fs/bpf/tb-zzzzz"})
    assert not gone["ok"] and gone["type"] == "notfound" and "no such" in gone["error"]
    ok = _req(agent, "host_record", entry={"kind": "tbtun-tc", "netns": None,
                                           "name": "tbnosuchdev0", "qdisc": False})
    assert ok["ok"], ok
    journal = (state / "journal.jsonl").read_text()
    assert '"kind": "tbtun-tc"' in journal and '"name": "tbnosuchdev0"' in journal
    assert _req(agent, "host_undo", entry={"kind": "tbtun-tc", "netns": None,
                                           "name": "tbnosuchdev0"})["ok"]   # device gone: fine
    assert "tbnosuchdev0" not in (state / "journal.jsonl").read_text()


def test_agent_journals_links_a_command_will_make(tmp_path: Path) -> None:
    """link_journal (the hub testbed's `ip -batch` on a host): tunbench names journaled
    before they exist, anything else refused; undoing a link never made is fine."""
    state = tmp_path / "tb-state"
    state.mkdir()
    agent = core.Agent(str(state))
    bad = _req(agent, "link_journal", ifnames=["eth0"])
    assert not bad["ok"] and "not a tunbench name" in bad["error"], bad
    assert _req(agent, "link_journal", ifnames=["tbzzzzzv1", "tbzzzzzi"])["ok"]
    journal = (state / "journal.jsonl").read_text()
    assert '"ifname": "tbzzzzzv1"' in journal and '"ifname": "tbzzzzzi"' in journal
    assert "eth0" not in journal
    assert journal_mod.undo(agent.journal.entries) == []   # never made: nothing to delete


def test_sweep_control_dir_removes_files_of_dead_processes_only(tmp_path: Path) -> None:
    """A connection killed with SIGKILL leaves its master's log (and socket) in the control
    directory: `tunbench cleanup` removes those of dead PIDs and nothing else."""
    gone = proc.spawn(["true"], label="exits-at-once")   # a real process, already exited
    assert gone.wait(timeout=10) == 0
    stale = [tmp_path / f"tb-{gone.pid}-954268671-a.log",
             tmp_path / f"tb-{gone.pid}-954268671-a.sock"]
    live = tmp_path / f"tb-{os.getpid()}-12-site.log"
    other = tmp_path / "notes.txt"
    for f in (*stale, live, other):
        f.write_text("Connection to 198.18.200.11 closed by remote host.\n")
    removed = transport.sweep_control_dir(tmp_path)
    assert sorted(removed) == sorted(f"ssh control file {f}" for f in stale)
    assert not any(f.exists() for f in stale) and live.exists() and other.exists()
    assert transport.sweep_control_dir(tmp_path / "absent") == []


def test_sweep_control_dir_ends_masters_of_dead_controllers_only(tmp_path: Path) -> None:
    """A master that outlived its controller (no setpriv tether) is ended by PID and start
    time, with its files; a live controller's master and files stay; `controller` restricts
    the sweep to one controller (`cleanup --run`)."""
    gone = proc.spawn(["true"], label="dead-controller")
    assert gone.wait(timeout=10) == 0
    orphan = proc.spawn(["sleep", "300"], label="orphan-master")
    kept = proc.spawn(["sleep", "300"], label="live-master")
    try:
        me = os.getpid()
        for ctl, m, name in ((gone, orphan, f"tb-{gone.pid}-1-a"), (None, kept, f"tb-{me}-2-b")):
            (tmp_path / f"{name}.master").write_text(json.dumps({
                "pid": m.pid, "starttime": m.starttime, "target": "h",
                "controller_pid": ctl.pid if ctl else me,
                "controller_starttime": ctl.starttime if ctl else proc.proc_starttime(me)}))
            (tmp_path / f"{name}.log").write_text("")
        (tmp_path / f"tb-{gone.pid}-1-a.tb-0a1b2c-a.err").write_text("")
        assert transport.sweep_control_dir(tmp_path, controller=(me, 1)) == []
        removed = transport.sweep_control_dir(tmp_path)
        assert f"ssh master {orphan.pid} to h (controller {gone.pid} is gone)" in removed
        assert orphan.poll() is not None and kept.poll() is None
        assert sorted(f.name for f in tmp_path.iterdir()) == [f"tb-{me}-2-b.log",
                                                             f"tb-{me}-2-b.master"]
    finally:
        orphan.stop()
        kept.stop()


def test_heartbeat_in_sites_is_checked() -> None:
    from tunbench import spec
    base = {"tunnel": [{"kind": "native"}], "workload": [{"name": "ping"}]}
    exp = spec.build({**base, "sites": {"a": "h1", "b": "h2", "heartbeat": 5}}, "t")
    assert exp.heartbeat == 5.0 and exp.to_dict()["heartbeat"] == 5.0
    assert spec.build({**base, "sites": {"a": "h1", "b": "h2", "heartbeat": 0}}, "t").heartbeat == 0
    for bad in (1, -3, "5", True, 7200):
        with pytest.raises(SpecError) as err:
            spec.build({**base, "sites": {"a": "h1", "b": "h2", "heartbeat": bad}}, "t")
        assert "sites.heartbeat" in err.value.one_line()


def test_cleanup_site_judges_a_controller_by_where_it_ran() -> None:
    from tunbench.remote.sitecheck import controller_gone
    here = journal_mod.machine_identity()
    dead = proc.spawn(["true"], label="dead")
    dead.wait(timeout=10)
    me = {**here, "pid": os.getpid(), "starttime": proc.proc_starttime(os.getpid()),
          "heartbeat_s": 30}
    assert controller_gone({"controller": me, "beat_age": 1.0}, here) is None
    gone = controller_gone({"controller": {**me, "pid": dead.pid,
                                           "starttime": dead.starttime}}, here)
    assert gone == f"its controller, PID {dead.pid} on this machine, is gone"
    other = {**me, "boot_id": "another-kernel"}
    assert controller_gone({"controller": other, "beat_age": 10.0}, here) is None
    assert "no heartbeat from its controller for 61s" in str(
        controller_gone({"controller": other, "beat_age": 61.0}, here))
    assert controller_gone({"controller": {**other, "heartbeat_s": 0}, "beat_age": None},
                           here) is None
    assert controller_gone({"controller": None}, here) is None
