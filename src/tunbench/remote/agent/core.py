"""The agent: what runs on a remote site for the length of a run (this file runs THERE).

Shipped over the SSH channel at connect time (client.py zips this package, plus pyroute2 for
netlink, and pipes it to the site's python3): nothing is installed. Standard library only
(pyroute2 is imported lazily by nl.py). It speaks JSON lines on stdin/stdout:

    request   {"id": 7, "op": "run", "args": {"argv": ["ip", "-j", "link"], "timeout": 10}}
    reply     {"id": 7, "ok": true, "result": {"returncode": 0, "stdout": "...", ...}}
    failure   {"id": 7, "ok": false, "error": "one line", "type": "timeout"}

Everything it creates (processes, files, links) is journaled the moment it exists in
STATE/journal.jsonl (STATE = /run/tunbench/<agent id> on the site), so a later `sweep` can
undo what a crashed agent left. It ends when its stdin reaches EOF (the connection dropped or
the client closed it), on SIGTERM/SIGHUP, or when its controller's heartbeat stops (`watch`:
no line for `timeout` seconds, whether or not the SSH connection is still up), and then
undoes everything it started, newest first, and removes its state directory.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from . import bpfhost, journal, proccpu
from .journal import Journal, kill, run_argv, starttime, sweep, undo

PROTOCOL = 1


class AgentError(Exception):
    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


class Agent:
    def __init__(self, state: str) -> None:
        self.state = state
        self.journal = Journal(state)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.sampler: Sampler | None = None
        self.eof = threading.Event()     # set by the reader when stdin ends
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.last_seen = time.monotonic()    # any line from the controller, beats included
        self.last_beat = time.time()
        self.expired = ""                # why the watchdog ended the agent

    # -- operations: each takes keyword arguments and returns a JSON-able result ----------
    def op_hello(self) -> dict[str, Any]:
        u = os.uname()
        return {"protocol": PROTOCOL, "pid": os.getpid(), "python": sys.version.split()[0],
                "kernel": u.release, "machine": u.machine, "hostname": u.nodename,
                "state": self.state, "euid": os.geteuid(), **journal.machine_identity()}

    def op_watch(self, timeout: float, controller: dict[str, Any]) -> dict[str, Any]:
        """Know the controller (recorded in STATE/controller.json, for `cleanup --site`) and,
        with `timeout` > 0, end like at EOF when no line (a request or a heartbeat) came for
        `timeout` seconds: a controller killed, frozen or cut off while its SSH connection
        stays up (a ControlMaster outliving it, a peer that vanished without a FIN)."""
        record = {**controller, "heartbeat_s": timeout}
        path = os.path.join(self.state, "controller.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
        if timeout > 0:
            self.last_seen = time.monotonic()
            threading.Thread(target=self._watchdog, args=(float(timeout),), daemon=True,
                             name="tb-watchdog").start()
        return {}

    def _watchdog(self, timeout: float) -> None:
        beat_path = os.path.join(self.state, "beat")
        tick = max(0.2, min(1.0, timeout / 5))
        while not self.eof.is_set():
            quiet = time.monotonic() - self.last_seen
            if quiet > timeout:
                self.expired = (f"no heartbeat from the controller for {quiet:.1f}s "
                                f"(timeout {timeout:g}s)")
                sys.stderr.write(f"tunbench agent: {self.expired}: ending\n")
                self.eof.set()
                self.lines.put(None)
                return
            try:      # its age tells `cleanup --site` whether the controller still beats
                with open(beat_path + ".tmp", "w", encoding="utf-8") as f:
                    f.write(f"{self.last_beat:.3f}\n")
                os.replace(beat_path + ".tmp", beat_path)
            except OSError:
                pass
            time.sleep(tick)

    def op_agents(self) -> dict[str, Any]:
        """The other live agents on this host, with their controllers (cleanup --site)."""
        return {"agents": journal.live_agents(self.state)}

    def op_end_agent(self, state: str) -> dict[str, Any]:
        """End another agent of this host whose controller is gone (cleanup --site decides):
        it undoes its journal; what it could not is swept."""
        try:
            return {"undone": journal.end_agent(state)}
        except ValueError as exc:
            raise AgentError(str(exc), "notours") from None

    def op_run(self, argv: list[str], timeout: float = 60.0, input: str | None = None,
               env: dict[str, str] | None = None) -> dict[str, Any]:
        """Run to completion, like tunbench.proc.run. Polled, so that a connection that drops
        meanwhile ends the command too (its process group) instead of waiting for it."""
        try:
            p = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None
                                 else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True,
                                 env=None if env is None else {**os.environ, **env})
        except FileNotFoundError:
            raise AgentError(f"{argv[0]}: not found on this host", "notfound") from None
        deadline = time.monotonic() + timeout
        send = input
        while True:
            try:
                out, err = p.communicate(send, timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                send = None
                if self.eof.is_set() or time.monotonic() > deadline:
                    _killgroup(p)
                    if self.eof.is_set():
                        raise AgentError("the connection closed", "eof") from None
                    raise AgentError(f"timed out after {timeout:g}s", "timeout") from None
        return {"returncode": p.returncode, "stdout": out, "stderr": err}

    def _log_fd(self, path: str) -> int:
        existed = os.path.lexists(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if not existed:
            self.journal.add("path", path=path)   # undone after the process (newest first)
        return fd

    def op_spawn(self, argv: list[str], log: str, env: dict[str, str] | None = None,
                 grace: float = 3.0, err: str | None = None,
                 private: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """Start a process in its own session, stdout (and stderr, unless `err` names a file
        of its own) to `log`. `private` ({"tmpfs", "mkdir", "keep": [paths]}) runs it in a
        mount namespace of its own with private tmpfs mounts (privrun.py): same PID."""
        if private:
            argv = private_argv(argv, private)
        fd = self._log_fd(log)
        efd = self._log_fd(err) if err else fd
        try:
            p = subprocess.Popen(argv, stdout=fd, stderr=efd, stdin=subprocess.DEVNULL,
                                 start_new_session=True,
                                 env=None if env is None else {**os.environ, **env})
        except FileNotFoundError:
            raise AgentError(f"{argv[0]}: not found on this host", "notfound") from None
        finally:
            os.close(fd)
            if efd != fd:
                os.close(efd)
        st = starttime(p.pid)
        self.procs[p.pid] = p
        self.journal.add("process", pid=p.pid, starttime=st, grace=grace, label=argv[0])
        return {"pid": p.pid, "starttime": st}

    def op_poll(self, pid: int) -> dict[str, Any]:
        p = self._proc(pid)
        return {"returncode": p.poll()}

    def op_stop(self, pid: int, grace: float = 3.0) -> dict[str, Any]:
        p = self._proc(pid)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if p.poll() is not None:
                break
            try:
                os.killpg(pid, sig)   # its own session: the group is what it started
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        code = p.wait(timeout=5)
        self.journal.forget("process", "pid", pid)
        del self.procs[pid]
        return {"returncode": code}

    def op_adopt(self, pid: int, grace: float = 3.0, settle_titles: list[str] | None = None,
                 settle_timeout: float = 5.0) -> dict[str, Any]:
        """Journal the descendants of a process this agent started (sshd's per-connection
        processes, which leave its session): undone like it, by PID and start time. With
        `settle_titles`, first wait (at most `settle_timeout` s) until no descendant's
        process title contains one of them (journal.settle_descendants: the controller's
        Site.adopt_children runs the same wait on its own host)."""
        self._proc(pid)
        journal.settle_descendants(pid, settle_titles or (), settle_timeout)
        out = []
        for child in journal.descendants(pid):
            st = starttime(child)
            if st is None:
                continue
            self.journal.add("process", pid=child, starttime=st, grace=grace, label="adopted")
            out.append({"pid": child, "starttime": st})
        return {"processes": out}

    def op_kill(self, pid: int, starttime: int, grace: float = 3.0) -> dict[str, Any]:
        """End an adopted process (only one this agent journaled, and only while its PID
        still has that start time)."""
        if not any(e["kind"] == "process" and e["pid"] == pid and e.get("label") == "adopted"
                   for e in self.journal.entries):
            raise AgentError(f"process {pid} was not started by this agent", "notours")
        kill(pid, starttime, grace)
        self.journal.forget("process", "pid", pid)
        return {}

    def _proc(self, pid: int) -> subprocess.Popen[bytes]:
        if pid not in self.procs:
            raise AgentError(f"process {pid} was not started by this agent", "notours")
        return self.procs[pid]

    def op_read_file(self, path: str) -> dict[str, Any]:
        try:
            with open(path, "rb") as f:
                return {"data": base64.b64encode(f.read()).decode()}
        except FileNotFoundError:
            raise AgentError(f"{path}: no such file", "notfound") from None

    def _ours(self, path: str) -> bool:
        """A path this agent created, or one inside a directory it created (or its state)."""
        real = os.path.abspath(path)
        mine = [self.state] + [e["path"] for e in self.journal.entries if e["kind"] == "path"]
        return any(real == m or real.startswith(m.rstrip("/") + "/") for m in mine)

    def op_write_file(self, path: str, data: str, mode: int = 0o600,
                      journal: bool = True) -> dict[str, Any]:
        """Write atomically with `mode` (a temporary file created with it, then renamed).
        An existing file is replaced only if this agent created it: never a file of the
        host's own."""
        existed = os.path.lexists(path)
        if existed and not self._ours(path):
            raise AgentError(f"{path} exists and was not created by tunbench: not replaced",
                             "notours")
        tmp = f"{path}.tb-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, mode)  # umask never widens or narrows what was asked
            f.write(base64.b64decode(data))
        os.replace(tmp, path)
        if journal and not existed:
            self.journal.add("path", path=path)
        return {"size": os.path.getsize(path)}

    def op_mkdir(self, path: str, mode: int = 0o700) -> dict[str, Any]:
        os.mkdir(path, mode)
        os.chmod(path, mode)
        self.journal.add("path", path=path)
        return {}

    def op_remove(self, path: str) -> dict[str, Any]:
        if not self._ours(path):
            raise AgentError(f"{path} was not created by tunbench: not removed", "notours")
        undo([{"kind": "path", "path": path}])
        self.journal.forget("path", "path", path)
        return {}

    def op_proc_stat(self) -> dict[str, Any]:
        with open("/proc/stat") as f:
            return {"text": f.read(), "time": time.time()}

    def op_clock(self) -> dict[str, Any]:
        """The site's wall clock, for the client's offset estimate (client.clock_offset)."""
        return {"time": time.time()}

    def op_cpu_start(self, interval: float = 1.0, pids: list[int] | None = None,
                     kernel_prefix: str = "") -> dict[str, Any]:
        """Sample /proc/stat every `interval`, and the CPU time (and threads) of `pids` and
        of the kernel threads named `kernel_prefix`N (ksoftirqd/): {pid: comm} tracked."""
        if self.sampler is None:
            tracked = list(pids or [])
            if kernel_prefix:
                tracked += kernel_threads(kernel_prefix)
            self.sampler = Sampler(interval, tracked)
            self.sampler.start()
        return {"tracked": {str(p): comm_of(p) for p in self.sampler.pids}}

    def op_cpu_take(self, stop: bool = False) -> dict[str, Any]:
        """The /proc/stat readings taken since the last take (sampled here, no round trip
        per second)."""
        if self.sampler is None:
            return {"samples": []}
        samples = self.sampler.take()
        if stop:
            self.sampler.stop()
            self.sampler = None
        return {"samples": samples}

    def op_links(self) -> dict[str, Any]:
        from . import nl
        return {"links": nl.links()}

    def op_link_add(self, ifname: str, kind: str, attrs: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
        from . import nl
        nl.add(ifname, kind, attrs or {})
        self.journal.add("link", ifname=ifname)
        return {}

    def op_link_journal(self, ifnames: list[str]) -> dict[str, Any]:
        """Journal tunbench links about to be made by a command (`ip -batch`: N devices in
        one process), before they exist: EOF and a later sweep delete them like the agent's
        own (deleting one never made is a no-op)."""
        from . import nl
        for ifname in ifnames:
            self.journal.add("link", ifname=nl.ours(ifname))
        return {}

    def op_link_del(self, ifname: str) -> dict[str, Any]:
        from . import nl
        nl.delete(ifname)
        self.journal.forget("link", "ifname", ifname)
        return {}

    def op_addr_add(self, ifname: str, cidr: str) -> dict[str, Any]:
        from . import nl
        nl.add_addr(ifname, cidr)
        return {}

    def op_link_set(self, ifname: str, attrs: dict[str, Any], keep: str = ""
                    ) -> dict[str, Any]:
        from . import nl
        return nl.set_link(ifname, attrs, keep)

    def op_netns_add(self, name: str) -> dict[str, Any]:
        """Create a tunbench network namespace on this host (a chain's site or function),
        journaled before it exists: EOF and a later sweep delete it, and with it every link,
        address, route and nftables table inside."""
        if not name.startswith(journal.NETNS_PREFIX):
            raise AgentError(f"refusing namespace {name!r}: not a tunbench name", "notours")
        self.journal.add("netns", name=name)
        code, err = run_argv(["ip", "netns", "add", name])
        if code != 0:
            self.journal.forget("netns", "name", name)
            raise AgentError(f"ip netns add {name}: {err.strip()}")
        return {}

    def op_netns_del(self, name: str) -> dict[str, Any]:
        """Delete a namespace this agent created (one already gone is fine), and forget it."""
        if not any(e["kind"] == "netns" and e["name"] == name for e in self.journal.entries):
            raise AgentError(f"no such namespace {name} of this agent", "notfound")
        journal.del_netns(name)
        self.journal.forget("netns", "name", name)
        return {}

    def op_host_record(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Journal an object made on this host by commands (tbtun's bpffs mount, pins, tc
        attachments: bpfhost.KINDS), so EOF and a later sweep undo it like the agent's own."""
        if entry.get("kind") not in bpfhost.KINDS:
            raise AgentError(f"cannot journal objects of kind {entry.get('kind')!r}",
                             "protocol")
        self.journal.add(**entry)
        return {}

    def op_host_undo(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Undo one object journaled by host_record, and forget it."""
        found = [e for e in self.journal.entries if e["kind"] in bpfhost.KINDS
                 and bpfhost.same(e, entry)]
        if not found:
            raise AgentError(f"no such journaled {entry.get('kind')}", "notfound")
        bpfhost.undo(found[-1], run_argv)
        self.journal.forget_entry(found[-1])
        return {}

    def op_tcx_attach(self, ifname: str, hook: str, prog_pin: str, link_pin: str
                      ) -> dict[str, Any]:
        """tbtun's tcx attachment on this host (the caller journals it with host_record
        first: undo unpins the link)."""
        bpfhost.tcx_attach(None, ifname, hook, prog_pin, link_pin)
        return {}

    def op_tcx_prog_ids(self, ifname: str, hook: str) -> dict[str, Any]:
        return {"ids": bpfhost.tcx_prog_ids(None, ifname, hook)}

    def op_list_dir(self, path: str) -> dict[str, Any]:
        """Names in a directory this agent created (log files of a case)."""
        if not self._ours(path):
            raise AgentError(f"{path} was not created by tunbench", "notours")
        return {"names": sorted(os.listdir(path))}

    def op_sweep(self) -> dict[str, Any]:
        return {"undone": sweep(self.state)}

    # -- the loop ---------------------------------------------------------------------------
    def handle(self, line: bytes) -> dict[str, Any]:
        try:
            req = json.loads(line)
            rid = req.get("id")
        except ValueError:
            return {"id": None, "ok": False, "error": "request is not JSON", "type": "protocol"}
        fn = getattr(self, f"op_{req.get('op')}", None)
        if fn is None:
            return {"id": rid, "ok": False, "error": f"unknown op {req.get('op')!r}",
                    "type": "protocol"}
        try:
            return {"id": rid, "ok": True, "result": fn(**req.get("args", {}))}
        except AgentError as exc:
            return {"id": rid, "ok": False, "error": str(exc), "type": exc.kind}
        except Exception as exc:  # noqa: BLE001 - one line back to the client
            return {"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                    "type": "error"}

    def close(self) -> list[str]:
        if self.sampler is not None:
            self.sampler.stop()
        errors = undo(self.journal.entries)
        if not errors:
            shutil.rmtree(self.state, ignore_errors=True)
        return errors


def comm_of(pid: int) -> str:
    return proccpu.read_comm(pid)


def kernel_threads(prefix: str) -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and
            comm_of(int(n)).startswith(prefix)]


class Sampler(threading.Thread):
    def __init__(self, interval: float, pids: list[int] | None = None) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.pids = list(pids or [])
        self.samples: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            with open("/proc/stat") as f:
                text = f.read()
            sample: dict[str, Any] = {"time": time.time(), "text": text}
            if self.pids:
                sample["mono"] = time.monotonic()
                # one pass over each process and its threads (proccpu's docstring: why)
                sample["procs"] = {str(p): c for p in self.pids if (c := proccpu.read(p))}
            with self.lock:
                self.samples.append(sample)
            self.done.wait(self.interval)

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            out, self.samples = self.samples, []
        return out

    def stop(self) -> None:
        self.done.set()


BEAT = b'{"op": "beat"}'


def _reader(agent: Agent) -> None:
    """Requests from stdin into the queue; EOF (the connection is gone) ends the agent. Any
    line proves the controller alive; a heartbeat is only that (never queued, no reply)."""
    try:
        for line in sys.stdin.buffer:
            agent.last_seen = time.monotonic()
            if line.strip() == BEAT:
                agent.last_beat = time.time()
                continue
            agent.lines.put(line)
    finally:
        agent.eof.set()
        agent.lines.put(None)


def _killgroup(p: subprocess.Popen[str]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.communicate()


def private_argv(argv: list[str], private: dict[str, list[str]]) -> list[str]:
    """argv that runs `argv` through tbagent.privrun, from this agent's zipapp, in a new mount
    namespace (mounts there never reach the host's)."""
    pyz = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    opts = ["--outer", os.readlink("/proc/self/ns/mnt")]
    for key in ("tmpfs", "mkdir", "keep"):
        for path in private.get(key, []):
            opts += [f"--{key}", str(path)]
    return ["unshare", "--mount", "--propagation", "slave", "env", f"PYTHONPATH={pyz}",
            sys.executable, "-m", "tbagent.privrun", *opts, "--", *argv]


def _end(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(state: str) -> int:
    """Serve requests until EOF, then undo everything. stdout carries only the protocol."""
    os.umask(0o077)        # journal, owner, logs: root's alone
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)          # a stray print (ours or pyroute2's) can never corrupt the protocol
    with open(os.path.join(state, "owner"), "w") as f:
        f.write(f"{os.getpid()} {starttime(os.getpid())}\n")
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _end)
    agent = Agent(state)
    try:
        out.write(json.dumps({"id": 0, "ok": True, "result": agent.op_hello()}).encode() + b"\n")
        threading.Thread(target=_reader, args=(agent,), daemon=True).start()
        while (line := agent.lines.get()) is not None:
            reply = agent.handle(line)
            try:
                out.write(json.dumps(reply).encode() + b"\n")
            except BrokenPipeError:
                break     # the connection is gone: clean up below
    except SystemExit:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        errors = agent.close()
        for e in errors:
            sys.stderr.write(f"tunbench agent: could not undo {e}\n")
    return 1 if errors else 0
