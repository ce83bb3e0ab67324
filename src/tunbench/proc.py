"""The one way tunbench runs a process: argv lists, never shell strings.

`run` waits for a command and captures its output; `spawn` starts a long-lived process whose
output goes to a file (no pipe to fill up), known by PID and stopped by PID. A namespace is
entered with `ip netns exec NAME argv...`, which execs the program, so the PID we hold is the
program's own. The orchestrating process never calls setns().
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CommandFailed, UnavailableError

# Process trees (a daemon's per-connection children, adopted by Site.adopt_children): one walk
# of /proc for this host and a remote site's agent, whose package ships with the standard
# library only, so it is written there and re-exported here
from .remote.agent.journal import descendants as descendants
from .remote.agent.journal import settle_descendants as settle_descendants

# Debian package that provides each external tool, for "missing tool" hints.
# Tools of the testbed, the workloads and the VM lab -> Debian package. Tunnel drivers declare
# their own tools and packages (tunnels/base.py `needs`): the tunnels package registers that
# table with add_package_source() when it is imported (proc is below it and never imports
# it); package_for() consults both.
TOOL_PACKAGES: dict[str, str] = {
    "ip": "iproute2",
    "tc": "iproute2",
    "ss": "iproute2",
    "iperf3": "iperf3",
    "ethtool": "ethtool",
    "sockperf": "sockperf",
    "ping": "iputils-ping",
    "sysctl": "procps",
    "qemu-system-x86_64": "qemu-system-x86",
    "debootstrap": "debootstrap",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "taskset": "util-linux",
    "mkfs.ext4": "e2fsprogs",
    "tcpdump": "tcpdump",
    "nft": "nftables",
}

SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/lib/ipsec", "/usr/lib/openssh",
             "/usr/libexec/strongswan", "/usr/libexec/ipsec")
# The same search as which(), on another host (constant; the tools are its arguments): one
# line per tool, its full path or "-".
WHICH_SH = ('for t; do p=$(command -v "$t" 2>/dev/null); if [ -z "$p" ]; then p=-; '
            'for d in ' + " ".join(SBIN_DIRS) + '; do '
            'if [ -f "$d/$t" ] && [ -x "$d/$t" ]; then p="$d/$t"; break; fi; done; fi; '
            'echo "$p"; done')


def which(tool: str) -> str | None:
    """Full path of a tool, also looking in sbin directories a non-login PATH may lack."""
    found = shutil.which(tool)
    if found:
        return found
    for d in SBIN_DIRS:
        p = Path(d) / tool
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def require(tool: str) -> str:
    """Path of a tool, or an UnavailableError that names the package to install."""
    path = which(tool)
    if path is None:
        raise UnavailableError(f"required tool '{tool}' is not installed",
                               f"install it: apt-get install {package_for(tool)}")
    return path


def package_for(tool: str) -> str:
    """The Debian package providing `tool`: the base table, else a tunnel driver's declaration,
    else the tool's own name."""
    if tool in TOOL_PACKAGES:
        return TOOL_PACKAGES[tool]
    for source in _PACKAGE_SOURCES:
        table = source()
        if tool in table:
            return table[tool]
    return tool


PackageSource = Callable[[], dict[str, str]]
_PACKAGE_SOURCES: list[PackageSource] = []


def add_package_source(source: PackageSource) -> None:
    """A table of tool -> Debian package kept by a layer above this one (the tunnel drivers'
    declarations), read at call time by package_for()."""
    if source not in _PACKAGE_SOURCES:
        _PACKAGE_SOURCES.append(source)


def in_netns(netns: str | None, argv: list[str]) -> list[str]:
    """argv that runs inside a named network namespace (or as is for the root namespace)."""
    if not netns:
        return list(argv)
    return ["ip", "netns", "exec", netns, *argv]


