"""What a loss-search trial cost on the wire and in CPU: site a's underlay transmit counters
(the sending site's wire: outer packets and bytes, Ethernet header included, no FCS; or the
tunnel's own count where those cannot tell, TunnelDriver.wire_tx: agg's UDP GSO sends cross a
veth as one frame) and the busy CPU time of the host(s) the sites run on, read just before
and just after the trial.

Divided by what the generator sent through the tunnel (its data and the END rounds that
close a trial, loadgen.py: a trial of 8 flows adds 24 END packets, 0.6 % of the 4,200 data
packets of a short slow trial), they give the per-inner-packet figures a tunnel's
header and aggregation decide (docs/loss-search.md "Wire and CPU per inner packet"):
underlay packets per inner packet (1 for a kernel tunnel, below 1 when agg packs several
packets into one datagram), underlay bytes per inner byte (inner = IP total length), and
CPU per Mpps (busy core-seconds per million inner packets, every process of the host(s)
included: the sender, both tunnel ends and the receiver share this host's CPUs when the
sites are namespaces), and for a tunnel with datapath daemons (agg's tbagg, wireguard-go,
...) their own CPU per Mpps, both sites, from /proc/PID/stat. Native's figures are the bare wire's (Ethernet header only), so each
tunnel can be read against native and kernel VXLAN of the same run.

Reading them is best effort: a site whose counters or /proc/stat cannot be read gives no
figures (None), never a failed trial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from ..errors import TunbenchError
from ..metrics.cpu import busy_jiffies, parse_pid_cpu_ticks
from ..testbed.base import Site, Testbed

USER_HZ = 100   # /proc/stat counts in USER_HZ, 100 on every Linux ABI


@dataclass(frozen=True)
class Snapshot:
    tx_packets: int
    tx_bytes: int
    busy_jiffies: int | None   # summed over the hosts read; None when one could not be read
    datapath_ticks: int | None = None   # the tunnel's daemons (utime + stime), both sites


def _busy_jiffies(site: Site) -> int | None:
    try:
        return busy_jiffies(site.read_file("/proc/stat").decode())
    except (OSError, TunbenchError, UnicodeDecodeError):
        return None


def cpu_hosts(tb: Testbed) -> tuple[Site, ...]:
    """The sites whose /proc/stat together cover every CPU the case ran on."""
    return (tb.a,) if tb.shares_cpus else tb.sites()


def _datapath_ticks(tb: Testbed, pids: dict[str, list[int]]) -> int | None:
    """CPU ticks (USER_HZ) the tunnel's daemons used so far, all sites summed; None for a
    kernel datapath (no daemon) or when one could not be read."""
    if not any(pids.values()):
        return None
    total = 0
    for site in tb.sites():
        for pid in pids.get(site.name, ()):
            try:
                total += parse_pid_cpu_ticks(site.read_file(f"/proc/{pid}/stat").decode())
            except (OSError, TunbenchError, UnicodeDecodeError, ValueError, IndexError):
                return None
    return total


def snapshot(tb: Testbed, pids: dict[str, list[int]] | None = None,
             wire_tx: Callable[[], tuple[int, int] | None] | None = None) -> Snapshot | None:
    """`pids`: the tunnel's datapath daemons per site (Endpoints.datapath_pids); `wire_tx`:
    the tunnel's own count of site a's wire (Context.wire_tx), used instead of the underlay
    counters when it gives one."""
    try:
        own = wire_tx() if wire_tx is not None else None
        if own is None:
            st = tb.a.links.stats(tb.a.underlay_if)
            own = (int(st["tx_packets"]), int(st["tx_bytes"]))
    except (OSError, NetlinkError, TunbenchError, KeyError):   # e.g. no such device
        return None
    busy = [_busy_jiffies(s) for s in cpu_hosts(tb)]
    return Snapshot(own[0], own[1],
                    None if any(b is None for b in busy) else sum(b for b in busy if b),
                    _datapath_ticks(tb, pids or {}))


def cost(before: Snapshot | None, after: Snapshot | None, inner_packets: int,
         inner_bytes: float) -> dict[str, Any] | None:
    """The trial's cost (pure): counts, and the ratios per inner packet/byte/Mpkt. `inner_*`:
    every packet the generator sent through the tunnel between the two readings (its data
    and its END rounds: both are on the wire) and their IP bytes."""
    if before is None or after is None or inner_packets <= 0 or inner_bytes <= 0:
        return None
    pkts = after.tx_packets - before.tx_packets
    nbytes = after.tx_bytes - before.tx_bytes
    busy_s = (after.busy_jiffies - before.busy_jiffies) / USER_HZ \
        if after.busy_jiffies is not None and before.busy_jiffies is not None else None
    dp_s = (after.datapath_ticks - before.datapath_ticks) / USER_HZ \
        if after.datapath_ticks is not None and before.datapath_ticks is not None else None
    return {"wire_packets": pkts, "wire_bytes": nbytes, "inner_packets": inner_packets,
            "inner_bytes": round(inner_bytes),
            "wire_pkts_per_inner": pkts / inner_packets,
            "wire_bytes_per_inner_byte": nbytes / inner_bytes,
            "busy_core_s": busy_s,
            "cpu_per_mpps": busy_s / (inner_packets / 1e6) if busy_s is not None else None,
            "datapath_core_s": dp_s,
            "datapath_cpu_per_mpps": dp_s / (inner_packets / 1e6) if dp_s is not None else None}
