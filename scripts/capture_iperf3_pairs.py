#!/usr/bin/env python3
"""Capture several iperf3 client runs started together, as parallel-streams runs them.

usage: capture_iperf3_pairs.py OUTDIR [bidir|reverse|forward] [PROCESSES] [STREAMS_EACH]
Builds a throwaway two-namespace native testbed, starts PROCESSES iperf3 servers in site b
(one port each) and then the clients in site a one after the other with the argv
parallel-streams uses (-t 2 -O 1 -i 1 -J, --bidir or -R), and writes each client's JSON as
OUTDIR/client-N.json and OUTDIR/starts.json (the clients' start offsets in seconds and the
argv), which is what the common-interval aggregation reads (tests/data/iperf3/pairs-*).
Needs root. Everything it creates is undone by the ledger.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tunbench import tunnels
from tunbench.testbed import local, names, netlink
from tunbench.testbed.ledger import Ledger
from tunbench.workloads.base import wait_for_output
from tunbench.workloads.stream import StreamParams, client_argv, server_argv

PORT = 5301


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: capture_iperf3_pairs.py OUTDIR [bidir|reverse|forward] [PROCESSES] "
              "[STREAMS_EACH]  (root)", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    way = sys.argv[2] if len(sys.argv) > 2 else "bidir"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    each = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    params = StreamParams(streams=each, reverse=way == "reverse", bidir=way == "bidir")
    out.mkdir(parents=True, exist_ok=True)
    taken = {x.split("-")[1] for x in netlink.list_netns() if names.is_ours_netns(x)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        drv = tunnels.get("native")
        ep = drv().up(tb, drv.Params())
        addr = str(ep.b4)
        servers = [tb.spawn(tb.b, server_argv(addr, PORT + i), f"iperf3-server-{i}")
                   for i in range(n)]
        for s in servers:
            wait_for_output(s, "Server listening")
        argvs = [client_argv(addr, PORT + i, 2, 1, params) for i in range(n)]
        starts, clients = [], []
        for i, argv in enumerate(argvs):
            starts.append(time.monotonic())
            clients.append(tb.spawn(tb.a, argv, f"iperf3-client-{i}", split_stderr=True))
        for c in clients:
            c.wait(timeout=60)
        for i, c in enumerate(clients):
            (out / f"client-{i}.json").write_text(c.output())
        for s in servers:
            s.stop()
        (out / "starts.json").write_text(json.dumps({
            "start_offsets_s": [t - starts[0] for t in starts],
            "argv": argvs,
            "testbed": "native, two namespaces (tb-RID-a -> tb-RID-b)"}, indent=1) + "\n")
    finally:
        ledger.close()
        local.sweep(rid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
