"""The CPU sampler's per-process record: command name, busiest thread, ksoftirqd threads,
measured on real processes of this host (no root needed), and the reading order of a
process and its threads on /proc texts captured by scripts/capture_proc_threads.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tunbench.metrics.cpu import CpuSampler, kernel_threads
from tunbench.remote.agent import core, proccpu
from tunbench.remote.agent.proccpu import busiest_thread, stat_ticks
from tunbench.testbed.remote import record_from_samples

ENTRY_KEYS = {"cpu_seconds", "pct_of_one_core", "comm", "busiest_thread_pct", "threads"}

# one thread spins until killed, two sleep: the process total is about its busiest thread's
SPIN = ("import threading, time\n"
        "for _ in range(2): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "while True: pass\n")


def spinner() -> subprocess.Popen[bytes]:
    """The SPIN process, once its threads are started (it says so on stdout)."""
    child = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    return child


def cpu_of(child: subprocess.Popen[bytes]) -> float:
    """Ends the child; its whole CPU time (user + system, seconds), from the kernel."""
    child.kill()
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = -9
    if child.stdout is not None:
        child.stdout.close()
    return float(usage.ru_utime + usage.ru_stime)


def within_its_life(e: dict[str, Any], used: float) -> None:
    """The sampler saw the spinner use CPU, and no more than the kernel says it used in its
    whole life (one 10 ms tick of rounding); its busiest thread, the spinning one, did
    about all of it (the sleepers nothing), within two ticks of /proc's rounding of the
    process and of the thread. How much it got is the host's business: on a busy shared
    host a spinning thread may get a few percent of a core."""
    secs = e["cpu_seconds"]
    assert 0 < secs <= used + 0.011
    assert e["pct_of_one_core"] > 0
    top = secs * e["busiest_thread_pct"] / e["pct_of_one_core"]
    assert 0.5 * secs - 0.02 <= top <= secs * (1 + 1e-9), (secs, top)


def test_busiest_thread_and_command_name_of_a_real_process() -> None:
    child = spinner()
    try:
        sampler = CpuSampler(0.5)
        sampler.track(child.pid, "spinner")
        sampler.start()
        time.sleep(1.5)
        rec = sampler.stop()
    finally:
        used = cpu_of(child)
    e = rec.processes[f"spinner[{child.pid}]"]
    assert set(e) == ENTRY_KEYS
    assert e["comm"].startswith("python")
    assert e["threads"] >= 3
    within_its_life(e, used)


def test_busiest_thread_picks_the_thread_that_used_most() -> None:
    assert busiest_thread({1: 10, 2: 50}, {1: 90, 2: 60, 3: 5}) == (1, 80)
    assert busiest_thread({}, {}) is None


def test_ksoftirqd_threads_are_found_one_per_cpu() -> None:
    found = kernel_threads("ksoftirqd/")
    with open("/proc/stat") as f:     # the online CPUs, as the sampler sees them
        cpus = [ln.split()[0][3:] for ln in f if ln[:3] == "cpu" and ln[3].isdigit()]
    assert sorted(found.values()) == sorted(f"ksoftirqd/{i}" for i in cpus)


def test_the_agents_readings_give_the_local_samplers_entry() -> None:
    """The agent's sampler (core.Sampler) on a real process, its samples through JSON as
    over the wire, turned into the record the way a remote site's is."""
    child = spinner()
    try:
        sampler = core.Sampler(0.3, [child.pid])
        sampler.start()
        time.sleep(1.5)
        sampler.stop()
        sampler.join(timeout=5)
    finally:
        used = cpu_of(child)
    samples = json.loads(json.dumps(sampler.take()))
    rec = record_from_samples(0.3, samples, {child.pid: "spinner"})
    e = rec.processes[f"spinner[{child.pid}]"]
    assert set(e) == ENTRY_KEYS
    assert e["comm"].startswith("python") and e["threads"] >= 3
    within_its_life(e, used)
    assert rec.samples and "cpu" in rec.samples[0]["cpus"]


Pass = tuple[str, dict[str, str], str]


