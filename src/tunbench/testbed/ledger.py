"""Everything a run creates, recorded the moment it exists, undone in reverse order.

Entries are typed records (netns, link, process, path, ...) rather than closures, so the ledger
is also journaled to disk (STATE_DIR/<run id>.jsonl) and `tunbench cleanup` can undo what a
crashed run left behind, destroying only objects this project created. Undo ignores
"already gone"; any other failure is collected and reported after every other entry was tried.

The ledger knows the kinds of this layer (netns, link, process, path, command). The module that
makes any other kind registers its undo handler with `register_undo` (the ledger never imports
a layer above it); `tunbench cleanup` replays journals through testbed/journals.py, which
imports every such owner first.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import CommandFailed
from . import netlink

log = logging.getLogger(__name__)

STATE_DIR = Path(os.environ.get("TUNBENCH_STATE_DIR", "/run/tunbench"))
# Which process owns each live run id: `cleanup` never touches a run whose owner is alive.
# Kept in one fixed place whatever TUNBENCH_STATE_DIR says, so every run on the host sees it.
OWNERS_DIR = Path("/run/tunbench-owners")


def _write_owner(run_id: str) -> None:
    OWNERS_DIR.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    (OWNERS_DIR / run_id).write_text(f"{pid} {proc.proc_starttime(pid)}\n")


def owner_alive(run_id: str) -> bool:
    """True while the process that created `run_id` is still running."""
    owner = read_owner(run_id)
    return owner is not None and proc.pid_alive(*owner)


def read_owner(run_id: str) -> tuple[int, int | None] | None:
    """(PID, start time) of the process that created `run_id`, None when not recorded."""
    try:
        pid, start = (OWNERS_DIR / run_id).read_text().split()
        return int(pid), int(start) if start != "None" else None
    except (OSError, ValueError):
        return None

Undo = Callable[[dict[str, Any]], None]
_UNDO: dict[str, Undo] = {}


def register_undo(kind: str) -> Callable[[Undo], Undo]:
    """Decorator: the function that undoes ledger entries of `kind`, registered by the module
    that makes them. A kind registered twice by two functions is an error."""
    def deco(fn: Undo) -> Undo:
        old = _UNDO.get(kind)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__,
                                                                      fn.__qualname__):
            raise ValueError(f"ledger kind {kind!r} has an undo handler already "
                             f"({old.__module__}.{old.__qualname__})")
        _UNDO[kind] = fn
        return fn
    return deco


def undo_kinds() -> list[str]:
    """The kinds whose undo handler is registered so far."""
    return sorted(_UNDO)


def _undo(entry: dict[str, Any]) -> None:
    fn = _UNDO.get(entry["kind"])
    if fn is None:
        raise ValueError(f"no undo handler for ledger kind {entry['kind']!r} (the module that "
                         "makes it is not loaded)")
    fn(entry)


@register_undo("netns")
def _undo_netns(e: dict[str, Any]) -> None:
    kill_netns_processes(e["name"])
    netlink.remove_netns(e["name"])


def kill_netns_processes(netns: str) -> None:
    """Stop processes still living in a namespace this run created (so they are ours): a
    process whose ledger entry was never written (a signal between spawn and record) would
    otherwise keep running after its namespace is gone."""
    if netns not in netlink.list_netns():
        return
    r = proc.run(["ip", "netns", "pids", netns], check=False, timeout=10)
    for pid in r.stdout.split():
        if pid.isdigit() and int(pid) != os.getpid():
            proc.kill_pid(int(pid), grace=2.0)


@register_undo("link")
def _undo_link(e: dict[str, Any]) -> None:
    netlink.delete_link(e["name"], e.get("netns"))


@register_undo("process")
def _undo_process(e: dict[str, Any]) -> None:
    proc.kill_pid(int(e["pid"]), e.get("starttime"), grace=float(e.get("grace", 3.0)))


@register_undo("path")
def _undo_path(e: dict[str, Any]) -> None:
    p = Path(e["path"])
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


@register_undo("command")
def _undo_command(e: dict[str, Any]) -> None:
    """An argv that undoes something (e.g. `ip route del ...`); failure is reported, except
    one whose stderr says the object is already gone (the entry's `gone` messages)."""
    r = proc.run(list(e["argv"]), netns=e.get("netns"), timeout=float(e.get("timeout", 20)),
                 check=not e.get("gone"))
    if r.returncode and not any(g in r.stderr for g in e.get("gone", ())):
        raise CommandFailed(f"{' '.join(e['argv'])}: {r.stderr.strip()}")


@dataclass
class Ledger:
    run_id: str
    journal: bool = True
    entries: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _closed: bool = False

    @property
    def journal_path(self) -> Path:
        return STATE_DIR / f"{self.run_id}.jsonl"

    def add(self, kind: str, **info: Any) -> dict[str, Any]:
        if kind not in _UNDO:
            raise ValueError(f"no undo handler for ledger kind {kind!r}")
        entry = {"kind": kind, **info}
        if not self.entries and self.journal:
            _write_owner(self.run_id)
        self.entries.append(entry)
        if self.journal:
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            with open(self.journal_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
                f.flush()
        return entry

    # Typed shortcuts for the common kinds.
    def netns(self, name: str) -> None:
        self.add("netns", name=name)

    def link(self, name: str, netns: str | None) -> None:
        self.add("link", name=name, netns=netns)

    def process(self, p: proc.Process, grace: float = 3.0) -> proc.Process:
        self.add("process", pid=p.pid, starttime=p.starttime, label=p.label, grace=grace)
        return p

    def path(self, path: Path | str) -> Path:
        self.add("path", path=str(path))
        return Path(path)

    def command(self, argv: list[str], netns: str | None = None,
                gone: tuple[str, ...] = ()) -> None:
        """`gone`: stderr messages that mean "already undone" (not a failure)."""
        if gone:
            self.add("command", argv=list(argv), netns=netns, gone=list(gone))
        else:
            self.add("command", argv=list(argv), netns=netns)

    def undo_entry(self, entry: dict[str, Any]) -> None:
        """Undo one entry now (it stays in the ledger: undoing it again must be harmless, as
        for processes, which are matched by PID and start time)."""
        _undo(entry)

    def undo_all(self) -> list[str]:
        """Undo every entry in reverse; signals are held off so cleanup cannot be cut short."""
        old = _block_signals()
        try:
            while self.entries:
                entry = self.entries.pop()
                try:
                    _undo(entry)
                except Exception as exc:  # collect, keep undoing the rest
                    msg = f"could not undo {entry['kind']} {_describe(entry)}: {exc}"
                    log.warning(msg)
                    self.errors.append(msg)
            if self.journal and not self.errors:
                self.journal_path.unlink(missing_ok=True)
                (OWNERS_DIR / self.run_id).unlink(missing_ok=True)
        finally:
            _restore_signals(old)
        return self.errors

    def close(self) -> list[str]:
        if self._closed:
            return self.errors
        self._closed = True
        return self.undo_all()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(entry: dict[str, Any]) -> str:
    return str(entry.get("name") or entry.get("label") or entry.get("path") or entry.get("argv"))


def _block_signals() -> set[int] | None:
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    except (ValueError, OSError):
        return None


def _restore_signals(old: set[int] | None) -> None:
    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def replay_journals(only: str | None = None) -> list[str]:
    """Undo what crashed runs journaled (`only`: that run's journal alone). Returns what was
    undone. Call it through testbed/journals.py, which loads every kind's owner first."""
    done: list[str] = []
    for path in sorted(STATE_DIR.glob("*.jsonl")) if STATE_DIR.is_dir() else []:
        run_id = path.stem
        if (only is not None and run_id != only) or owner_alive(run_id):
            continue  # a run in progress, not a leftover
        entries = []
        for line in path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by the crash
        ledger = Ledger(run_id, journal=False, entries=entries)
        for e in entries:
            done.append(f"{run_id}: {e['kind']} {_describe(e)}")
        errors = ledger.undo_all()
        if not errors:
            path.unlink(missing_ok=True)
            (OWNERS_DIR / run_id).unlink(missing_ok=True)
    if only is None:
        _prune_owners()
    return done


def _prune_owners() -> None:
    """Owner records of dead processes (their journals replayed, or kept in another
    TUNBENCH_STATE_DIR): a missing record means "not alive" too, so they only take space."""
    if OWNERS_DIR.is_dir():
        for rec in OWNERS_DIR.iterdir():
            if not owner_alive(rec.name):
                rec.unlink(missing_ok=True)