def _check_argv(argv: list[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not argv:
        raise TypeError("argv must be a non-empty list of strings, never a shell string")
    return [str(a) for a in argv]


@dataclass(frozen=True)
class Completed:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _short(argv: list[str]) -> str:
    text = " ".join(argv)
    return text if len(text) < 160 else text[:157] + "..."


def run(argv: list[str], *, netns: str | None = None, timeout: float = 60.0, check: bool = True,
        input: str | None = None, env: dict[str, str] | None = None,
        cwd: str | Path | None = None) -> Completed:
    """Run a command to completion; raise CommandFailed on non-zero exit when check is set."""
    full = in_netns(netns, _check_argv(argv))
    run_env = None if env is None else {**os.environ, **env}
    try:
        cp = subprocess.run(full, input=input, capture_output=True, text=True, timeout=timeout,
                            env=run_env, cwd=cwd, check=False, stdin=None if input is not None
                            else subprocess.DEVNULL)
    except FileNotFoundError:
        require(full[0])
        raise
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise CommandFailed(f"command timed out after {timeout:g}s: {_short(full)}",
                            "the host may be overloaded; retry or raise the timeout",
                            argv=full, output=str(out)) from None
    result = Completed(full, cp.returncode, cp.stdout, cp.stderr)
    if check and cp.returncode != 0:
        last = (cp.stderr.strip() or cp.stdout.strip()).splitlines()[-1:] or [""]
        raise CommandFailed(f"command failed (exit {cp.returncode}): {_short(full)}: {last[0]}",
                            argv=full, returncode=cp.returncode, output=cp.stdout + cp.stderr)
    return result


def proc_starttime(pid: int) -> int | None:
    """Start time of a PID in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = stat[stat.rindex(")") + 2:].split()
    return int(rest[19])


def pid_alive(pid: int, starttime: int | None = None) -> bool:
    st = proc_starttime(pid)
    if st is None:
        return False
    if starttime is not None and st != starttime:
        return False  # PID reused by another process: not ours
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_pid(pid: int, starttime: int | None = None, *, grace: float = 3.0) -> bool:
    """SIGTERM then SIGKILL one process we started, identified by PID and start time.

    Returns True if the process was ours and is gone now; False if it was already gone or the
    PID now belongs to someone else (then nothing is signalled). A child of ours that is gone
    is reaped either way, so no zombie of it is left.
    """
    if not pid_alive(pid, starttime):
        if starttime is None or proc_starttime(pid) in (None, starttime):
            _collect(pid)  # it exited on its own: collect it (never another process's status)
        return False
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid, starttime):
                _collect(pid)  # a child that died after the reap above is a zombie until now
                return True
            time.sleep(0.02)
    gone = not pid_alive(pid, starttime)
    if gone:
        _collect(pid)
    return gone


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _collect(pid: int, timeout: float = 2.0) -> None:
    """Reap a child of ours that is dead. A multi-threaded one (ovs-vswitchd) shows as a zombie
    while its other threads still exit and can be reaped only after them, so poll briefly."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return   # not our child, or reaped already
        if time.monotonic() > deadline:
            return
        time.sleep(0.005)


@dataclass
class Process:
    """A long-lived process started by `spawn`."""

    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path | None
    label: str
    starttime: int | None = field(default=None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit; raise CommandFailed on timeout (the process keeps running)."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandFailed(f"{self.label} did not finish within {timeout:g}s",
                                "the host may be overloaded", argv=self.argv) from None

    def stop(self, grace: float = 3.0) -> int | None:
        """Stop by PID (SIGTERM, then SIGKILL) and reap. Returns the exit code if known."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
            except ProcessLookupError:
                pass
        return self.popen.returncode

    def output(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def errors(self) -> str:
        """What the process wrote to stderr when it was spawned with split_stderr."""
        path = Path(f"{self.log_path}.err") if self.log_path else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def log_tail(self, lines: int = 15) -> str:
        text = self.output() + self.errors()
        return "\n".join(text.splitlines()[-lines:])


def spawn(argv: list[str], *, netns: str | None = None, log_path: Path | None = None,
          env: dict[str, str] | None = None, label: str | None = None,
          cwd: str | Path | None = None, split_stderr: bool = False) -> Process:
    """Start a process in the background; stdout and stderr go to log_path (or /dev/null).

    With split_stderr, stderr goes to log_path + ".err" so stdout stays machine-readable.
    """
    full = in_netns(netns, _check_argv(argv))
    run_env = None if env is None else {**os.environ, **env}
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    err: Any = subprocess.STDOUT
    if log_path and split_stderr:
        err = open(f"{log_path}.err", "wb")  # noqa: SIM115
    try:
        popen = subprocess.Popen(full, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL, env=run_env, cwd=cwd,
                                 start_new_session=True)
    except FileNotFoundError:
        require(full[0])
        raise
    finally:
        for f in (out, err):
            if hasattr(f, "close"):
                f.close()
    return Process(full, popen, log_path, label or Path(argv[0]).name,
                   proc_starttime(popen.pid))


def wait_ready(p: Process, *, ready: Callable[[], bool] | None = None,
               ready_text: str | None = None, timeout: float = 15.0,
               exits_when_ready: bool = False) -> None:
    """Return once a started process is ready: `ready_text` appeared in its output and/or the
    `ready` check returned True. Raise CommandFailed (with its last log line) if it exits
    first (unless `exits_when_ready` and it exited 0) or the timeout passes. Never a sleep
    standing in for readiness: the poll interval backs off from 5 ms to 100 ms."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while time.monotonic() < deadline:
        code = p.poll()
        if code is not None and not (exits_when_ready and code == 0):
            raise CommandFailed(f"{p.label} exited with code {code} while starting: "
                                f"{_tail_line(p)}", "see the case's error_log",
                                argv=p.argv, output=p.log_tail())
        text_ok = ready_text is None or ready_text in p.output() + p.errors()
        check_ok = ready is None or _safe(ready)
        if text_ok and check_ok:
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)
    raise CommandFailed(f"{p.label} not ready within {timeout:g}s: {_tail_line(p)}",
                        "see the case's error_log", argv=p.argv, output=p.log_tail())


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:
        return False


def _tail_line(p: Process) -> str:
    tail = p.log_tail(3).strip().splitlines()
    return tail[-1] if tail else "no output"


def spawn_piped(argv: list[str], *, stderr_path: Path, label: str | None = None) -> Process:
    """Start a process whose stdin and stdout are pipes to us (a line protocol such as the
    remote agent's over ssh); stderr goes to a file, so no third pipe can fill up."""
    full = _check_argv(argv)
    err = open(stderr_path, "wb")  # noqa: SIM115
    try:
        popen = subprocess.Popen(full, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, start_new_session=True)
    except FileNotFoundError:
        require(full[0])
        raise
    finally:
        err.close()
    return Process(full, popen, None, label or Path(argv[0]).name, proc_starttime(popen.pid))
