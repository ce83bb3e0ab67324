"""CPU per core from /proc/stat at 1 Hz, and per-process CPU of tracked PIDs.

/proc/stat is system-wide: on the local testbed both sites share these CPUs, so the figures
are the cost of both ends together (results say so). Parsing is pure and tested on captured
/proc/stat text; the sampler is a thread that reads two small files once a second.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def parse_proc_stat(text: str) -> dict[str, tuple[int, ...]]:
    """{'cpu': (...), 'cpu0': (...), ...} jiffies in FIELDS order."""
    out: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, *vals = line.split()
        nums = [int(v) for v in vals[:len(FIELDS)]]
        nums += [0] * (len(FIELDS) - len(nums))
        out[name] = tuple(nums)
    return out


def usage(prev: dict[str, tuple[int, ...]], cur: dict[str, tuple[int, ...]]) -> dict[str, dict[str, float]]:
    """Percent of each CPU spent in usr (user+nice), sys, irq, softirq, idle (idle+iowait),
    steal, and busy (everything but idle) between two /proc/stat readings."""
    res: dict[str, dict[str, float]] = {}
    for name, now in cur.items():
        before = prev.get(name)
        if before is None:
            continue
        d = dict(zip(FIELDS, (n - b for n, b in zip(now, before))))
        total = sum(d.values())
        if total <= 0:
            continue
        pct = {k: 100.0 * v / total for k, v in d.items()}
        idle = pct["idle"] + pct["iowait"]
        res[name] = {"usr": pct["user"] + pct["nice"], "sys": pct["system"], "irq": pct["irq"],
                     "softirq": pct["softirq"], "steal": pct["steal"], "idle": idle,
                     "busy": 100.0 - idle}
    return res


def parse_pid_cpu_ticks(stat_text: str) -> int:
    """utime + stime (clock ticks) from /proc/PID/stat text."""
    rest = stat_text[stat_text.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])


def _read_pid_ticks(pid: int) -> int | None:
    try:
        return parse_pid_cpu_ticks(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CpuRecord:
    interval_s: float
    samples: list[dict[str, Any]] = field(default_factory=list)   # per tick: t, per-cpu usage
    processes: dict[str, dict[str, float]] = field(default_factory=dict)
    shared_by_sites: bool = True
    # sites on separate hosts: each site's own record (the top-level one is site a's)
    sites: dict[str, CpuRecord] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Study-style figures: per core min/avg/max busy %, and the all-cores average."""
        per_core: dict[str, list[float]] = {}
        for s in self.samples:
            for cpu, u in s["cpus"].items():
                per_core.setdefault(cpu, []).append(u["busy"])
        cores = {cpu: {"min": min(v), "avg": sum(v) / len(v), "max": max(v)}
                 for cpu, v in per_core.items() if v}
        allc = cores.get("cpu", {"min": 0.0, "avg": 0.0, "max": 0.0})
        breakdown: dict[str, float] = {}
        alls = [s["cpus"]["cpu"] for s in self.samples if "cpu" in s["cpus"]]
        for key in ("usr", "sys", "irq", "softirq", "idle"):
            breakdown[key] = sum(u[key] for u in alls) / len(alls) if alls else 0.0
        return {"busy_avg": allc["avg"], "busy_min": allc["min"], "busy_max": allc["max"],
                "breakdown": breakdown, "cores": cores, "ticks": len(self.samples),
                "processes": self.processes}


class CpuSampler:
    """Samples /proc/stat every `interval` seconds in a thread, plus CPU time of tracked PIDs."""

    def __init__(self, interval: float = 1.0, proc_root: str = "/proc") -> None:
        self.interval = interval
        self.proc_root = proc_root
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record = CpuRecord(interval)
        self._pids: dict[int, tuple[str, int, float]] = {}   # pid -> (label, first ticks, t0)
        self._last: dict[int, tuple[int, float]] = {}        # pid -> (ticks, t)
        self._lock = threading.Lock()
        self._t0 = 0.0

    def _read(self) -> dict[str, tuple[int, ...]]:
        return parse_proc_stat(Path(self.proc_root, "stat").read_text())

    def track(self, pid: int, label: str) -> None:
        ticks = _read_pid_ticks(pid)
        if ticks is not None:
            with self._lock:
                now = time.monotonic()
                self._pids[pid] = (label, ticks, now)
                self._last[pid] = (ticks, now)

    def _sample_pids(self) -> None:
        with self._lock:
            for pid in self._pids:
                ticks = _read_pid_ticks(pid)
                if ticks is not None:
                    self._last[pid] = (ticks, time.monotonic())

    def _run(self) -> None:
        prev = self._read()
        while not self._stop.wait(self.interval):
            cur = self._read()
            self._sample_pids()
            self._record.samples.append({"t": round(time.monotonic() - self._t0, 3),
                                         "cpus": usage(prev, cur)})
            prev = cur

    def start(self) -> CpuSampler:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="tunbench-cpu", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> CpuRecord:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._sample_pids()
        with self._lock:
            for pid, (label, first, t0) in self._pids.items():
                last, t1 = self._last.get(pid, (first, t0))
                secs = (last - first) / CLK_TCK
                span = max(t1 - t0, 1e-9)
                self._record.processes[f"{label}[{pid}]"] = {
                    "cpu_seconds": secs, "pct_of_one_core": 100.0 * secs / span}
        return self._record

    def __enter__(self) -> CpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def record_from_texts(interval: float, texts: list[tuple[float, str]]) -> CpuRecord:
    """A CpuRecord from /proc/stat readings taken elsewhere ((time, text) pairs, the first
    one the baseline): what a remote site's agent samples."""
    rec = CpuRecord(interval)
    if not texts:
        return rec
    t0, prev_text = texts[0]
    prev = parse_proc_stat(prev_text)
    for t, text in texts[1:]:
        cur = parse_proc_stat(text)
        rec.samples.append({"t": round(t - t0, 3), "cpus": usage(prev, cur)})
        prev = cur
    return rec


class SplitSampler:
    """One sampler per site when the sites are separate hosts: CPU per core of each end,
    apart. Per-process CPU is kept only for PIDs named with their site (the datapath
    daemons); a bare PID could be on either host."""

    def __init__(self, samplers: dict[str, Any], first: str) -> None:
        self.samplers = samplers
        self.first = first

    def track(self, pid: int, label: str, site: str | None = None) -> None:
        if site is not None and site in self.samplers:
            self.samplers[site].track(pid, label)

    def start(self) -> SplitSampler:
        for s in self.samplers.values():
            s.start()
        return self

    def stop(self) -> CpuRecord:
        records = {name: s.stop() for name, s in self.samplers.items()}
        for r in records.values():
            r.shared_by_sites = False
        first = records[self.first]
        top = CpuRecord(first.interval_s, first.samples, first.processes, False, records)
        return top
