"""What the agent created on its site, journaled so it is undone even after a crash (runs THERE).

Entries are one JSON object a line in STATE/journal.jsonl, fsync'd the moment the object
exists; the agent's own `pid starttime` is in STATE/owner. `undo` reverses entries newest
first (processes by PID and start time, with their process group; files; tb links; tbtun's
bpffs mount, pins and tc attachments, by bpfhost.py); `sweep`
does it for the journals of agents on this host whose owner is gone. Also the process-tree
helpers of adopting a daemon's children (`descendants`, `settle_descendants`), which the controller's
tunbench.proc uses too: one implementation on both sides. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from typing import Any

from . import bpfhost

ROOT = "/run/tunbench"
NETNS_PREFIX = "tb-"        # testbed.names: tb-<run id>-<name>


def starttime(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    return None if rest[0] == "Z" else int(rest[19])


def descendants(pid: int) -> list[int]:
    """PIDs of every process below `pid` (sshd's per-connection children), sorted. One walk
    of /proc for both sides: the agent's `adopt` and, on the controller, tunbench.proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return sorted(out)


def _titled(pid: int, titles: tuple[bytes, ...]) -> bool:
    """Whether the process title of `pid` (its cmdline, NULs read as spaces: what a daemon
    such as sshd rewrites) contains one of `titles`; a process gone (or a zombie) has none."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().replace(b"\0", b" ")
    except OSError:
        return False
    return any(t in title for t in titles)


def settle_descendants(pid: int, titles: tuple[str, ...] | list[str], timeout: float = 5.0,
           poll: float = 0.02) -> bool:
    """Wait until no process below `pid` has a title containing one of `titles` (sshd's
    per-connection processes still in authentication: "sshd: [net]"), polling every `poll`
    seconds for at most `timeout`. True once none has (at once without titles), False when
    the time ran out: the caller goes on with what is there. Shared by the agent's `adopt`
    and the controller's (testbed.base.Site.adopt_children, through tunbench.proc)."""
    want = tuple(t.encode() for t in titles)
    deadline = time.monotonic() + timeout
    while want:
        if not any(_titled(child, want) for child in descendants(pid)):
            break
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def kill(pid: int, start: int | None, grace: float = 3.0) -> bool:
    """SIGTERM then SIGKILL a process group we started, only if the PID is still ours."""
    if start is None or starttime(pid) != start:
        return False
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)   # spawned with a new session: pid is its group
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if starttime(pid) != start:
                return True
            time.sleep(0.02)
    return starttime(pid) != start


def run_argv(argv: list[str]) -> tuple[int, str]:
    """An undo command (bpfhost's argvs): its exit code and stderr."""
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=20, check=False)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    return r.returncode, r.stderr


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