def captured(data_dir: Path) -> tuple[dict[str, Any], dict[str, Pass]]:
    """meta.json, and per reading (1, 2) the texts of the process's stat read first, of
    each thread's stat (tid -> text) read GAP later, and of the process's stat read last."""
    d = data_dir / "procstat" / "threads"
    meta = json.loads((d / "meta.json").read_text())
    passes = {}
    for n in ("1", "2"):
        threads = {p.stem.rsplit("-", 1)[1]: p.read_text() for p in d.glob(f"{n}-task-*.txt")}
        passes[n] = ((d / f"{n}-stat-start.txt").read_text(), threads,
                     (d / f"{n}-stat-end.txt").read_text())
    return meta, passes


def test_old_reading_order_put_a_thread_above_its_process(data_dir: Path) -> None:
    """What the old sampler computed from these texts: the process from its stat read
    first in each reading, its threads from their stats read GAP later. The threads began
    spinning between the readings, so the threads' window (shifted by GAP) saw more of it
    than the process's did: a thread above its own process, the skew of issue 27."""
    meta, passes = captured(data_dir)
    (start1, threads1, _), (start2, threads2, _) = passes["1"], passes["2"]
    process = stat_ticks(start2) - stat_ticks(start1)
    top = busiest_thread({t: stat_ticks(x) for t, x in threads1.items()},
                         {t: stat_ticks(x) for t, x in threads2.items()})
    assert top is not None and top[0] in threads2
    span = meta["read_done_s"]["2"]["start"] - meta["read_done_s"]["1"]["start"]
    process_pct = 100.0 * process / meta["clk_tck"] / span
    thread_pct = 100.0 * top[1] / meta["clk_tck"] / span
    assert thread_pct > process_pct >= 0


def test_one_pass_keeps_every_thread_within_its_process(data_dir: Path) -> None:
    """The same captured texts, read as one pass each (process, threads, process again):
    the process's window contains every thread's, so as read (before any bound) no thread
    used more than its process; the entry says so too, and is not trimmed here."""
    meta, passes = captured(data_dir)
    first = proccpu.reading(*passes["1"], comm="python", clk_tck=meta["clk_tck"])
    last = proccpu.reading(*passes["2"], comm="python", clk_tck=meta["clk_tck"])
    secs, top = proccpu.cpu_used(first, last)
    assert top is not None
    assert 0 < top[1] <= secs
    for tid in last["threads"]:
        assert last["threads"][tid] - first["threads"][tid] <= secs
    t1, t2 = meta["read_done_s"]["1"]["end"], meta["read_done_s"]["2"]["end"]
    e = proccpu.process_entry((t1, first), (t2, last))
    assert set(e) == ENTRY_KEYS and e["threads"] == len(passes["2"][1]) and e["comm"] == "python"
    assert e["cpu_seconds"] == pytest.approx(secs)
    assert e["busiest_thread_pct"] == pytest.approx(100.0 * top[1] / (t2 - t1))
    assert e["busiest_thread_pct"] <= e["pct_of_one_core"]


def test_a_thread_is_bounded_by_its_process_within_tick_rounding() -> None:
    """/proc truncates utime and stime to a tick each, so in ordered reads a thread can
    still exceed its process by a tick or so: its figure is then its process's."""
    first = {"cpu_s_start": 1.00, "cpu_s": 1.00, "threads": {"7": 0.50, "8": 0.40}}
    last = {"cpu_s_start": 2.00, "cpu_s": 2.00, "threads": {"7": 1.51, "8": 0.41},
            "comm": "x"}
    e = proccpu.process_entry((0.0, first), (2.0, last))
    assert e["pct_of_one_core"] == pytest.approx(50.0)
    assert e["busiest_thread_pct"] == e["pct_of_one_core"]


def test_later_keeps_ended_threads_and_the_last_known_name() -> None:
    a = {"cpu_s_start": 1.0, "cpu_s": 1.0, "threads": {"7": 0.5, "8": 0.4}, "comm": "ip"}
    b = {"cpu_s_start": 2.0, "cpu_s": 2.1, "threads": {"7": 1.5}, "comm": ""}
    merged = proccpu.later(a, b)
    assert merged["threads"] == {"7": 1.5, "8": 0.4} and merged["comm"] == "ip"
    assert merged["cpu_s"] == 2.1
