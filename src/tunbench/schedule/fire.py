"""Running a schedule: one firing (what the systemd service calls) and the foreground loop
(hosts without systemd). Never two campaigns of one schedule at once: a firing holds an
exclusive flock on <schedules>/<name>.lock (with its PID in it) for the whole campaign; a
firing that finds it held is skipped and recorded as skipped. The kernel drops the lock when
its holder dies, so a crashed run never blocks the schedule."""

from __future__ import annotations

import fcntl
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from .. import proc
from ..errors import Interrupted
from ..store import db
from .spec import Schedule, schedules_dir

RAN, SKIPPED, FAILED, OUTSIDE, EXPIRED = "ran", "skipped", "failed", "outside", "expired"


@dataclass(frozen=True)
class Firing:
    status: str
    slot: float
    campaign: str | None = None
    reason: str = ""


class Lock:
    """An exclusive, non-blocking flock with the holder's PID written in the file."""

    def __init__(self, name: str) -> None:
        self.path = schedules_dir() / f"{name}.lock"
        self.f: IO[str] | None = None

    def acquire(self) -> str | None:
        """None when acquired, else who holds it ('PID 1234')."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")  # noqa: SIM115 (held across the campaign)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            return f"PID {holder}"
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self.f = f
        return None

    def release(self) -> None:
        if self.f is not None:
            self.f.seek(0)
            self.f.truncate()
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()
            self.f = None


def _record(s: Schedule, f: Firing, started: float | None = None,
            ended: float | None = None) -> None:
    """The firing in the store's schedule_run table; a store problem is one warning line."""
    if s.db == "off":
        return
    try:
        conn = db.connect(s.db)
        try:
            db.record_schedule_run(conn, s.name, f.slot, f.status, started=started,
                                   ended=ended, campaign=f.campaign, reason=f.reason or None)
        finally:
            conn.close()
    except Exception as exc:
        print(f"tunbench: warning: schedule {s.name}: firing not recorded ({exc})",
              file=sys.stderr)


def run_argv(s: Schedule, out: Path) -> list[str]:
    db_args = ["--db", s.db] if s.db else []
    return [sys.executable, "-m", "tunbench", "run", *s.run_args, "--out", str(out),
            "--quiet", *db_args]


def fire(s: Schedule, slot: float, *, slip: bool = True,
         sleep: Callable[[float], None] = time.sleep) -> Firing:
    """One slot: check until/days/window, wait the random slip, take the lock, run the
    campaign in a child `tunbench run` (which records it in the store), record the firing."""
    if s.expired(slot):
        return Firing(EXPIRED, slot, reason="past --until")
    if not s.allows(datetime.fromtimestamp(slot)):
        return Firing(OUTSIDE, slot, reason="outside the window/days")
    if slip and s.slip > 0:
        sleep(random.uniform(0, s.slip))
    lock = Lock(s.name)
    holder = lock.acquire()
    if holder:
        f = Firing(SKIPPED, slot, reason=f"previous campaign ({holder}) still running")
        _record(s, f, started=time.time())
        return f
    try:
        return _run_locked(s, slot)
    finally:
        lock.release()


def _run_locked(s: Schedule, slot: float) -> Firing:
    base = Path(s.results) / s.name
    out = base / datetime.now().strftime("%Y%m%d-%H%M%S")
    n = 1
    while out.exists():
        n += 1
        out = base / (datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{n}")
    base.mkdir(parents=True, exist_ok=True)
    started = time.time()
    log = base / f".{out.name}.log"
    p = proc.spawn(run_argv(s, out), log_path=log, label=f"schedule {s.name} campaign")
    try:
        code = p.wait(timeout=None)
    except (Interrupted, KeyboardInterrupt):
        p.stop(grace=120.0)   # SIGTERM: the campaign undoes what it created
        raise
    tail = p.log_tail(3).strip().replace("\n", " | ")
    log.unlink(missing_ok=True)
    status = RAN if code == 0 else FAILED
    f = Firing(status, slot, str(out.resolve()), "" if code == 0 else f"exit {code}: {tail}")
    _record(s, f, started=started, ended=time.time())
    return f


def foreground(s: Schedule, *, runs: int | None = None,
               report: Callable[[Firing], None] = lambda f: None) -> list[Firing]:
    """Fire every `every` seconds from now until --until (or `runs` campaigns ran). Slots that
    passed while a campaign ran are recorded as skipped, never run late or concurrently."""
    start = time.time()
    out: list[Firing] = []
    k = 0
    while runs is None or sum(f.status in (RAN, FAILED) for f in out) < runs:
        slot = start + k * s.every
        if s.expired(slot):
            break
        wait = slot - time.time()
        if wait > 0:
            time.sleep(wait)
        f = fire(s, slot)
        out.append(f)
        report(f)
        k += 1
        while start + k * s.every < time.time():   # slots missed while it ran
            missed = Firing(SKIPPED, start + k * s.every,
                            reason="previous campaign of this schedule still running")
            if not s.expired(missed.slot) and s.allows(datetime.fromtimestamp(missed.slot)):
                _record(s, missed)
                out.append(missed)
                report(missed)
            k += 1
    return out
