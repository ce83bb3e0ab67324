"""One persistent SSH connection per site: the OpenSSH client with a ControlMaster socket.

Why the OpenSSH client and not a Python SSH library: it is the user's own ssh, so everything
in ~/.ssh/config (User, Port, IdentityFile, ProxyJump, Match blocks, certificates), the SSH
agent and known_hosts work exactly as they do when the user types `ssh HOST`; no new
dependency, no second implementation of host-key checking. docs/remote.md has the measure.

The master (`ssh -M -N`) is a local process we hold by PID; every command is a mux client over
its socket (a private 0700 directory under /run/tunbench/ssh). Forced on the command line, so
no config can loosen them: BatchMode (never a prompt), StrictHostKeyChecking=yes (an unknown or
changed host key is an error, never accepted), no agent or X11 forwarding, UpdateHostKeys=no.
A mux client never falls back to a second, unmanaged connection (ProxyCommand=false: used
only when the master's socket is gone). Remote commands are argv lists; `shlex.join` here is
the one place they become a string for the remote shell.

Bound to this process's lifetime: the master and every long-lived mux client are started
under `setpriv --pdeathsig TERM` (the kernel signals them when we die, even by SIGKILL), and
each master is recorded (`<id>.master`: its PID and start time, and ours) so that `tunbench
cleanup` ends the masters of a controller that is gone, should one outlive it anyway.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..errors import CommandFailed, SpecError, TunbenchError
from ..testbed.ledger import STATE_DIR, Ledger
from .sshfail import ConnectError, ConnectionLost, classify

__all__ = ["ConnectError", "Connection", "ConnectionLost", "RemoteProcess", "SshOptions",
           "check_target", "classify", "remote_command"]

CONTROL_DIR = STATE_DIR / "ssh"
SSH_FAILED = 255          # ssh's own exit status for "could not connect / lost connection"
_TARGET_RE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._:%-]+$")
_NAME_RE = re.compile(r"^[a-z0-9-]{1,40}$")
# tb-<controller pid>-<n>-<name>.sock|.log|.master, and .<agent id>.err of its agents
_CONTROL_FILE_RE = re.compile(r"^tb-(\d+)-\d+-[a-z0-9-]{1,40}\.(sock|log|master|tb-[a-z0-9-]+\.err)$")
HEARTBEAT_S = 30.0     # default: an agent ends this long after its controller fell silent


def sweep_control_dir(cdir: Path = CONTROL_DIR,
                      controller: tuple[int, int | None] | None = None) -> list[str]:
    """What a controller killed outright left here: its ssh masters, should one outlive it
    (ended by PID and start time, as recorded in `<id>.master`), their control sockets, logs
    and agent error files. Only controllers that are gone (PID and start time); with
    `controller`, only that one (`cleanup --run`). A live controller's files stay."""
    removed: list[str] = []
    if not cdir.is_dir():
        return removed
    dead: dict[str, bool] = {}
    for rec in sorted(cdir.glob("tb-*.master")):
        try:
            info = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        ctl = (int(info["controller_pid"]), info.get("controller_starttime"))
        if controller is not None and ctl != controller:
            continue
        if proc.pid_alive(*ctl):
            dead[rec.name.split("-")[1]] = False
            continue
        dead[rec.name.split("-")[1]] = True
        if proc.pid_alive(int(info["pid"]), info.get("starttime")):
            proc.kill_pid(int(info["pid"]), info.get("starttime"), grace=2.0)
            removed.append(f"ssh master {info['pid']} to {info.get('target')} "
                           f"(controller {ctl[0]} is gone)")
    for f in sorted(cdir.iterdir()):
        m = _CONTROL_FILE_RE.match(f.name)
        if not m:
            continue
        pid = m.group(1)
        if controller is not None and int(pid) != controller[0]:
            continue
        if dead.get(pid, not proc.pid_alive(int(pid))):
            f.unlink(missing_ok=True)
            removed.append(f"ssh control file {f}")
    return removed


