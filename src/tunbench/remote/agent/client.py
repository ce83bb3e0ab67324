"""The local side of the agent: ship it over a Connection, then call it.

The zipapp is built in memory from this package (core.py, nl.py) plus, when netlink is
wanted, the pyroute2 package this tunbench runs with (pure Python): ~0.5 MB deflated. A small
bootstrap given to `python3 -c` on the site reads it from stdin, writes it 0600 into a new
0700 directory /run/tunbench/<agent id>/ (the agent removes it when it ends) and runs it; from
then on stdin/stdout of that one SSH session carry JSON lines (core.py has the shapes).

Once started, the agent is told who its controller is (this process: machine, PID and start
time) and the heartbeat timeout; a thread here writes a heartbeat line every timeout / 5 s,
and the agent ends itself (undoing everything) when none came for the timeout: a controller
that dies, hangs or is cut off is noticed on the host even while an SSH connection stays up.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib.util
import io
import json
import marshal
import os
import secrets
import select
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import proc
from ...errors import CommandFailed, SpecError, TunbenchError, UnavailableError
from ..transport import Connection, ConnectionLost
from . import core, journal

HERE = Path(__file__).parent
AGENT_FILES = ("__init__.py", "bpfhost.py", "bpfsys.py", "core.py", "journal.py", "nl.py",
               "privrun.py", "proccpu.py")
BOOTSTRAP = "\n".join([
    "import os, sys",
    "s = sys.argv[1]",
    "os.makedirs(os.path.dirname(s), mode=0o755, exist_ok=True)",
    "os.mkdir(s, 0o700)",
    "n = int(sys.stdin.buffer.readline())",
    "data = sys.stdin.buffer.read(n)",
    "p = os.path.join(s, 'agent.pyz')",
    "with open(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), 'wb') as f:",
    "    f.write(data)",
    "sys.path.insert(0, p)",
    "from tbagent.core import main",
    "sys.exit(main(s))",
])


@functools.lru_cache(maxsize=2)
def build_zipapp(netlink: bool = True) -> bytes:
    """The agent as a zip (package `tbagent`), plus pyroute2 when `netlink` is set; built
    once per process. Each module goes with its bytecode (`name.pyc` beside `name.py`, where
    zipimport looks first): the site's Python runs it without compiling the module (pyroute2's
    import took ~0.4 s here, ~87 s in a TCG guest, compiled). A site whose Python reads
    other bytecode (another minor version) skips it and compiles the source, as before."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in AGENT_FILES:
            _add_module(z, HERE / name, f"tbagent/{name}")
        if netlink:
            import pyroute2
            root = Path(pyroute2.__file__).parent
            for path in sorted(root.rglob("*.py")):
                _add_module(z, path, f"pyroute2/{path.relative_to(root)}")
    return buf.getvalue()


def _add_module(z: zipfile.ZipFile, path: Path, arcname: str) -> None:
    """`path` as `arcname` and its bytecode as the same name ending .pyc (pure Python: the
    source and the bytecode are both in the zip)."""
    source = path.read_bytes()
    z.writestr(arcname, source)
    z.writestr(arcname[:-3] + ".pyc", unchecked_pyc(path, source, arcname))


def unchecked_pyc(path: Path, source: bytes, name: str) -> bytes:
    """A module's bytecode as an unchecked hash-based .pyc (PEP 552: its importer does not
    compare it with the source, which comes with it): the body of the .pyc this Python
    wrote beside `path` (pip compiles a package when it installs it) if it is current for
    `source`, as Python itself judges it (magic, source mtime and size), else compiled
    here."""
    magic = importlib.util.MAGIC_NUMBER
    header = magic + (1).to_bytes(4, "little") + importlib.util.source_hash(source)
    try:
        cached = Path(importlib.util.cache_from_source(str(path))).read_bytes()
        st = path.stat()
        if (cached[:8] == magic + bytes(4)
                and int.from_bytes(cached[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
                and int.from_bytes(cached[12:16], "little") == len(source) == st.st_size):
            return header + cached[16:]
    except (OSError, ValueError, NotImplementedError):
        pass   # none written (PYTHONDONTWRITEBYTECODE, a read-only tree): compiled here
    return header + marshal.dumps(compile(source, name, "exec", dont_inherit=True))


@dataclass
class AgentProcess:
    """A process the agent started on its site; it dies with the agent."""

    agent: Agent
    argv: list[str]
    pid: int
    starttime: int | None
    log_path: str

    def poll(self) -> int | None:
        code = self.agent.call("poll", pid=self.pid)["returncode"]
        return None if code is None else int(code)

    def stop(self, grace: float = 3.0) -> int | None:
        code = self.agent.call("stop", wait=grace + 15, pid=self.pid, grace=grace)
        return code["returncode"]

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit (polling the agent, backing off to 0.2 s); CommandFailed on timeout,
        like proc.Process.wait (the process keeps running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise CommandFailed(f"{self.argv[0]} on {self.agent.conn.target} did not "
                                    f"finish within {timeout:g}s", "the host may be overloaded",
                                    argv=self.argv)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.2)
        return code

    def output(self) -> str:
        return self.agent.read_file(self.log_path).decode(errors="replace")

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])


