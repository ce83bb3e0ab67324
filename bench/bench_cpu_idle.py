"""Idle CPUs and latency (docs/methodology.md, "Idle CPUs and latency"): native and vxlan
latency (sockperf TCP and UDP, 3 s each) in alternated rounds with and without a PM QoS request
of 0 µs (/dev/cpu_dma_latency held open), on one local testbed with the default placement
(site a on CPU 0, site b on CPU 1). Prints each figure and vxlan/native per round; asserts
nothing. Root, under the live lock: python bench/bench_cpu_idle.py [ROUNDS]"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tunbench import tunnels  # noqa: E402
from tunbench.testbed import local, names, placement  # noqa: E402
from tunbench.testbed.ledger import Ledger  # noqa: E402
from tunbench.workloads import latency  # noqa: E402
from tunbench.workloads.base import Context  # noqa: E402

KINDS = ("native", "vxlan")


@contextlib.contextmanager
def pm_qos(on: bool) -> Iterator[None]:
    """A PM QoS request of 0 µs while open (released when the fd is closed or we exit)."""
    if not on:
        yield
        return
    fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    try:
        os.write(fd, struct.pack("i", 0))
        yield
    finally:
        os.close(fd)


def main(rounds: int) -> None:
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    rid = names.new_run_id()
    with Ledger(rid) as ledger:
        tb = local.build(rid, ledger)
        placement.place(tb, "processes")
        eps = {k: tunnels.get(k)().up(tb, tunnels.get(k).parse_params({})) for k in KINDS}
        for r in range(rounds):
            for on in (False, True):
                for kind in KINDS:
                    with pm_qos(on):
                        ctx = Context(tb, eps[kind], duration=3, warmup=1)
                        out = latency.Latency().run(ctx, latency.LatencyParams())
                    key = (kind, "QoS 0 us" if on else "QoS off")
                    got = (float(out.metrics["tcp_rtt_p50"].value or 0),
                           float(out.metrics["udp_rtt_p50"].value or 0))
                    res.setdefault(key, []).append(got)
                    print(f"round {r + 1} {kind} {key[1]}: TCP p50 {got[0]:.1f} us, "
                          f"UDP p50 {got[1]:.1f} us", flush=True)
    for (kind, mode), v in res.items():
        tcp = [x[0] for x in v]
        print(f"{kind}, {mode}: TCP p50 median {statistics.median(tcp):.1f} us "
              f"({min(tcp):.1f}-{max(tcp):.1f})")
    for mode in ("QoS off", "QoS 0 us"):
        rat = [v[0] / n[0] for v, n in zip(res[("vxlan", mode)], res[("native", mode)],
                                            strict=True)]
        sd = statistics.stdev([math.log(x) for x in rat]) if len(rat) > 1 else float("nan")
        print(f"{mode}: vxlan/native TCP p50 per round {[round(x, 3) for x in rat]}, "
              f"sd of ln {sd:.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