_PDEATHSIG: list[bool] = []


def can_tether() -> bool:
    """Whether this host's setpriv has --pdeathsig (util-linux >= 2.33), asked once."""
    if not _PDEATHSIG:
        ok = proc.which("setpriv") is not None and proc.run(
            ["setpriv", "--pdeathsig", "TERM", "--", "true"], check=False, timeout=10).ok
        _PDEATHSIG.append(ok)
    return _PDEATHSIG[0]


@dataclass(frozen=True)
class SshOptions:
    config_file: Path | None = None     # ssh -F; None: ~/.ssh/config and /etc/ssh/ssh_config
    connect_timeout: int = 10           # seconds (ConnectTimeout)
    alive_interval: int = 5             # ServerAliveInterval; dead after 3 missed replies
    control_dir: Path = field(default=CONTROL_DIR)
    extra: tuple[str, ...] = ()         # more "-o Key=Value" settings, e.g. "Port=2222"
    heartbeat: float = HEARTBEAT_S      # agents end this long after we fall silent (0: off)
    tether: bool = True                 # ssh processes die with us (setpriv --pdeathsig)


def check_target(target: str) -> str:
    """`[user@]host` as ssh takes it; anything else is bad input (exit 2) before any contact."""
    if not _TARGET_RE.match(target) or target.startswith("-") or target.startswith("@"):
        raise SpecError(f"invalid site target {target!r}",
                        "write USER@HOST or HOST (a name from ~/.ssh/config works too)")
    return target


def remote_command(argv: list[str]) -> str:
    """THE quoting point: an argv list as one string for the remote POSIX shell."""
    if isinstance(argv, (str, bytes)) or not argv:
        raise TypeError("argv must be a non-empty list of strings, never a shell string")
    return shlex.join(str(a) for a in argv)


# Remote helpers: constant POSIX sh scripts; every variable part is a positional argument.
# spawn: print "PID STARTTIME" (exec keeps both), then become the program, output to the log.
SPAWN_SH = ('log=$1; shift; s=$(cat /proc/$$/stat); s=${s##*) }; f() { echo "$$ ${20}"; }; '
            'f $s; exec "$@" >"$log" 2>&1 </dev/null')
# stop: signal only if PID still has the start time we recorded (never a reused PID).
STOP_SH = ('pid=$1; st=$2; n=$(( $3 * 10 )); alive() { s=$(cat /proc/$pid/stat 2>/dev/null) '
           '|| return 1; s=${s##*) }; f() { [ "$1" != Z ] && [ "${20}" = "$st" ]; }; f $s; }; '
           'alive || exit 0; kill -TERM "$pid"; i=0; while alive && [ $i -lt $n ]; do '
           'sleep 0.1; i=$((i+1)); done; alive && kill -KILL "$pid"; exit 0')
# put: a temporary file made 0600 by mktemp, filled from stdin (base64), then renamed.
PUT_SH = ('set -e; t=$(mktemp "$1.tb-XXXXXX"); trap \'rm -f "$t"\' EXIT; base64 -d >"$t"; '
          'chmod "$2" "$t"; mv -f "$t" "$1"; trap - EXIT')


