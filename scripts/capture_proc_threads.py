#!/usr/bin/env python3
"""Capture /proc/PID/stat and /proc/PID/task/*/stat of a real busy two-thread process, at
two instants, for tests/data/procstat/threads (tests/unit/test_cpu_threads.py).

usage: capture_proc_threads.py OUTDIR   (no root needed)

Each reading is taken the way the old CPU sampler took it, the process's stat first and
its threads' stats GAP seconds later, and then the process's stat once more: the old
computation uses the first text only, the one-pass one (remote/agent/proccpu.py) both. The
child's two threads (hashing 1 MiB blocks, which releases the GIL, so both run at once)
start spinning right after the first reading, as a datapath daemon starts working after
it is tracked; the second reading follows AFTER_GO seconds later. The old order then
counts the process over [start, start + AFTER_GO + GAP] but the threads over a window
shifted by GAP, so a thread comes out above its process.

Writes N-stat-start.txt, N-task-TID.txt, N-stat-end.txt for readings N = 1, 2, and
meta.json (clock ticks per second, the gaps, when each read finished).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from tunbench import proc

GAP = 0.5        # between the process's stat and its threads' (the old order's gap)
AFTER_GO = 0.1   # from the threads' start to the second reading
CHILD = "\n".join([
    "import hashlib, sys, threading, time",
    "go = threading.Event()",
    "def spin():",
    "    go.wait()",
    "    block, end = b'x' * (1 << 20), time.monotonic() + 10",
    "    while time.monotonic() < end:",
    "        hashlib.sha256(block).digest()",
    "threads = [threading.Thread(target=spin) for _ in range(2)]",
    "for t in threads: t.start()",
    "print('ready', flush=True)",
    "sys.stdin.readline()",
    "go.set()",
    "for t in threads: t.join()",
])


def _text(path: str) -> str:
    with open(path) as f:
        return f.read()


def take(pid: int, n: int, out: Path, t0: float) -> dict[str, float]:
    """Reading n: the process's stat, GAP, every thread's stat, the process's stat again."""
    start = _text(f"/proc/{pid}/stat")
    t_start = time.monotonic() - t0
    time.sleep(GAP)
    threads = {tid: _text(f"/proc/{pid}/task/{tid}/stat")
               for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int)}
    t_threads = time.monotonic() - t0
    end = _text(f"/proc/{pid}/stat")
    t_end = time.monotonic() - t0
    (out / f"{n}-stat-start.txt").write_text(start)
    for tid, text in threads.items():
        (out / f"{n}-task-{tid}.txt").write_text(text)
    (out / f"{n}-stat-end.txt").write_text(end)
    return {"start": round(t_start, 6), "threads": round(t_threads, 6), "end": round(t_end, 6)}


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: capture_proc_threads.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*-stat-*.txt"), *out.glob("*-task-*.txt")]:
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        child = proc.spawn_piped([sys.executable, "-c", CHILD],
                                 stderr_path=Path(tmp, "child.err"), label="spinner")
        try:
            assert child.popen.stdin is not None and child.popen.stdout is not None
            if child.popen.stdout.readline().strip() != b"ready":
                print(f"child did not start: {Path(tmp, 'child.err').read_text()}",
                      file=sys.stderr)
                return 1
            t0 = time.monotonic()
            times = {"1": take(child.pid, 1, out, t0)}
            child.popen.stdin.write(b"go\n")
            child.popen.stdin.flush()
            time.sleep(AFTER_GO)
            times["2"] = take(child.pid, 2, out, t0)
        finally:
            child.stop()
    meta = {"clk_tck": os.sysconf("SC_CLK_TCK"), "gap_s": GAP, "after_go_s": AFTER_GO,
            "read_done_s": times, "pid": child.pid, "kernel": platform.release(),
            "cpus": os.cpu_count(), "python": platform.python_version()}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
