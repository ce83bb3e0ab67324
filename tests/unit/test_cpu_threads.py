"""The CPU sampler's per-process record: command name, busiest thread, ksoftirqd threads,
measured on real processes of this host (no root needed)."""

from __future__ import annotations

import subprocess
import sys
import time

from tunbench.metrics.cpu import CpuSampler, busiest_thread, kernel_threads

# one thread spins, two sleep: the process total is about its busiest thread's
SPIN = ("import threading, time\n"
        "stop = time.time() + 2.5\n"
        "for _ in range(2): threading.Thread(target=time.sleep, args=(3,), daemon=True).start()\n"
        "while time.time() < stop: pass\n")


def test_busiest_thread_and_command_name_of_a_real_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.2)   # the interpreter is running and has started its threads
        sampler = CpuSampler(0.5)
        sampler.track(child.pid, "spinner")
        sampler.start()
        time.sleep(1.5)
        rec = sampler.stop()
    finally:
        child.wait(timeout=10)
    e = rec.processes[f"spinner[{child.pid}]"]
    assert e["comm"].startswith("python")
    assert e["threads"] >= 3
    assert e["pct_of_one_core"] > 10          # it spun (on a busy shared host, less than 100)
    # the busiest thread did almost all of it: a one-thread process, seen as such
    assert 0.8 * e["pct_of_one_core"] <= e["busiest_thread_pct"] <= e["pct_of_one_core"] + 1


def test_busiest_thread_picks_the_thread_that_used_most() -> None:
    assert busiest_thread({1: 10, 2: 50}, {1: 90, 2: 60, 3: 5}) == (1, 80)
    assert busiest_thread({}, {}) is None


def test_ksoftirqd_threads_are_found_one_per_cpu() -> None:
    found = kernel_threads("ksoftirqd/")
    with open("/proc/stat") as f:     # the online CPUs, as the sampler sees them
        cpus = [ln.split()[0][3:] for ln in f if ln[:3] == "cpu" and ln[3].isdigit()]
    assert sorted(found.values()) == sorted(f"ksoftirqd/{i}" for i in cpus)