@dataclass
class Agent:
    conn: Connection
    agent_id: str
    process: proc.Process
    err_path: Path
    hello: dict[str, Any]
    _buf: bytes = b""
    _next: int = 1
    _dead: bool = False
    _lost: CommandFailed | None = None   # why the agent's session ended, when it dropped
    procs: list[AgentProcess] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wlock: threading.Lock = field(default_factory=threading.Lock)   # one line at a time
    _beating: threading.Event = field(default_factory=threading.Event)  # set: stop beating
    heartbeat: float = 0.0     # seconds without a line after which the agent ends (0: off)

    @classmethod
    def start(cls, conn: Connection, *, netlink: bool = True, python: str = "python3",
              state_root: str = journal.ROOT, timeout: float = 60.0,
              prefix: tuple[str, ...] = (), tag: str = "",
              heartbeat: float | None = None) -> Agent:
        """Ship the agent to the connection's site and wait for its hello. `prefix` runs it
        under that argv there (`ip netns exec NS`: an agent inside a namespace of that host,
        a chain's site); `tag` tells it apart in its id; `heartbeat`: the agent's timeout
        without a word from us (None: the connection's SshOptions.heartbeat; 0: off)."""
        agent_id = f"tb-{secrets.token_hex(3)}-{conn.name}{tag}"
        state = f"{state_root}/{agent_id}"
        err_path = conn.control_path.with_suffix(f".{agent_id}.err")
        p = proc.spawn_piped(conn.tethered(conn.ssh_argv([*prefix, python, "-c", BOOTSTRAP,
                                                          state])),
                             stderr_path=err_path, label=f"agent@{conn.name}")
        if conn.ledger is not None:
            conn.ledger.process(p)
            conn.ledger.path(err_path)
        payload = build_zipapp(netlink)
        agent = cls(conn, agent_id, p, err_path, {})
        try:
            assert p.popen.stdin is not None
            p.popen.stdin.write(f"{len(payload)}\n".encode() + payload)
            p.popen.stdin.flush()
            reply = agent._read_reply(0, time.monotonic() + timeout, "start")
        except (BrokenPipeError, ConnectionLost, CommandFailed) as exc:
            agent._dead = True
            p.stop()
            err = _last_line(_read(err_path))
            err_path.unlink(missing_ok=True)
            if not conn.alive():
                raise conn._lost("agent start") from None
            if "not found" in err:
                raise UnavailableError(f"{conn.target}: {python} is not installed",
                                       "install it on that host: apt-get install "
                                       "python3-minimal") from None
            raise CommandFailed(f"{conn.target}: the tunbench agent did not start: "
                                f"{err or exc}", "see docs/remote.md") from None
        agent.hello = reply
        if int(reply.get("protocol", 0)) != core.PROTOCOL:
            agent.close()
            raise UnavailableError(f"{conn.target}: agent protocol {reply.get('protocol')} "
                                   f"!= {core.PROTOCOL}", "a tunbench bug: report it")
        try:
            agent.watch(conn.options.heartbeat if heartbeat is None else heartbeat)
        except BaseException:
            agent.close()
            raise
        return agent

    def watch(self, timeout: float) -> None:
        """Tell the agent its controller (this process) and start the heartbeat."""
        me = os.getpid()
        self.call("watch", timeout=timeout, controller={
            **journal.machine_identity(), "pid": me, "starttime": proc.proc_starttime(me),
            "hostname": os.uname().nodename})
        self.heartbeat = timeout
        if timeout > 0:
            threading.Thread(target=self._beat, args=(max(0.2, timeout / 5),), daemon=True,
                             name=f"tb-heartbeat-{self.conn.name}").start()

    def _beat(self, interval: float) -> None:
        line = json.dumps({"op": "beat"}).encode() + b"\n"
        while not self._beating.wait(interval):
            if not self._write(line):
                return

    def _write(self, line: bytes) -> bool:
        stdin = self.process.popen.stdin
        with self._wlock:
            if self._beating.is_set() or stdin is None or stdin.closed:
                return False
            try:
                stdin.write(line)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                return False
        return True

    # -- the wire ---------------------------------------------------------------------------
    def call(self, op: str, *, wait: float = 60.0, **args: Any) -> dict[str, Any]:
        """One request, its reply's result; a failed op raises CommandFailed (one line)."""
        if self._dead:
            if self._lost is not None:   # the reason it ended, again (not a vaguer one)
                raise type(self._lost)(self._lost.message, self._lost.hint)
            raise TunbenchError(f"the agent on {self.conn.target} is not running",
                                "reconnect: open a new connection and agent")
        with self._lock:      # one request in flight: callers in several threads queue
            rid = self._next
            self._next += 1
            line = json.dumps({"id": rid, "op": op, "args": args}).encode() + b"\n"
            if not self._write(line):
                self._dead = True
                raise self._gone(op) from None
            return self._read_reply(rid, time.monotonic() + wait + 5, op)

    def _read_reply(self, rid: int, deadline: float, op: str) -> dict[str, Any]:
        while True:
            line = self._readline(deadline, op)
            msg = json.loads(line)
            if msg.get("id") != rid:
                continue        # a late reply to a request that timed out on our side
            if msg.get("ok"):
                return dict(msg["result"])
            kind = msg.get("type", "error")
            raise CommandFailed(f"on {self.conn.target}: {op}: {msg.get('error')}",
                                "see the agent error above" if kind == "error" else "",
                                returncode=None)

    def _readline(self, deadline: float, op: str) -> bytes:
        stdout = self.process.popen.stdout
        assert stdout is not None
        fd = stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommandFailed(f"the agent on {self.conn.target} did not answer {op} "
                                    "in time", "the host may be overloaded")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._dead = True
                raise self._gone(op)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _gone(self, op: str) -> CommandFailed:
        """The agent's session ended: the connection dropped (the master ends too, within
        a moment), or the agent itself died on the site."""
        deadline = time.monotonic() + 2.0
        while self.conn.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.conn.alive():
            self._lost = self.conn._lost(op)
            return self._lost
        self.process.stop(grace=1.0)
        why = _last_line(_read(self.err_path)) or f"exit {self.process.poll()}"
        return CommandFailed(f"the tunbench agent on {self.conn.target} ended during {op}: "
                             f"{why}", "the site may lack memory or python3; reconnect, "
                             "then sweep the site")

    # -- operations -------------------------------------------------------------------------
    def run(self, argv: list[str], *, timeout: float = 60.0, check: bool = True,
            input: str | None = None, env: dict[str, str] | None = None) -> proc.Completed:
        if isinstance(argv, (str, bytes)) or not argv:
            raise TypeError("argv must be a non-empty list of strings, never a shell string")
        r = self.call("run", wait=timeout, argv=[str(a) for a in argv],
                      **_run_args(timeout, input, env))
        res = proc.Completed(list(argv), int(r["returncode"]), r["stdout"], r["stderr"])
        if check and not res.ok:
            last = _last_line(res.stderr) or _last_line(res.stdout)
            raise CommandFailed(f"on {self.conn.target}: command failed (exit {res.returncode})"
                                f": {' '.join(argv)[:120]}: {last}", argv=list(argv),
                                returncode=res.returncode, output=res.stdout + res.stderr)
        return res

    def spawn(self, argv: list[str], log_path: str, *, env: dict[str, str] | None = None,
              grace: float = 3.0, err_path: str | None = None,
              private: dict[str, list[str]] | None = None) -> AgentProcess:
        """Start `argv` on the site; stdout and stderr to `log_path` (stderr to `err_path`
        when given, so stdout stays machine-readable); `private`: private tmpfs mounts
        (core.private_argv)."""
        extra: dict[str, Any] = {"err": err_path} if err_path else {}
        if private:
            extra["private"] = private
        r = self.call("spawn", argv=[str(a) for a in argv], log=log_path, env=env, grace=grace,
                      **extra)
        p = AgentProcess(self, list(argv), int(r["pid"]), r["starttime"], log_path)
        self.procs.append(p)
        return p

    def read_file(self, path: str) -> bytes:
        return base64.b64decode(self.call("read_file", path=path)["data"])

    def write_file(self, path: str, data: bytes | str, mode: int = 0o600) -> None:
        """Write a file on the site (0600 by default: secrets); removed when the agent ends."""
        raw = data.encode() if isinstance(data, str) else data
        self.call("write_file", path=path, data=base64.b64encode(raw).decode(), mode=mode)

    def mkdir(self, path: str, mode: int = 0o700) -> None:
        self.call("mkdir", path=path, mode=mode)

    def remove(self, path: str) -> None:
        self.call("remove", path=path)

    def proc_stat(self) -> str:
        return str(self.call("proc_stat")["text"])

    def cpu_start(self, interval: float = 1.0, pids: list[int] | None = None,
                  kernel_prefix: str = "") -> dict[str, str]:
        """Start sampling on the site; returns the processes tracked there {pid: comm}."""
        return dict(self.call("cpu_start", interval=interval, pids=list(pids or []),
                              kernel_prefix=kernel_prefix)["tracked"])

    def cpu_take(self, stop: bool = False) -> list[dict[str, Any]]:
        return list(self.call("cpu_take", stop=stop)["samples"])

    def clock_offset(self, samples: int = 9) -> tuple[float, float]:
        """(offset, rtt) in seconds: the site's wall clock minus ours, from the request with
        the shortest round trip (NTP's idea: the site read its clock at the midpoint, so the
        error is at most rtt/2). Needed before one-way delays between sites mean anything."""
        best: tuple[float, float] | None = None
        for _ in range(samples):
            t0 = time.time()
            remote = float(self.call("clock", wait=10)["time"])
            t1 = time.time()
            rtt = t1 - t0
            if best is None or rtt < best[1]:
                best = (remote - (t0 + t1) / 2, rtt)
        assert best is not None
        return best

    def kernel_config(self) -> dict[str, str] | None:
        """The site's kernel build configuration (/proc/config.gz, else
        /boot/config-<release>), or None when it cannot be read there."""
        release = str(self.hello.get("kernel", ""))
        for path in ("/proc/config.gz", f"/boot/config-{release}"):
            try:
                raw = self.read_file(path)
            except CommandFailed:
                continue
            if path.endswith(".gz"):
                raw = gzip.decompress(raw)
            conf: dict[str, str] = {}
            for line in raw.decode(errors="replace").splitlines():
                if line.startswith("CONFIG_") and "=" in line:
                    key, _, val = line.partition("=")
                    conf[key] = val
            return conf
        return None

    def links(self) -> list[dict[str, Any]]:
        return list(self.call("links", wait=30)["links"])

    def link_add(self, ifname: str, kind: str, **attrs: Any) -> None:
        if not ifname.startswith("tb"):
            raise SpecError(f"interface name {ifname!r} lacks the tb prefix",
                            "tunbench creates only tb-prefixed interfaces")
        self.call("link_add", wait=30, ifname=ifname, kind=kind, attrs=attrs)

    def link_del(self, ifname: str) -> None:
        self.call("link_del", wait=30, ifname=ifname)

    def addr_add(self, ifname: str, cidr: str) -> None:
        self.call("addr_add", wait=30, ifname=ifname, cidr=cidr)

    def sweep(self) -> list[str]:
        """Undo what crashed agents on this site left (their journals in /run/tunbench)."""
        return list(self.call("sweep", wait=60)["undone"])

    @property
    def alive(self) -> bool:
        return not self._dead and self.process.poll() is None

    def close(self, timeout: float = 30.0) -> str:
        """EOF to the agent: it undoes what it started and exits. Returns its stderr."""
        if not self._dead:
            self._dead = True
            stdin = self.process.popen.stdin
            with self._wlock:
                self._beating.set()
                try:
                    if stdin is not None:
                        stdin.close()
                except OSError:
                    pass
            try:
                self.process.wait(timeout=timeout)
            except CommandFailed:
                self.process.stop()
        for f in (self.process.popen.stdout,):
            if f is not None:
                f.close()
        err = _read(self.err_path)
        self.err_path.unlink(missing_ok=True)
        return err


def _run_args(timeout: float, input: str | None, env: dict[str, str] | None
              ) -> dict[str, Any]:
    args: dict[str, Any] = {"timeout": timeout}
    if input is not None:
        args["input"] = input
    if env is not None:
        args["env"] = env
    return args


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""
