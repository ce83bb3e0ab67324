"""Watches a tunnel's datapath daemons while a workload runs.

If a daemon dies, the problem is recorded and the workload's own processes (the ledger's
process entries added after the watch began) are stopped by PID, so the case fails at once
with the cause instead of waiting for the traffic tool's timeout.
"""

from __future__ import annotations

import threading

from . import proc
from .testbed.ledger import Ledger
from .tunnels.base import Endpoints


class DatapathWatch:
    """Watches the tunnel's datapath daemons while the workload runs. If one dies, the
    problem is recorded and the workload's own processes (the ledger's process entries added
    after the watch began) are stopped by PID, so the case fails at once instead of waiting
    for the traffic tool's timeout."""

    def __init__(self, ep: Endpoints, ledger: Ledger, interval: float = 0.2) -> None:
        self.ep, self.ledger, self.interval = ep, ledger, interval
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

    def _dead(self) -> str | None:
        for site, pids in self.ep.datapath_pids.items():
            for pid in pids:
                if pid not in self._procs:
                    continue   # a daemon on a remote host: its agent owns it, not this one
                entry = self._procs.get(pid, {})
                if not proc.pid_alive(pid, entry.get("starttime")):
                    label = entry.get("label", "daemon")
                    return (f"datapath daemon {label} (PID {pid}, site {site}) died during "
                            "the measurement")
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            problem = self._dead()
            if problem:
                self.problem = problem
                for e in self.ledger.entries[self._start_index:]:
                    if e["kind"] == "process":
                        proc.kill_pid(int(e["pid"]), e.get("starttime"), grace=1.0)
                return
