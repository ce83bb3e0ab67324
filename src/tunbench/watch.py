"""Watches a tunnel's datapath daemons while a workload runs.

If a daemon dies, the problem is recorded and the workload's own processes (the ledger's
process entries added after the watch began) are stopped by PID, so the case fails at once
with the cause instead of waiting for the traffic tool's timeout.
"""

from __future__ import annotations

import threading
from typing import Any

from . import proc
from .testbed.base import Site
from .testbed.ledger import Ledger
from .tunnels.base import Endpoints


class DatapathWatch:
    """Watches the tunnel's datapath daemons while the workload runs. If one dies, the
    problem is recorded and the workload's own processes (the ledger's process entries added
    after the watch began) are stopped by PID, so the case fails at once instead of waiting
    for the traffic tool's timeout."""

    def __init__(self, ep: Endpoints, ledger: Ledger, sites: dict[str, Site] | None = None,
                 interval: float = 0.2) -> None:
        """`sites` (name -> Site) asks each daemon's own site whether it still runs (on a
        remote host: its agent); without them, PIDs of this host's ledger only."""
        self.ep, self.ledger, self.interval = ep, ledger, interval
        self.sites = sites or {}
        self.problem: str | None = None
        self._start_index = len(ledger.entries)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="datapath-watch", daemon=True)
        self._procs = {int(e["pid"]): e for e in ledger.entries if e["kind"] == "process"}

    def __enter__(self) -> DatapathWatch:
        if any(self.ep.datapath_pids.values()):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
            if self.problem is None and exc[0] is None:
                self.problem = self._dead()   # one that died in the last interval

    def _label(self, pid: int) -> str:
        for e in self.ledger.entries:
            if e["kind"] == "process" and e["pid"] == pid or (
                    e["kind"] == "remote" and e.get("op") == "stop"
                    and e["args"].get("pid") == pid):
                return str(e.get("label", "daemon"))
        return "daemon"

    def _gone(self, site: str, pid: int) -> str | None:
        s = self.sites.get(site)
        if s is not None:
            return s.process_gone(self.ledger, pid)
        if pid not in self._procs:
            return None
        return None if proc.pid_alive(pid, self._procs[pid].get("starttime")) else "died"

    def _dead(self) -> str | None:
        for site, pids in self.ep.datapath_pids.items():
            for pid in pids:
                try:
                    why = self._gone(site, pid)
                except Exception:   # noqa: BLE001 - a lost connection is the workload's to report
                    return None
                if why:
                    detail = "" if why == "died" else f" ({why})"
                    return (f"datapath daemon {self._label(pid)} (PID {pid}, site {site}) "
                            f"died during the measurement{detail}")
        return None

    def _stop_workload(self, entries: list[dict[str, Any]]) -> None:
        for e in entries:
            if e["kind"] == "process":
                proc.kill_pid(int(e["pid"]), e.get("starttime"), grace=1.0)
            elif e["kind"] == "remote" and e.get("op") == "stop":
                try:
                    self.ledger.undo_entry(e)   # through its host's agent; again at teardown
                except Exception:   # noqa: BLE001 - teardown retries and reports
                    continue

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            problem = self._dead()
            if problem:
                self.problem = problem
                self._stop_workload(self.ledger.entries[self._start_index:])
                return
