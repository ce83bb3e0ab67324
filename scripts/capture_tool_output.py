#!/usr/bin/env python3
"""Capture real tool output inside a throwaway two-namespace testbed (for tests/data).

usage: capture_tool_output.py OUTDIR [vxlan]
Runs sockperf (TCP and UDP ping-pong, --full-rtt, --full-log), ping, and writes each tool's
output to OUTDIR. Needs root. Everything it creates is undone by the ledger.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tunbench import tunnels
from tunbench.testbed import local, names, netlink
from tunbench.testbed.ledger import Ledger


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: capture_tool_output.py OUTDIR [vxlan]  (root)", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "native"
    out.mkdir(parents=True, exist_ok=True)
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        drv = tunnels.get(kind)
        ep = drv().up(tb, drv.Params())
        b = ep.b4
        for proto in ("tcp", "udp"):
            flag = ["--tcp"] if proto == "tcp" else []
            srv = tb.spawn(tb.b, ["sockperf", "sr", *flag, "-i", b, "-p", "11111"],
                           f"sockperf-sr-{proto}")
            time.sleep(0.5)
            log = tb.workdir / f"full-{proto}.csv"
            r = tb.a.run(["sockperf", "pp", *flag, "-i", b, "-p", "11111", "-t", "1",
                          "-m", "64", "--full-rtt", "--full-log", str(log), "--mps=5000"], timeout=30)
            (out / f"pp-{proto}-{kind}.txt").write_text(r.stdout + r.stderr)
            (out / f"full-{proto}-{kind}.csv").write_text(log.read_text())
            (out / f"sr-{proto}-{kind}.txt").write_text(srv.output())
            srv.stop()
        r = tb.a.run(["ping", "-c", "5", "-i", "0.2", "-n", b], timeout=30)
        (out / f"ping-{kind}.txt").write_text(r.stdout)
        r = tb.a.run(["ping", "-c", "3", "-i", "0.2", "-n", "-W", "1", "198.19.250.9"],
                     check=False, timeout=30)
        (out / f"ping-unreachable-{kind}.txt").write_text(r.stdout + r.stderr)
        c4 = local.add_routed_hop(tb)
        r = tb.a.run(["ping", "-c", "5", "-i", "0.2", "-n", c4], timeout=30)
        (out / f"ping-1hop-{kind}.txt").write_text(r.stdout)
        if ep.b6:
            r = tb.a.run(["ping", "-6", "-c", "3", "-i", "0.2", "-n", ep.b6], timeout=30)
            (out / f"ping6-{kind}.txt").write_text(r.stdout)
    finally:
        ledger.close()
        local.sweep(rid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
