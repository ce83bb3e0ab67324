"""CPU time of a process and of each of its threads, read in one pass, and the per-process
entry a CPU record keeps (cpu_seconds, pct_of_one_core, comm, busiest_thread_pct, threads).

One module for both samplers: the local one (metrics.cpu.CpuSampler) and the agent's on a
remote site (core.Sampler; testbed.remote turns its readings into entries). It ships in the
agent's zipapp, so it imports the standard library only. Parsing is pure (text in, numbers
out); `read` only reads the files and hands their texts to `reading`.

Why one pass, and in this order. The kernel's figure for a process (/proc/PID/stat) is the
CPU time of its ended threads plus the scheduler runtime of each live one
(thread_group_cputime); a thread's figure (/proc/PID/task/TID/stat) is that same runtime of
the thread alone. Both only grow, so at any instant the process's is at least each
thread's. A pass reads the process's stat, then every thread's, then the process's again,
and the process's CPU between two passes is taken from the first pass's first read to the
second pass's last read: that interval contains the interval between the two reads of any
thread, so the process cannot have used less than any of its threads in it. The old
sampler read the process once and its threads later, at each reading: the two intervals
were as long as each other but shifted by that gap, and a thread busier in the second gap
than in the first came out above its own process (issue 27: 27.48 % against 26.98 %).

That argument holds for the kernel's nanosecond counters. /proc prints utime and stime
each truncated to a clock tick (USER_HZ), so a thread's difference can still exceed its
process's by a few ticks of rounding alone (measured here: one tick, 10 ms, in 1 of 20
half-second windows of a one-busy-thread process read in this order); each thread's figure
is therefore also bounded by its process's. With the reads ordered, that bound only ever trims rounding; it does not
hide a skew of the reading order.
"""

from __future__ import annotations

import os
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")

# one pass: {"cpu_s_start": process CPU seconds read first, "cpu_s": read last,
#            "threads": {tid: CPU seconds}, "comm": command name}
Reading = dict[str, Any]


def stat_ticks(text: str) -> int:
    """utime + stime (clock ticks) from a /proc/PID/stat or /proc/PID/task/TID/stat text."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])


def reading(start: str, threads: dict[str, str], end: str, comm: str = "",
            clk_tck: int = CLK_TCK) -> Reading:
    """A pass's figures from its texts: the process's stat read `start` before and `end`
    after the stats of its threads (tid -> text), in seconds of `clk_tck` ticks."""
    return {"cpu_s_start": stat_ticks(start) / clk_tck, "cpu_s": stat_ticks(end) / clk_tck,
            "threads": {tid: stat_ticks(t) / clk_tck for tid, t in threads.items()},
            "comm": comm}


def read_comm(pid: int, root: str = "/proc") -> str:
    try:
        with open(f"{root}/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _text(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_texts(pid: int, root: str = "/proc") -> tuple[str, dict[str, str], str] | None:
    """One pass over the files, in the order the module docstring explains: the process's
    stat, every thread's, the process's again. None once the process is gone; a thread
    that ends during the pass is left out."""
    base = f"{root}/{pid}"
    try:
        start = _text(f"{base}/stat")
        tids = os.listdir(f"{base}/task")
    except OSError:
        return None
    threads: dict[str, str] = {}
    for tid in tids:
        try:
            threads[tid] = _text(f"{base}/task/{tid}/stat")
        except OSError:
            continue
    try:
        end = _text(f"{base}/stat")
    except OSError:
        return None
    return start, threads, end


def read(pid: int, root: str = "/proc") -> Reading | None:
    """A reading of process `pid` and its threads (None once it is gone)."""
    texts = read_texts(pid, root)
    if texts is None:
        return None
    try:
        return reading(*texts, comm=read_comm(pid, root))
    except (ValueError, IndexError):
        return None


def later(prev: Reading, new: Reading) -> Reading:
    """The newer reading, keeping the last figure of threads that ended since `prev`, and
    `prev`'s command name if the new one has none."""
    return {**new, "threads": {**prev["threads"], **new["threads"]},
            "comm": new.get("comm") or prev.get("comm", "")}


def busiest_thread(first: dict[Any, Any], last: dict[Any, Any]) -> tuple[Any, Any] | None:
    """(tid, CPU used between two readings) of the thread that used the most, or None. A
    thread missing from `first` started after it: all of its time counts."""
    used = [(last[t] - first.get(t, 0), t) for t in last]
    if not used:
        return None
    amount, tid = max(used)
    return tid, amount


def cpu_used(first: Reading, last: Reading) -> tuple[float, tuple[str, float] | None]:
    """(CPU seconds of the process, (tid, CPU seconds) of its busiest thread or None)
    between two readings, as read (not bounded)."""
    secs = float(last["cpu_s"]) - float(first["cpu_s_start"])
    return secs, busiest_thread(first["threads"], last["threads"])


def process_entry(first: tuple[float, Reading], last: tuple[float, Reading]) -> dict[str, Any]:
    """The per-process entry of a CPU record from two (time, reading) pairs: CPU seconds,
    percent of one core, command name, the busiest thread's percent (bounded by the
    process's, see the module docstring) and the number of threads seen."""
    (t0, a), (t1, b) = first, last
    span = max(t1 - t0, 1e-9)
    secs, top = cpu_used(a, b)
    entry: dict[str, Any] = {"cpu_seconds": secs, "pct_of_one_core": 100.0 * secs / span,
                             "comm": b.get("comm", "")}
    if top is not None:
        entry["busiest_thread_pct"] = 100.0 * min(top[1], secs) / span
        entry["threads"] = len(b["threads"])
    return entry
