"""CPU per core from /proc/stat at 1 Hz, and per-process CPU of tracked PIDs.

/proc/stat is system-wide: on the local testbed both sites share these CPUs, so the figures
are the cost of both ends together (results say so). Parsing is pure and tested on captured
/proc/stat text; the sampler is a thread that reads two small files once a second.

A tracked process is recorded with its command name and its busiest thread: one thread at
~100% of a core while other cores idle is the one-core bottleneck of userspace encryption
(charon's libipsec, one SA on one core), which the process total of a multi-threaded daemon
(wireguard-go) hides. The kernel's ksoftirqd threads are tracked too, by name, since softirq
work deferred to them is where kernel datapaths saturate a core. A process and its threads
are read in one pass and their figures computed by remote/agent/proccpu.py, which the
remote sites' agent uses too; its docstring says why a thread never comes out above its
process.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..remote.agent import proccpu

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


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


def busy_jiffies(text: str) -> int | None:
    """Jiffies all CPUs together spent busy (everything but idle and iowait), from the
    aggregate row of a /proc/stat text; None without that row."""
    cpu = parse_proc_stat(text).get("cpu")
    if cpu is None:
        return None
    d = dict(zip(FIELDS, cpu))
    return sum(cpu) - d["idle"] - d["iowait"]


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
    return proccpu.stat_ticks(stat_text)


def kernel_threads(prefix: str, root: str = "/proc") -> dict[int, str]:
    """PIDs of the kernel threads whose name starts with `prefix` (e.g. 'ksoftirqd/')."""
    out: dict[int, str] = {}
    for d in Path(root).iterdir():
        if d.name.isdigit():
            comm = proccpu.read_comm(int(d.name), root)
            if comm.startswith(prefix):
                out[int(d.name)] = comm
    return out


@dataclass
class CpuRecord:
    interval_s: float
    samples: list[dict[str, Any]] = field(default_factory=list)   # per tick: t, per-cpu usage
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
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
        self._labels: dict[int, str] = {}
        # pid -> (time, reading): the first one, and the latest (ended threads kept)
        self._first: dict[int, tuple[float, proccpu.Reading]] = {}
        self._last: dict[int, tuple[float, proccpu.Reading]] = {}
        self._lock = threading.Lock()
        self._t0 = 0.0

    def _read(self) -> dict[str, tuple[int, ...]]:
        return parse_proc_stat(Path(self.proc_root, "stat").read_text())

    def track(self, pid: int, label: str) -> None:
        r = proccpu.read(pid, self.proc_root)
        if r is not None:
            with self._lock:
                now = time.monotonic()
                self._labels[pid] = label
                self._first[pid] = self._last[pid] = (now, r)

    def track_kernel_threads(self, prefix: str = "ksoftirqd/") -> None:
        """Track the kernel's per-CPU threads named `prefix`N (labelled by their name)."""
        for pid, comm in kernel_threads(prefix, self.proc_root).items():
            self.track(pid, comm)

    def _sample_pids(self) -> None:
        """One pass over each tracked process and its threads (proccpu.read). Its command
        name is read again each time: a process tracked right after spawn may still be
        the `ip netns exec` wrapper that is about to exec the tool."""
        with self._lock:
            for pid, (_, prev) in list(self._last.items()):
                r = proccpu.read(pid, self.proc_root)
                if r is not None:
                    self._last[pid] = (time.monotonic(), proccpu.later(prev, r))

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
            for pid, label in self._labels.items():
                entry = proccpu.process_entry(self._first[pid], self._last[pid])
                self._record.processes[f"{label}[{pid}]"] = entry
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

    def track_kernel_threads(self, prefix: str = "ksoftirqd/") -> None:
        """The kernel threads `prefix`N of every site's host, each on its own."""
        for s in self.samplers.values():
            s.track_kernel_threads(prefix)

    def start(self) -> SplitSampler:
        for s in self.samplers.values():
            s.start()
        return self

    def stop(self) -> CpuRecord:
        records = {name: s.stop() for name, s in self.samplers.items()}
        for r in records.values():
            r.shared_by_sites = False
        first = records[self.first]
        return CpuRecord(first.interval_s, first.samples, merge_processes(records), False,
                         records)


def merge_processes(records: dict[str, CpuRecord]) -> dict[str, dict[str, Any]]:
    """Every site's tracked processes in one table, each entry naming its site (a PID or a
    ksoftirqd/N name can be on both hosts: the second one's key then ends in @site)."""
    out: dict[str, dict[str, Any]] = {}
    for site, rec in records.items():
        for key, entry in rec.processes.items():
            out[key if key not in out else f"{key}@{site}"] = {**entry, "site": site}
    return out
