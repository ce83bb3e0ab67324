"""Goodput against what crosses the wire, and encapsulation efficiency, per case.

The study reports both (seed 001: 36 Gbit/s of goodput is 39 Gbit/s on the wire). Interface
counters cannot give the wire figure here: veth and GSO count one 64 KB super-packet with one
set of outer headers, so per-byte ratios from counters understate every header. What a bulk
TCP transfer puts on the wire follows from what the case recorded instead: each full segment
carries `mss` bytes of goodput (raw.iperf3.mss) in an inner packet of the tunnel's MTU
(tunnel.mtu), which the tunnel wraps in `overhead` bytes (tunnel.overhead) into the outer IP
packet that crosses the underlay. Like the study, "on the wire" counts those outer IP packets
(Ethernet framing, the same for every tunnel, is left out: the seed's 36 Gbit/s of goodput
with 1448-byte segments in 1500-byte packets plus ~62 bytes of ESP is 36 x 1562 / 1448 = 38.8,
its "39 Gbit/s on the wire").

    on-wire rate = goodput x (tunnel MTU + overhead) / MSS
    efficiency   = MSS / (tunnel MTU + overhead)

ACKs in the other direction are not counted; a stream relay (ssh -L) is not a packet tunnel and
gets no figure. Pure over the case documents.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..results.records import CaseRecord
from .data import Campaign, Scenario


@dataclass(frozen=True)
class Wire:
    tunnel: str
    scenario: Scenario
    goodput: float        # Mbit/s, mean over repeats
    on_wire: float        # Mbit/s, mean over repeats
    mss: int
    frame: int            # bytes on the wire (outer IP packet) per full segment
    n: int

    @property
    def efficiency(self) -> float:
        return self.mss / self.frame


def frame_bytes(case: CaseRecord) -> tuple[int, int] | None:
    """(MSS, wire bytes per full segment) of a bulk TCP case, or None when not recorded."""
    mss = (case.raw.get("iperf3") or {}).get("mss")
    tun = case.tunnel_state
    if not mss or not tun.get("mtu") or tun.get("relay"):
        return None
    return int(mss), int(tun["mtu"]) + int(tun.get("overhead") or 0)


def per_tunnel(c: Campaign, metric: str = "throughput") -> list[Wire]:
    found: dict[tuple[str, Scenario], list[tuple[float, int, int]]] = {}
    for case in c.ok:
        fb = frame_bytes(case)
        v = case.value(metric)
        if fb is None or v is None:
            continue
        found.setdefault((case.tunnel.label, case.scenario), []).append((v, *fb))
    out = []
    for (tun, scen), vals in found.items():
        good = sum(v for v, _, _ in vals) / len(vals)
        wire = sum(v * f / m for v, m, f in vals) / len(vals)
        _, mss, frame = vals[0]
        out.append(Wire(tun, scen, good, wire, mss, frame, len(vals)))
    order = c.tunnels()
    return sorted(out, key=lambda w: (str(w.scenario), order.index(w.tunnel)
                                      if w.tunnel in order else 0))
