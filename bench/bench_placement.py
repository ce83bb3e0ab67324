#!/usr/bin/env python3
"""Per-site CPU placement against none: single-stream throughput of native, vxlan and
ebpf-vxlan in alternated rounds, printed as ratios (not a timed test).

Each round runs the three methods (native first) once with placement off and once with
placement on ("sites": site a on the lower half of the CPUs, site b on the upper, processes
and RPS), the setting that goes first alternating from round to round. Per setting it prints:
  - per method the coefficient of variation of throughput across the rounds;
  - per method its share of native, paired round by round (geometric mean of method/native in
    the same round and setting) with the spread of those per-round shares (min..max, the sd
    of the log ratio, and the rounds that sd needs for a 95 % CI of +-3 % of the share);
  - where the work ran: the share of NET_RX softirqs (/proc/softirqs deltas over the
    measurement window) on each CPU, and for the iperf3 client and server the share of
    samples (every 50 ms, /proc/PID/stat field 39) on each CPU and how often both were on the
    same CPU.
Run it in two sittings to see what moves between them. `--json FILE` keeps the raw figures.

usage: bench/bench_placement.py [--rounds N] [--duration S] [--json FILE]   (root, live lock)
                                [--settings off,sites,processes] [--methods native,vxlan,...]
       bench/bench_placement.py --compare SITTING1.json SITTING2.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunbench import runner, spec
from tunbench.testbed import names
from tunbench.workloads import base as wbase

METHODS = ("native", "vxlan", "ebpf-vxlan")
SETTINGS = ("off", "sites", "processes")
WINDOW: dict[str, Any] = {}   # what the instrumented measuring window saw last


def softirqs(kind: str) -> list[int]:
    for line in Path("/proc/softirqs").read_text().splitlines():
        if line.strip().startswith(kind + ":"):
            return [int(x) for x in line.split()[1:]]
    return []


def _our_netns_inodes() -> set[int]:
    out = set()
    for ns in Path("/run/netns").glob(f"{names.PREFIX}-*"):
        with contextlib.suppress(OSError):
            out.add(os.stat(ns).st_ino)
    return out


def _iperf3_cpus(samples: dict[str, Counter[int]], pairs: Counter[str]) -> None:
    """One sample: which CPU each iperf3 of our namespaces last ran on (stat field 39)."""
    inodes = _our_netns_inodes()
    seen: dict[str, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != "iperf3":
                continue
            if os.stat(d / "ns" / "net").st_ino not in inodes:
                continue
            role = "server" if "-s" in (d / "cmdline").read_text().split("\0") else "client"
            stat = (d / "stat").read_text()
            cpu = int(stat[stat.rindex(")") + 2:].split()[36])
        except (OSError, ValueError, IndexError):
            continue
        samples.setdefault(role, Counter())[cpu] += 1
        seen[role] = cpu
    if len(seen) == 2:
        pairs["same" if seen["client"] == seen["server"] else "apart"] += 1


def instrument() -> None:
    orig = wbase.Context.measuring

    @contextlib.contextmanager
    def measuring(self: wbase.Context) -> Iterator[Any]:
        rx0, tx0 = softirqs("NET_RX"), softirqs("NET_TX")
        samples: dict[str, Counter[int]] = {}
        pairs: Counter[str] = Counter()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                _iperf3_cpus(samples, pairs)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            with orig(self) as sampler:
                yield sampler
        finally:
            stop.set()
            t.join()
            WINDOW.clear()
            WINDOW.update(
                net_rx=[b - a for a, b in zip(rx0, softirqs("NET_RX"), strict=False)],
                net_tx=[b - a for a, b in zip(tx0, softirqs("NET_TX"), strict=False)],
                iperf3={r: dict(c) for r, c in samples.items()}, pairs=dict(pairs),
                load=os.getloadavg()[0])

    wbase.Context.measuring = measuring  # type: ignore[method-assign]


def one_round(setting: str, duration: float, warmup: float) -> dict[str, dict[str, Any]]:
    """The three methods once (native first) with `setting`: method -> figures."""
    out: dict[str, dict[str, Any]] = {}
    exp = spec.build({"experiment": {"repeats": 1, "duration": duration, "warmup": warmup,
                                     "placement": setting},
                      "tunnel": [{"kind": k} for k in METHODS],
                      "workload": [{"name": "stream"}]}, "bench")
    with tempfile.TemporaryDirectory() as d:
        res = runner.run_campaign(exp, Path(d) / "c")
        docs = res.store.read_cases()
        for doc in docs:
            if doc["status"] != "ok":
                sys.exit(f"bench: a case failed: {doc.get('error')}")
            place = (doc.get("testbed") or {}).get("placement", {})
            out[doc["case"]["tunnel"]["kind"]] = {
                "mbps": doc["metrics"]["throughput"]["value"],
                "placement": {"on": place.get("on"), "cpus": place.get("cpus")},
                **_WINDOWS.pop(doc["case"]["run_id"], {})}
    return out


_WINDOWS: dict[str, dict[str, Any]] = {}   # run id -> what its measuring window saw


def _keep_windows() -> None:
    orig = runner.run_case

    def run_case(*a: Any, **kw: Any) -> Any:
        WINDOW.clear()
        doc = orig(*a, **kw)
        _WINDOWS[doc["case"]["run_id"]] = dict(WINDOW)
        return doc

    runner.run_case = run_case  # type: ignore[assignment]


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 else float("nan")


def shares(rows: list[dict[str, dict[str, Any]]], method: str) -> list[float]:
    return [r[method]["mbps"] / r["native"]["mbps"] for r in rows]


def fractions(counts: list[int]) -> str:
    tot = sum(counts) or 1
    return "/".join(f"{100 * c / tot:.0f}" for c in counts)


def cpu_share(rows: list[dict[str, Any]], role: str, ncpu: int) -> str:
    c: Counter[int] = Counter()
    for r in rows:
        for cpu, n in r.get("iperf3", {}).get(role, {}).items():
            c[int(cpu)] += n
    return fractions([c[i] for i in range(ncpu)])


def report(data: dict[str, list[dict[str, dict[str, Any]]]]) -> None:
    ncpu = os.cpu_count() or 1
    for setting in SETTINGS:
        rows = data[setting]
        if not rows:
            continue
        cpus = rows[0]["native"]["placement"]
        print(f"== placement {setting} ({len(rows)} rounds; sites' CPUs: {cpus.get('cpus') or '-'})")
        for m in METHODS:
            xs = [r[m]["mbps"] for r in rows]
            line = f"  {m:11s} mean {statistics.fmean(xs):8.0f} Mbit/s  CV {100 * cv(xs):5.1f} %"
            if m != "native":
                sh = shares(rows, m)
                logs = [math.log(s) for s in sh]
                gm = math.exp(statistics.fmean(logs))
                sd = statistics.stdev(logs) if len(logs) > 1 else float("nan")
                need = math.ceil((1.96 * sd / 0.03) ** 2) if sd == sd else 0
                line += (f"  share {100 * gm:5.1f} % of native (per round "
                         f"{100 * min(sh):.1f}..{100 * max(sh):.1f}, sd(log) {100 * sd:.1f} %,"
                         f" ~{need} rounds for a +-3 % CI)")
            print(line)
        for m in METHODS:
            mrows = [r[m] for r in rows]
            rx = [sum(r["net_rx"][i] for r in mrows if r.get("net_rx")) for i in range(ncpu)]
            same = sum(r.get("pairs", {}).get("same", 0) for r in mrows)
            apart = sum(r.get("pairs", {}).get("apart", 0) for r in mrows)
            print(f"    {m:11s} NET_RX % per CPU {fractions(rx):9s}  iperf3 client % per CPU "
                  f"{cpu_share(mrows, 'client', ncpu):7s} server {cpu_share(mrows, 'server', ncpu):7s}"
                  f"  same CPU {100 * same / max(1, same + apart):3.0f} % of samples")
    loads = [r[m]["load"] for s in SETTINGS for r in data[s] for m in METHODS if "load" in r[m]]
    if loads:
        print(f"  host load (1-min) during the windows: {min(loads):.2f}..{max(loads):.2f}")


def share(rows: list[dict[str, dict[str, Any]]], method: str) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in shares(rows, method)))


def compare(files: list[str]) -> None:
    """Each method's paired share of native in each sitting (a --json file each), and how
    far the sittings lie apart, per setting."""
    sittings = [json.loads(Path(f).read_text()) for f in files]
    for setting in SETTINGS:
        if not any(d.get(setting) for d in sittings):
            continue
        print(f"== placement {setting}: share of native per sitting")
        for m in METHODS[1:]:
            vals = [100 * share(d[setting], m) for d in sittings if d.get(setting)]
            if not vals:
                continue
            print(f"  {m:11s} " + "  ".join(f"{v:5.1f} %" for v in vals) +
                  f"   apart {max(vals) - min(vals):4.1f} points")


def main() -> int:
    global SETTINGS, METHODS
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--duration", type=float, default=4)
    ap.add_argument("--warmup", type=float, default=1)
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help=f"placement modes to alternate (default {','.join(SETTINGS)})")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"tunnel kinds, native first (default {','.join(METHODS)})")
    ap.add_argument("--compare", nargs="+", metavar="FILE",
                    help="no measurement: compare the sittings these --json files hold")
    args = ap.parse_args()
    SETTINGS = tuple(args.settings.split(","))
    METHODS = tuple(args.methods.split(","))
    if args.compare:
        compare(args.compare)
        return 0
    instrument()
    _keep_windows()
    data: dict[str, list[dict[str, dict[str, Any]]]] = {s: [] for s in SETTINGS}
    t0 = time.monotonic()
    for i in range(args.rounds):
        order = SETTINGS if i % 2 == 0 else SETTINGS[::-1]
        for setting in order:
            data[setting].append(one_round(setting, args.duration, args.warmup))
        r = {s: data[s][-1] for s in SETTINGS}
        print(f"round {i + 1}: " + "  ".join(
            f"{s}: " + " ".join(f"{m} {r[s][m]['mbps']:.0f}" for m in METHODS)
            for s in SETTINGS), flush=True)
    print(f"({time.monotonic() - t0:.0f} s)")
    report(data)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
