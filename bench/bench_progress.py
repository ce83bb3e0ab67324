"""What showing progress costs: tunbench's own CPU during the same campaign run three ways,
side by side: --quiet (nothing on stderr), plain lines (stderr a pipe) and the live display
(stderr a pseudo-terminal, 2 redraws per second). The orchestrating process's CPU is what the
CPU sampler also sees during a measurement, so the display must stay cheap: the figure is the
live display's CPU over --quiet's, as a ratio and in ms per second of run.

Run as root: python bench/bench_progress.py [repeats]
"""

from __future__ import annotations

import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TB = [sys.executable, "-m", "tunbench", "run", "--tunnels", "native", "--workloads", "ping",
      "--duration", "10", "--warmup", "0", "--repeats", "1", "--no-report", "--json"]
TICKS = os.sysconf("SC_CLK_TCK")


def own_cpu(pid: int) -> float | None:
    """utime + stime of the process itself (not its children), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def run(mode: str, out: Path) -> tuple[float, float]:
    """(own CPU seconds, wall seconds) of one campaign; the last /proc sample before exit."""
    master = slave = -1
    if mode == "pty":
        master, slave = pty.openpty()
        stderr: int = slave
    else:
        stderr = subprocess.PIPE
    argv = TB + ["--out", str(out)] + (["--quiet"] if mode == "quiet" else [])
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr,
                         env={**os.environ, "TERM": "xterm-256color"})
    if slave >= 0:
        os.close(slave)
    drain = master if master >= 0 else (p.stderr.fileno() if p.stderr else -1)
    cpu = 0.0
    while p.poll() is None:
        now = own_cpu(p.pid)
        cpu = now if now is not None else cpu
        ready, _, _ = select.select([drain], [], [], 0.1)
        if ready:
            try:
                os.read(drain, 65536)
            except OSError:
                pass
    wall = time.monotonic() - t0
    if master >= 0:
        os.close(master)
    if p.returncode != 0:
        raise SystemExit(f"{mode}: tunbench exited {p.returncode}")
    return cpu, wall


def main() -> int:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    res: dict[str, list[tuple[float, float]]] = {"quiet": [], "plain": [], "pty": []}
    with tempfile.TemporaryDirectory(prefix="tunbench-bench-") as tmp:
        for r in range(repeats):           # alternating, so host drift affects all alike
            for mode in res:
                res[mode].append(run(mode, Path(tmp) / f"{mode}-{r}"))
    base = statistics.median(c for c, _ in res["quiet"])
    print("tunbench's own CPU during a 10 s ping campaign (median of "
          f"{repeats}; lower is better)")
    for mode, runs in res.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        print(f"  {mode:6s} {cpu * 1000:7.0f} ms CPU in {wall:5.1f} s  "
              f"{cpu / base:4.2f}x --quiet  (+{(cpu - base) / wall * 1000:5.1f} ms per s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
