#!/usr/bin/env python3
"""Native's retransmits on the veth testbed: spurious (reordering), and what the receive
layout does to them, to throughput and to a share of native (not a timed test).

On veth a segment is processed by the receiving stack on the CPU that sent it. With the
sender's process on one CPU (site a) and the receiver's on the other (site b), the ACKs
sent from b's CPU are processed there, and the data they release is sent from there too:
one flow leaves site a from two CPUs, arrives out of order, and the sender retransmits
segments the receiver already holds (it says so with D-SACKs). Per receive layout, in
alternated rounds (iperf3 -A 0,1, single stream, each round a fresh testbed with VXLAN up and
native's path beside it):
  - as-is: no RPS (placement "processes", the default);
  - sites: each site's underlay steered to its own CPU by RPS (placement "sites");
  - one-cpu: both underlays steered to the sender's CPU (all of the flow's softirq work on
    CPU 0, the receiver's process alone on CPU 1);
it prints per method the mean Mbit/s and CV, retransmitted segments per GB, the share of them
D-SACKed by the receiver (spurious: TcpExtTCPDSACKRecvSegs / TcpRetransSegs, nstat in site
a), and vxlan's share of native paired by round (geometric mean, sd of the log share).

usage: bench/bench_reorder.py [--rounds N] [--duration S] [--json FILE]   (root, 2+ CPUs)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

from tunbench import tunnels
from tunbench.testbed import local, placement
from tunbench.testbed.base import Site

LAYOUTS = ("as-is", "sites", "one-cpu")
METHODS = ("native", "vxlan")
PORTS = {"native": 5301, "vxlan": 5302}
COUNTERS = ("TcpRetransSegs", "TcpExtTCPDSACKRecvSegs")


def counters(site: Site) -> dict[str, int]:
    doc = json.loads(site.run(["nstat", "-az", "--json"], timeout=10).stdout)
    flat: dict[str, int] = {}
    for table in doc.values():
        flat.update(table)
    return {k: int(flat.get(k, 0)) for k in COUNTERS}


def run_one(site: Site, addr: str, port: int, seconds: float) -> dict[str, float]:
    before = counters(site)
    r = site.run(["iperf3", "-c", addr, "-p", str(port), "-t", f"{seconds:g}", "-O", "1",
                  "-A", "0,1", "-J"], timeout=seconds + 30)
    after = counters(site)
    sent = json.loads(r.stdout)["end"]["sum_sent"]
    return {"mbps": sent["bits_per_second"] / 1e6, "bytes": sent["bytes"],
            **{k: after[k] - before[k] for k in COUNTERS}}


def one_round(layout: str, seconds: float) -> dict[str, dict[str, float]]:
    with local.scratch() as tb:
        drv = tunnels.get("vxlan")
        ep = drv().up(tb, drv.parse_params({}))
        if layout == "sites":
            placement.set_rps(tb, tb.a, tb.a.underlay_if, "0")
            placement.set_rps(tb, tb.b, tb.b.underlay_if, "1")
        elif layout == "one-cpu":
            placement.set_rps(tb, tb.a, tb.a.underlay_if, "0")
            placement.set_rps(tb, tb.b, tb.b.underlay_if, "0")
        addrs = {"native": tb.b.underlay4, "vxlan": ep.b4}
        servers = [tb.spawn(tb.b, ["iperf3", "-s", "-B", addrs[m], "-p", str(PORTS[m]),
                                   "-A", "1"], f"iperf3-server-{m}") for m in METHODS]
        time.sleep(1.0)
        try:
            return {m: run_one(tb.a, addrs[m], PORTS[m], seconds) for m in METHODS}
        finally:
            for s in servers:
                s.stop()


def summary(rounds: list[dict[str, dict[str, dict[str, float]]]]) -> list[str]:
    lines = []
    for layout in LAYOUTS:
        rs = [r[layout] for r in rounds]
        for m in METHODS:
            x = [r[m]["mbps"] for r in rs]
            gb = sum(r[m]["bytes"] for r in rs) / 1e9
            retx = sum(r[m]["TcpRetransSegs"] for r in rs)
            dsack = sum(r[m]["TcpExtTCPDSACKRecvSegs"] for r in rs)
            cv = statistics.stdev(x) / statistics.fmean(x) if len(x) > 1 else float("nan")
            lines.append(f"{layout:8s} {m:7s} {statistics.fmean(x):8,.0f} Mbit/s (CV {cv:5.1%})"
                         f"  retransmits {retx / gb:7,.0f} per GB, D-SACKed "
                         f"{dsack / retx if retx else 0:5.1%}")
        logs = [math.log(r["vxlan"]["mbps"] / r["native"]["mbps"]) for r in rs]
        sd = statistics.stdev(logs) if len(logs) > 1 else float("nan")
        lines.append(f"{layout:8s} vxlan share of native {math.exp(statistics.fmean(logs)):.1%}"
                     f" (sd of the log share {sd:.3f})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per run (4)")
    ap.add_argument("--json", help="keep every run's figures here")
    a = ap.parse_args()
    rounds: list[dict[str, Any]] = []
    for i in range(a.rounds):
        order = LAYOUTS[i % len(LAYOUTS):] + LAYOUTS[:i % len(LAYOUTS)]
        rounds.append({layout: one_round(layout, a.duration) for layout in order})
        print(f"round {i + 1}/{a.rounds}: " + ", ".join(
            f"{lay} {r['native']['mbps']:,.0f}/{r['vxlan']['mbps']:,.0f}"
            for lay, r in rounds[-1].items()), flush=True)
    print("\n".join(summary(rounds)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rounds, f, indent=1)


if __name__ == "__main__":
    main()
