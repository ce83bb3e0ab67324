#!/usr/bin/env python3
"""Capture a short pcap of TCP and UDP connections through a tunnel, and the DF pings' output
at and above its MTU, inside a throwaway two-namespace testbed (for tests/data).

usage: capture_flows_pcap.py OUTDIR [native|vxlan]
On site b's underlay (snaplen 128, as tests capture): a sockperf TCP ping-pong and a UDP one at
50 requests/s for 1 s, and iperf3 with 2 TCP streams sending 200 KB; then
OUTDIR/flows-KIND.pcap. The DF pings: OUTDIR/ping-df-{at,above}-KIND.txt. Needs root.
Everything it creates is undone by the ledger.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from tunbench import pathmtu, pcap, tunnels
from tunbench.testbed import local, names, netlink
from tunbench.testbed.ledger import Ledger

SOCKPERF_PORT, IPERF_PORT = 11201, 5201


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: capture_flows_pcap.py OUTDIR [native|vxlan]  (root)", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "vxlan"
    out.mkdir(parents=True, exist_ok=True)
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        tb = local.build(rid, ledger)
        drv = tunnels.get(kind)
        ep = drv().up(tb, drv.Params())
        b = ep.b4
        tb.a.run(["ping", "-c", "1", "-W", "2", b])
        for name, size in (("at", ep.mtu), ("above", ep.mtu + 1)):
            r = tb.a.run(pathmtu.probe_argv(b, 4, size), check=False, timeout=10)
            (out / f"ping-df-{name}-{kind}.txt").write_text(r.stdout + r.stderr)
        with pcap.capture(tb, tb.b, tb.b.underlay_if, "flows") as cap:
            for proto in ("tcp", "udp"):
                flag = ["--tcp"] if proto == "tcp" else []
                srv = tb.spawn(tb.b, ["sockperf", "sr", *flag, "-i", b, "-p",
                                      str(SOCKPERF_PORT)], f"sockperf-sr-{proto}")
                time.sleep(0.5)
                tb.a.run(["sockperf", "pp", *flag, "-i", b, "-p", str(SOCKPERF_PORT), "-t", "1",
                          "-m", "64", "--mps=50"], timeout=30)
                srv.stop()
            srv = tb.spawn(tb.b, ["iperf3", "-s", "-B", b, "-p", str(IPERF_PORT)], "iperf3-s")
            time.sleep(0.5)
            tb.a.run(["iperf3", "-c", b, "-p", str(IPERF_PORT), "-P", "2", "-n", "200K"],
                     timeout=30)
            srv.stop()
        shutil.copyfile(cap.path, out / f"flows-{kind}.pcap")
    finally:
        ledger.close()
        local.sweep(rid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
