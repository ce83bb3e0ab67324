"""The SSH transport against real sshd "hosts" (namespaces, see sshhosts.py): commands arrive
verbatim, processes are stopped by remote PID, secrets land 0600, and every way a connection
can fail is one clear line."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshhosts import SshHosts, keygen

from tunbench import proc
from tunbench.errors import CommandFailed, SpecError
from tunbench.remote.transport import ConnectError, Connection, ConnectionLost

pytestmark = [pytest.mark.netns, pytest.mark.correctness]

TRICKY = ["a b", "it's", '"double"', "$HOME", "$(id)", "`id`", "; touch /tmp/tb-pwned",
          "x\ny", "back\\slash", "*", "", "-n", "~", "a|b&c>d<e", "tab\there", "ünïcode", "#"]
DUMP = "import json, sys; print(json.dumps(sys.argv[1:]))"


@pytest.fixture
def conn(hosts: SshHosts) -> Iterator[Connection]:
    c = Connection.open("h1", options=hosts.options(), name="a")
    try:
        yield c
    finally:
        c.close()
    assert not c.control_path.exists()
    assert list((hosts.dir / "ctl").iterdir()) == []


def test_run_delivers_tricky_arguments_verbatim(conn: Connection) -> None:
    r = conn.run(["python3", "-c", DUMP, *TRICKY])
    assert json.loads(r.stdout) == TRICKY
    assert r.argv[:2] == ["python3", "-c"]
    assert not Path("/tmp/tb-pwned").exists()
    nul = conn.run(["printf", "%s\\0", *TRICKY]).stdout.split("\0")[:-1]
    assert nul == TRICKY


def test_run_status_input_and_failure_line(conn: Connection) -> None:
    assert conn.run(["cat"], input="over stdin\n").stdout == "over stdin\n"
    assert conn.run(["sh", "-c", "exit 7"], check=False).returncode == 7
    with pytest.raises(Exception) as e:
        conn.run(["ls", "/tb-nonexistent"])
    assert "on h1: command failed (exit 2)" in str(e.value) and "\n" not in str(e.value)


def test_runs_on_the_host_not_here(hosts: SshHosts, conn: Connection) -> None:
    """No local shortcut: what the host sees is its own (namespace, private /run)."""
    mine = f"/run/tb-proof-{os.getpid()}"
    conn.run(["sh", "-c", 'echo host > "$1"', "tb", mine])
    assert conn.run(["cat", mine]).stdout == "host\n"
    assert not Path(mine).exists()
    links = conn.run(["ip", "-o", "link", "show"]).stdout
    assert hosts.run_id in links and "eth0" not in links
    conn.run(["rm", mine])


def test_spawn_and_stop_by_remote_pid(conn: Connection) -> None:
    p = conn.spawn(["sleep", "300"], "/run/tb-sleep.log")
    assert p.poll() is None
    stat = conn.run(["cat", f"/proc/{p.pid}/stat"]).stdout
    assert "(sleep)" in stat and int(stat.rsplit(")", 1)[1].split()[19]) == p.starttime
    p.stop(grace=1)
    assert p.poll() is not None
    assert conn.run(["test", "-e", f"/proc/{p.pid}"], check=False).returncode == 1
    out = conn.spawn(["sh", "-c", "echo spawned-output; exit 5"], "/run/tb-echo.log")
    assert out.wait(timeout=10) == 5
    assert conn.run(["cat", "/run/tb-echo.log"]).stdout == "spawned-output\n"
    conn.run(["rm", "-f", "/run/tb-echo.log", "/run/tb-sleep.log"])


def test_stop_never_signals_a_reused_pid(conn: Connection) -> None:
    p = conn.spawn(["sleep", "300"], "/run/tb-s.log")
    real = p.starttime
    p.starttime = real + 1            # as if the PID now belonged to another process
    p.stop(grace=1)
    assert conn.run(["test", "-e", f"/proc/{p.pid}"], check=False).returncode == 0
    p.starttime = real
    p.stop(grace=1)
    assert conn.run(["test", "-e", f"/proc/{p.pid}"], check=False).returncode == 1
    conn.run(["rm", "-f", "/run/tb-s.log"])


def test_put_file_secret_0600_never_printed(hosts: SshHosts, conn: Connection,
                                            capfd: pytest.CaptureFixture[str]) -> None:
    secret = os.urandom(32).hex()
    conn.put_file(secret.encode(), "/run/tb-psk", mode=0o600)
    assert conn.run(["stat", "-c", "%a %u %s", "/run/tb-psk"]).stdout.split() == \
        ["600", "0", str(len(secret))]
    assert conn.run(["sha256sum", "/run/tb-psk"]).stdout.split()[0] == \
        __import__("hashlib").sha256(secret.encode()).hexdigest()
    conn.put_file(b"\x00\xffbinary", "/run/tb-bin", mode=0o644)
    assert conn.run(["stat", "-c", "%a", "/run/tb-bin"]).stdout.strip() == "644"
    conn.run(["rm", "/run/tb-psk", "/run/tb-bin"])
    seen = capfd.readouterr()
    assert secret not in seen.out + seen.err
    assert secret not in conn.master.output()
    assert secret not in hosts.hosts["h1"].log()
    assert conn.run(["ls", "/run"]).stdout.count("tb-psk") == 0   # no temporary left


def test_two_sites_at_once(hosts: SshHosts) -> None:
    with Connection.open("h1", options=hosts.options(), name="a") as a, \
            Connection.open("h2", options=hosts.options(), name="b") as b:
        assert a.run(["cat", "/proc/sys/kernel/hostname"]).ok
        ips = {c.name: c.run(["ip", "-4", "-o", "addr", "show", "scope", "global"]).stdout
               for c in (a, b)}
        assert hosts.hosts["h1"].addr in ips["a"] and hosts.hosts["h2"].addr in ips["b"]


def test_lost_master_never_falls_back_to_a_new_connection(hosts: SshHosts) -> None:
    c = Connection.open("h1", options=hosts.options(), name="a")
    try:
        accepted = hosts.hosts["h1"].log().count("Accepted publickey")
        c.master.stop()                   # our own local ssh master process
        with pytest.raises(ConnectionLost, match="connection to h1 .* lost"):
            c.run(["true"])
        assert hosts.hosts["h1"].log().count("Accepted publickey") == accepted
    finally:
        c.close()


def _one_line_error(hosts: SshHosts, target: str, exc: type, text: str, **kw: object) -> None:
    with pytest.raises(exc) as e:
        Connection.open(target, options=hosts.options(**kw), name="x")
    assert text in e.value.message, e.value.message
    assert "\n" not in e.value.one_line() and e.value.hint
    assert list((hosts.dir / "ctl").iterdir()) == []   # no socket, no log left


def test_unknown_host_key_is_refused(hosts: SshHosts) -> None:
    try:
        hosts.known_hosts.write_text("")
        _one_line_error(hosts, "h1", ConnectError, "host key is unknown")
        assert hosts.known_hosts.read_text() == ""    # never recorded behind the user's back
    finally:
        hosts.write_known_hosts()


def test_changed_host_key_is_refused(hosts: SshHosts) -> None:
    other = hosts.dir / "impostor_key"
    if not other.exists():
        keygen(other, "impostor")
    pub = Path(f"{other}.pub").read_text().split()
    try:
        hosts.known_hosts.write_text(f"{hosts.hosts['h1'].addr} {pub[0]} {pub[1]}\n")
        _one_line_error(hosts, "h1", ConnectError, "host key CHANGED")
    finally:
        hosts.write_known_hosts()


def test_wrong_user_and_wrong_key_are_auth_refused(hosts: SshHosts) -> None:
    _one_line_error(hosts, "nobody@h1", ConnectError, "authentication refused")
    stranger = hosts.dir / "stranger_key"
    if not stranger.exists():
        keygen(stranger, "stranger")
    ours = hosts.authorized_keys.read_text()
    try:     # the hosts now accept only another key: ours is refused
        hosts.authorized_keys.write_text(Path(f"{stranger}.pub").read_text())
        _one_line_error(hosts, "h1", ConnectError, "authentication refused (publickey)")
    finally:
        hosts.authorized_keys.write_text(ours)


def test_sshd_stopped_is_connection_refused(hosts: SshHosts) -> None:
    h2 = hosts.hosts["h2"]
    h2.stop_sshd()
    try:
        _one_line_error(hosts, "h2", ConnectError, "connection refused on port 22")
    finally:
        h2.start_sshd(hosts.authorized_keys)


def test_timeout_and_no_route(hosts: SshHosts) -> None:
    # nobody has .99: ARP fails after ~3 s (EHOSTUNREACH), before a 10 s ConnectTimeout
    _one_line_error(hosts, "tb-nosshd", ConnectError, "no route to host", connect_timeout=10)
    h2 = hosts.hosts["h2"]
    blackhole = ["ip", "route", "add", "blackhole", f"{hosts.subnet.network_address + 1}/32"]
    proc.run(blackhole, netns=h2.netns)      # h2 can no longer answer us: SYNs go unanswered
    try:
        _one_line_error(hosts, "h2", ConnectError, "timed out after 2s", connect_timeout=2)
    finally:
        proc.run(["ip", "route", "del", *blackhole[3:]], netns=h2.netns)


def test_bad_input_before_any_contact(hosts: SshHosts) -> None:
    accepted = hosts.hosts["h1"].log().count("Connection from")
    with pytest.raises(SpecError, match="invalid site target"):
        Connection.open("-oProxyCommand=touch /tmp/x", options=hosts.options())
    with pytest.raises(SpecError, match="unknown host 'tb-no-such-host.invalid'"):
        Connection.open("tb-no-such-host.invalid", options=hosts.options())
    with pytest.raises(SpecError, match="does not exist"):
        Connection.open("h1", options=hosts.options(config_file=hosts.dir / "missing"))
    assert hosts.hosts["h1"].log().count("Connection from") == accepted


def test_timeout_ends_the_remote_command_too(conn: Connection) -> None:
    with pytest.raises(CommandFailed, match="on h1: command timed out after 1s: sleep 31.4159"):
        conn.run(["sleep", "31.4159"], timeout=1)
    assert "sleep 31.4159" not in conn.run(["ps", "-eo", "args"]).stdout
    assert conn.run(["sh", "-c", "exit 124"], check=False).returncode == 124   # fast: no timeout


def test_config_port_is_honoured(hosts: SshHosts) -> None:
    with Connection.open("h1-port", options=hosts.options(), name="a") as c:
        assert c.run(["true"]).ok
    assert f"on {hosts.hosts['h1'].addr} port 2222" in hosts.hosts["h1"].log()


def test_config_proxyjump_is_honoured(hosts: SshHosts) -> None:
    """h2 reached through h1: h2's sshd sees the connection come from h1's address."""
    h1, h2 = hosts.hosts["h1"], hosts.hosts["h2"]
    before = h2.log().count(f"Connection from {h1.addr} ")
    with Connection.open("h2-via-h1", options=hosts.options(), name="b") as c:
        out = c.run(["ip", "-4", "-o", "addr", "show", "scope", "global"]).stdout
        assert h2.addr in out
    assert h2.log().count(f"Connection from {h1.addr} ") == before + 1


def test_ssh_agent_is_honoured(hosts: SshHosts) -> None:
    """The key lives only in an ssh-agent (no IdentityFile for h1-agent): BatchMode still
    authenticates with it; without the agent, authentication is refused."""
    sock = hosts.dir / "agent.sock"
    _one_line_error(hosts, "h1-agent", ConnectError, "authentication refused")
    agent = proc.spawn(["ssh-agent", "-D", "-a", str(sock)], log_path=hosts.dir / "agent.log",
                       label="ssh-agent")
    try:
        proc.wait_ready(agent, ready=sock.exists, timeout=10)
        proc.run(["ssh-add", str(hosts.client_key)], env={"SSH_AUTH_SOCK": str(sock)},
                 timeout=10)
        with Connection.open("h1-agent", options=hosts.options(), name="a") as c:
            assert c.run(["true"]).ok
    finally:
        agent.stop()
        sock.unlink(missing_ok=True)


def test_connection_dropped_mid_command(hosts: SshHosts) -> None:
    """The site's sshd session process is killed while a command runs: one line, and the
    connection says it is gone (no fallback, no hang). The orphaned command still ends on the
    site at its time limit (`timeout` there); ending it at once is the agent's job."""
    c = Connection.open("h2", options=hosts.options(), name="b")
    err: list[BaseException] = []

    def long_call() -> None:
        try:
            c.run(["sleep", "60.271"], timeout=4)
        except BaseException as exc:  # noqa: BLE001 - checked below
            err.append(exc)

    t = threading.Thread(target=long_call)
    try:
        t.start()
        time.sleep(0.5)
        assert hosts.hosts["h2"].kill_sessions()
        t.join(timeout=30)
        assert not t.is_alive() and err and isinstance(err[0], ConnectionLost), err
        assert "connection to h2 (b) lost during sleep 60.271" in err[0].message
        assert "\n" not in err[0].one_line() and not c.alive()
    finally:
        c.close()
    with Connection.open("h2", options=hosts.options(), name="b") as again:
        deadline = time.monotonic() + 10    # `timeout 4` on the site ends it
        while "sleep 60.271" in again.run(["ps", "-eo", "args"]).stdout:
            assert time.monotonic() < deadline, "the command outlived its connection"
            time.sleep(0.2)


def test_management_path_seen_from_the_site(hosts: SshHosts, conn: Connection) -> None:
    m = conn.management_path()
    assert m == {"peer": str(hosts.subnet.network_address + 1), "address": hosts.hosts["h1"].addr,
                 "port": "22", "dev": f"tb{hosts.run_id}h1"}
    with Connection.open("h2-via-h1", options=hosts.options(), name="b") as c:
        assert c.management_path()["peer"] == hosts.hosts["h1"].addr   # the jump host