@dataclass
class RemoteProcess:
    """A long-running remote process, known by its remote PID and start time.

    The local mux client stays attached until the remote process exits, so `poll` needs no
    round trip. It does not end the remote process when the connection drops: processes that
    must die with the connection are the agent's (docs/remote.md)."""

    conn: Connection
    argv: list[str]
    pid: int
    starttime: int
    log_path: str
    client: proc.Process

    def poll(self) -> int | None:
        return self.client.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the remote exit (the local client ends with it); CommandFailed on timeout."""
        return self.client.wait(timeout)

    def stop(self, grace: float = 3.0) -> int | None:
        """Stop the remote process by PID (only if its start time is still the recorded one,
        so a reused PID is never signalled), then collect the local client."""
        if self.conn.alive():
            self.conn.run(["sh", "-c", STOP_SH, "tb-stop", str(self.pid), str(self.starttime),
                           str(max(1, round(grace)))], timeout=grace + 15)
        try:
            return self.client.wait(timeout=5)
        except CommandFailed:     # not ours any more, or the connection is gone
            self.client.stop()
            return self.client.poll()


@dataclass
class Connection:
    target: str
    name: str
    options: SshOptions
    control_path: Path
    master: proc.Process
    log_path: Path
    ledger: Ledger | None = None
    _closed: bool = False

    @classmethod
    def open(cls, target: str, *, options: SshOptions | None = None, name: str = "site",
             ledger: Ledger | None = None) -> Connection:
        """Connect (authenticate, verify the host key) once; raise one clear line if not."""
        options = options or SshOptions()
        check_target(target)
        if not _NAME_RE.match(name):
            raise SpecError(f"invalid connection name {name!r}", "use lower-case a-z, 0-9, -")
        if options.config_file is not None and not Path(options.config_file).is_file():
            raise SpecError(f"ssh config file {options.config_file} does not exist",
                            "give an existing file, or leave it out to use ~/.ssh/config")
        proc.require("ssh")
        cdir = Path(options.control_dir)
        cdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(cdir, 0o700)   # the socket grants shell access: only root may reach it
        conn_id = f"tb-{os.getpid()}-{time.monotonic_ns() % 10**9}-{name}"
        control = cdir / f"{conn_id}.sock"
        log_path = cdir / f"{conn_id}.log"
        argv = ["ssh", *_base_options(options, control), "-M", "-N",
                "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "--", target]
        master = proc.spawn(tether(options, argv), log_path=log_path,
                            label=f"ssh-master-{name}")
        conn = cls(target, name, options, control, master, log_path, ledger)
        me = os.getpid()
        conn.record_path.write_text(json.dumps({
            "pid": master.pid, "starttime": master.starttime, "target": target,
            "controller_pid": me, "controller_starttime": proc.proc_starttime(me)}) + "\n")
        if ledger is not None:
            ledger.process(master)
            ledger.path(log_path)
            ledger.path(control)
            ledger.path(conn.record_path)
        conn._await_master()
        return conn

    @property
    def record_path(self) -> Path:
        """`<id>.master`: the master's PID and start time, and its controller's."""
        return self.control_path.with_suffix(".master")

    def tethered(self, argv: list[str]) -> list[str]:
        return tether(self.options, argv)

    def _await_master(self) -> None:
        deadline = time.monotonic() + self.options.connect_timeout + 20
        delay = 0.005
        while time.monotonic() < deadline:
            if self.master.poll() is not None:
                err = self.master.output()
                self._cleanup_files()
                raise classify(err, self.target, self.options.connect_timeout)
            if self.control_path.exists() and self._check():
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 0.1)
        self.close()
        raise ConnectError(f"{self.target}: connection not ready within "
                           f"{self.options.connect_timeout + 20}s",
                           "the host or the path to it may be overloaded; retry")

    def _check(self) -> bool:
        r = proc.run(["ssh", *self._client_options(), "-O", "check", "--", self.target],
                     timeout=10, check=False)
        return r.ok

    def _client_options(self) -> list[str]:
        return [*_base_options(self.options, self.control_path), "-o", "ControlMaster=no",
                "-o", "ProxyCommand=false"]

    def _master_gone(self, wait: float = 2.0) -> bool:
        """After a 255 (ssh's own failure, or a remote command's status): is the connection
        gone? The master notices a dead peer a moment after its sessions do."""
        if self.master.poll() is None and self._check():
            return False
        deadline = time.monotonic() + wait
        while self.master.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return True

    def alive(self) -> bool:
        return not self._closed and self.master.poll() is None

    def ssh_argv(self, argv: list[str]) -> list[str]:
        """The local argv that runs `argv` on the site over the master connection."""
        return ["ssh", *self._client_options(), "--", self.target, remote_command(argv)]

    def _lost(self, what: str) -> ConnectionLost:
        return ConnectionLost(f"connection to {self.target} ({self.name}) lost during {what}: "
                              f"{_last_line(self.master.output()) or 'ssh master exited'}",
                              "check the host and the network; the site must be cleaned "
                              "after reconnecting")

    def _require_alive(self, what: str) -> None:
        if self._closed:
            raise TunbenchError(f"connection to {self.target} is closed", "open a new one")
        if self.master.poll() is not None:
            raise self._lost(what)

    def run(self, argv: list[str], *, timeout: float = 60.0, check: bool = True,
            input: str | None = None) -> proc.Completed:
        """Run argv on the site; like proc.run (argv of the result is the remote argv).

        The time limit is enforced on the site too (coreutils `timeout`), so a command that
        runs over does not live on after we gave up on it."""
        self._require_alive(argv[0] if argv else "a command")
        limit = ["timeout", "--kill-after=2", f"{timeout:g}"]
        start = time.monotonic()
        try:
            r = proc.run(self.ssh_argv([*limit, *argv]), timeout=timeout + 10, check=False,
                         input=input)
        except CommandFailed as exc:
            raise CommandFailed(f"on {self.target}: {exc.message}", exc.hint,
                                argv=list(argv)) from None
        if r.returncode == SSH_FAILED and self._master_gone():
            raise self._lost(_short(argv))
        if r.returncode == SSH_FAILED and "Session open refused" in r.stderr:
            raise CommandFailed(f"{self.target} refused another session on the connection "
                                f"(sshd MaxSessions) for {_short(argv)}",
                                "raise MaxSessions in the site's sshd_config, or run long "
                                "processes through the agent", argv=list(argv))
        if r.returncode == SSH_FAILED and _is_mux_failure(r.stderr):
            raise self._lost(_short(argv))
        if r.returncode in (124, 137) and time.monotonic() - start >= timeout:
            raise CommandFailed(f"on {self.target}: command timed out after {timeout:g}s: "
                                f"{_short(argv)}", "the host may be overloaded; retry or "
                                "raise the timeout", argv=list(argv), output=r.stdout + r.stderr)
        res = proc.Completed(list(argv), r.returncode, r.stdout, r.stderr)
        if check and not res.ok:
            last = _last_line(r.stderr) or _last_line(r.stdout)
            raise CommandFailed(f"on {self.target}: command failed (exit {r.returncode}): "
                                f"{_short(argv)}: {last}", argv=list(argv),
                                returncode=r.returncode, output=r.stdout + r.stderr)
        return res

    def spawn(self, argv: list[str], log_path: str, *, local_log: Path | None = None,
              label: str | None = None, timeout: float = 15.0) -> RemoteProcess:
        """Start a long-running process on the site, its output to `log_path` there."""
        self._require_alive(argv[0] if argv else "spawn")
        local_log = local_log or self.control_path.with_suffix(f".{time.monotonic_ns()}.pid")
        client = proc.spawn(self.tethered(self.ssh_argv(["sh", "-c", SPAWN_SH, "tb-spawn",
                                                         log_path, *argv])),
                            log_path=local_log, label=label or f"{Path(argv[0]).name}@{self.name}")
        try:
            pid, start = _await_pid_line(client, timeout)
        except (CommandFailed, ValueError):
            client.stop()
            if self.master.poll() is not None:
                raise self._lost(_short(argv)) from None
            raise CommandFailed(f"on {self.target}: could not start {_short(argv)}: "
                                f"{_last_line(client.output())}", argv=list(argv)) from None
        finally:
            local_log.unlink(missing_ok=True)
        return RemoteProcess(self, list(argv), int(pid), int(start), log_path, client)

    def management_path(self) -> dict[str, str]:
        """How this connection reaches the site, seen from the site: the address and interface
        that carry the SSH session (`SSH_CONNECTION`, then the site's route back to us).
        Tunnel setups must never change that interface or shadow that route."""
        conn = self.run(["printenv", "SSH_CONNECTION"], timeout=15).stdout.split()
        if len(conn) != 4:
            raise CommandFailed(f"{self.target}: sshd did not say which connection this is "
                                "(SSH_CONNECTION unset)", "a tunbench bug: report it")
        peer, _, local, port = conn
        route = self.run(["ip", "-j", "route", "get", peer], timeout=15).stdout
        dev = str(json.loads(route)[0].get("dev", "")) if route.strip() else ""
        return {"peer": peer, "address": local, "port": port, "dev": dev}

    def put_file(self, data: bytes | str | Path, remote_path: str, mode: int = 0o600) -> None:
        """Write a file on the site atomically with `mode` (secrets: 0600). The content goes
        over stdin, never into an argv or a log."""
        if isinstance(data, Path):
            data = data.read_bytes()
        raw = data.encode() if isinstance(data, str) else data
        try:
            self.run(["sh", "-c", PUT_SH, "tb-put", remote_path, f"{mode:o}"],
                     input=base64.b64encode(raw).decode(), timeout=60)
        except CommandFailed as exc:
            if isinstance(exc, ConnectionLost):
                raise
            raise CommandFailed(f"on {self.target}: could not write {remote_path}: "
                                f"{_last_line(exc.output)}", argv=exc.argv) from None

    def close(self) -> None:
        """End the master connection (and with it every session still open on it)."""
        if self._closed:
            return
        self._closed = True
        if self.master.poll() is None:
            proc.run(["ssh", *self._client_options(), "-O", "exit", "--", self.target],
                     timeout=10, check=False)
        self.master.stop(grace=3.0)
        self._cleanup_files()

    def _cleanup_files(self) -> None:
        self.control_path.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)
        self.record_path.unlink(missing_ok=True)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tether(options: SshOptions, argv: list[str]) -> list[str]:
    """argv that the kernel ends (SIGTERM) when this process dies, however it dies: an ssh
    process never outlives its controller (docs/remote.md, "When the controller dies").
    The signal follows the thread that started it: connections are opened by the main one."""
    if options.tether and can_tether():
        return ["setpriv", "--pdeathsig", "TERM", "--", *argv]
    return list(argv)


def _await_pid_line(client: proc.Process, timeout: float) -> tuple[str, str]:
    """The "PID STARTTIME" line the spawn wrapper prints first; the program may already have
    exited (with any status) by the time we look."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while "\n" not in client.output():
        if client.poll() is not None and "\n" not in client.output():
            raise ValueError("no PID line")
        if time.monotonic() > deadline:
            raise CommandFailed(f"no PID within {timeout:g}s")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)
    pid, start = client.output().split()[:2]
    return pid, start


def _base_options(o: SshOptions, control: Path) -> list[str]:
    cfg = ["-F", str(o.config_file)] if o.config_file is not None else []
    forced = ["BatchMode=yes", "StrictHostKeyChecking=yes", "UpdateHostKeys=no",
              f"ConnectTimeout={o.connect_timeout}", f"ServerAliveInterval={o.alive_interval}",
              "ServerAliveCountMax=3", f"ControlPath={control}", "ForwardAgent=no",
              "ForwardX11=no", "ClearAllForwardings=yes", "PermitLocalCommand=no",
              "RequestTTY=no", "LogLevel=ERROR", *o.extra]
    out = [*cfg, "-T"]
    for opt in forced:
        out += ["-o", opt]
    return out


def _is_mux_failure(stderr: str) -> bool:
    return any(s in stderr for s in ("mux_client", "Control socket", "ControlSocket",
                                     "Connection closed by UNKNOWN", "kex_exchange_identification"))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _short(argv: list[str]) -> str:
    text = remote_command(argv)
    return text if len(text) < 120 else text[:117] + "..."