class Journal:
    """What this agent created, on disk (one JSON object a line) and in memory."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.path = os.path.join(state, "journal.jsonl")
        self.entries: list[dict[str, Any]] = []

    def add(self, kind: str, **info: Any) -> dict[str, Any]:
        entry = {"kind": kind, **info}
        self.entries.append(entry)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return entry

    def forget(self, kind: str, key: str, value: Any) -> None:
        self.entries = [e for e in self.entries if not (e["kind"] == kind and e[key] == value)]
        self._rewrite()

    def forget_entry(self, entry: dict[str, Any]) -> None:
        self.entries = [e for e in self.entries if e is not entry]
        self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in self.entries)
        os.replace(tmp, self.path)


def undo(entries: list[dict[str, Any]]) -> list[str]:
    """Undo journal entries newest first; collect failures, keep going."""
    errors = []
    for e in reversed(entries):
        try:
            if e["kind"] == "process":
                kill(int(e["pid"]), e.get("starttime"), float(e.get("grace", 3.0)))
            elif e["kind"] == "path":
                if os.path.isdir(e["path"]) and not os.path.islink(e["path"]):
                    shutil.rmtree(e["path"], ignore_errors=True)
                elif os.path.lexists(e["path"]):
                    os.unlink(e["path"])
            elif e["kind"] == "link":
                from . import nl
                nl.delete(e["ifname"])
            elif e["kind"] == "netns":
                del_netns(e["name"])
            elif e["kind"] in bpfhost.KINDS:
                bpfhost.undo(e, run_argv)
        except Exception as exc:  # noqa: BLE001 - reported, the rest is still undone
            errors.append(f"{e['kind']} {_what(e)}: {exc}")
    return errors


def del_netns(name: str) -> None:
    """`ip netns del` of a tunbench namespace; one already gone is fine."""
    if not name.startswith(NETNS_PREFIX) or not os.path.exists(f"/run/netns/{name}"):
        return
    code, err = run_argv(["ip", "netns", "del", name])
    if code != 0 and os.path.exists(f"/run/netns/{name}"):
        raise RuntimeError(f"ip netns del {name}: {err.strip()}")


def _what(e: dict[str, Any]) -> Any:
    """How an entry names its object: PID, path, link, or device (tc attachments)."""
    return e.get("pid") or e.get("path") or e.get("ifname") or e.get("name")


def sweep(own: str) -> list[str]:
    """Undo the journals of agents on this host that are gone (crash, SIGKILL, power loss)."""
    done: list[str] = []
    if not os.path.isdir(ROOT):
        return done
    for name in sorted(os.listdir(ROOT)):
        state = os.path.join(ROOT, name)
        journal = os.path.join(state, "journal.jsonl")
        if state == own or not name.startswith("tb-") or not os.path.isfile(journal):
            continue
        if _owner_alive(state):
            continue
        entries = _journal_entries(journal)
        errors = undo(entries)
        done += [f"{name}: {e['kind']} {_what(e)}"
                 for e in entries]
        if not errors:
            shutil.rmtree(state, ignore_errors=True)
    return done


def _owner_alive(state: str) -> bool:
    owner = read_owner(state)
    return owner is not None and starttime(owner[0]) == owner[1]


def read_owner(state: str) -> tuple[int, int] | None:
    """(pid, start time) of the agent that owns a state directory, None when unreadable."""
    try:
        with open(os.path.join(state, "owner")) as f:
            pid, start = f.read().split()
        return int(pid), int(start)
    except (OSError, ValueError):
        return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def machine_identity() -> dict[str, str]:
    """What tells one machine (one running kernel) and its namespaces from another: the
    kernel's boot id (new at every boot, the same in every container of that kernel), the
    machine id, and this process's PID and network namespaces. Used on both ends: the agent
    says where it runs (hello), the controller says where it runs (watch)."""
    out = {"boot_id": _read("/proc/sys/kernel/random/boot_id"),
           "machine_id": _read("/etc/machine-id")}
    for ns in ("pid", "net", "mnt"):
        try:
            out[f"{ns}ns"] = os.readlink(f"/proc/self/ns/{ns}")
        except OSError:
            out[f"{ns}ns"] = ""
    return out


def live_agents(own: str) -> list[dict[str, Any]]:
    """The other agents running on this host: their state directory, owner, controller (as
    it said in `watch`) and the age of the last heartbeat they received."""
    out: list[dict[str, Any]] = []
    if not os.path.isdir(ROOT):
        return out
    for name in sorted(os.listdir(ROOT)):
        state = os.path.join(ROOT, name)
        if state == own or not name.startswith("tb-") or not _owner_alive(state):
            continue
        try:
            with open(os.path.join(state, "controller.json"), encoding="utf-8") as f:
                ctl = json.load(f)
        except (OSError, ValueError):
            ctl = None
        beat = _read(os.path.join(state, "beat"))
        owner = read_owner(state)
        out.append({"state": state, "pid": owner[0] if owner else None, "controller": ctl,
                    "beat_age": round(time.time() - float(beat), 1) if beat else None})
    return out


def end_agent(state: str, wait: float = 30.0) -> list[str]:
    """End a live agent whose controller is gone: SIGTERM (it undoes its journal and removes
    its directory, as at EOF), SIGKILL if it does not within `wait`, then sweep what is left.
    Only a tunbench agent's directory under ROOT, and only while its PID has its start
    time."""
    real = os.path.abspath(state)
    if os.path.dirname(real) != ROOT or not os.path.basename(real).startswith("tb-"):
        raise ValueError(f"{state} is not a tunbench agent's directory")
    owner = read_owner(real)
    entries = _journal_entries(os.path.join(real, "journal.jsonl"))
    if owner is not None and starttime(owner[0]) == owner[1]:
        for sig, grace in ((signal.SIGTERM, wait), (signal.SIGKILL, 5.0)):
            try:
                os.kill(owner[0], sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while starttime(owner[0]) == owner[1] and time.monotonic() < deadline:
                time.sleep(0.05)
            if starttime(owner[0]) != owner[1]:
                break
    # killed before it could undo: what a sweep does
    if os.path.isdir(real) and not undo(entries):
        shutil.rmtree(real, ignore_errors=True)
    return [f"{os.path.basename(real)}: {e['kind']} {_what(e)}" for e in entries]


def _journal_entries(path: str) -> list[dict[str, Any]]:
    entries = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    continue   # a line cut short by a crash
    except OSError:
        pass
    return entries
