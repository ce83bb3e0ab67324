"""The metric catalogue: the display name and unit of every metric, in one place.

Result files keep internal keys (`cpu_busy_max`, `lat_p50_us_at_10pct_ndr_361`), each with a
base name and structured dims (docs/results.md); tables, figures and compare show what a
reader understands ("CPU busy, max", "Latency p50 at 10% of NDR, 361 B", µs). A name is made
from the record's base and dims, never by parsing its key, so a metric a workload adds later
with a known base or dims is named without an entry here; one that has neither is shown as
its key.
"""

from __future__ import annotations

from typing import Any

from ..results.model import QUALIFIER_DIMS, MetricRecord

EXACT: dict[str, tuple[str, str | None]] = {
    # name -> (display name, unit override; None keeps the recorded unit)
    "throughput": ("Throughput", None),
    # stream --bidir: each direction beside their sum (site a runs the iperf3 client)
    "throughput_a_to_b": ("Throughput, site a → b", None),
    "throughput_b_to_a": ("Throughput, site b → a", None),
    "retransmits": ("TCP retransmits", None),
    # of them, what the receiver D-SACKed: it already had them (reordering, not loss)
    "spurious_retransmits": ("Spurious TCP retransmits", "% of retransmitted segments"),
    "iperf3_cpu_client": ("iperf3 client CPU", "% of one core"),
    "iperf3_cpu_server": ("iperf3 server CPU", "% of one core"),
    "cpu_busy": ("CPU busy", "% of all cores"),
    "cpu_busy_min": ("CPU busy, min", "% of all cores"),
    "cpu_busy_max": ("CPU busy, max", "% of all cores"),
    "cpu_per_gbit": ("CPU per Gbit/s", "% of one core per Gbit/s"),
    # sites on separate hosts: each end on its own host's cores
    "cpu_busy_a": ("CPU busy, sender (site a)", "% of its host's cores"),
    "cpu_busy_b": ("CPU busy, receiver (site b)", "% of its host's cores"),
    "cpu_busy_max_a": ("CPU busy, sender max", "% of its host's cores"),
    "cpu_busy_max_b": ("CPU busy, receiver max", "% of its host's cores"),
    "cpu_per_gbit_a": ("CPU per Gbit/s, sender (site a)", "% of one core per Gbit/s"),
    "cpu_per_gbit_b": ("CPU per Gbit/s, receiver (site b)", "% of one core per Gbit/s"),
    "line_rate_pct": ("Share of line rate", None),
    "process_min": ("Slowest iperf3 pair", None),
    "process_max": ("Fastest iperf3 pair", None),
    "processes": ("iperf3 pairs", None),
    "rtt_min": ("Ping RTT, min", None),
    "rtt_avg": ("Ping RTT, average", None),
    "rtt_max": ("Ping RTT, max", None),
    "rtt_mdev": ("Ping RTT, mean deviation", None),
    "loss": ("Packet loss", "% of packets sent"),   # ping, udp-rate (iperf3 -u: datagrams)
    "jitter": ("Jitter", None),
    "sent_rate": ("Sent rate", None),
    "ttl": ("TTL at the far end", None),
    "hops": ("Hops", None),
    "throughput_all": ("Throughput to all spokes at once", None),
    "hub_setup": ("Hub setup time", None),
    "hub_memory": ("Hub kernel memory added", None),
    "hub_maps_memory": ("Hub tbtun map memory", None),
    "tcp_rate": ("TCP transactions", None),
    "rtt_p50_ratio": ("RTT p50, loaded / idle", None),
    "load_throughput": ("Bulk TCP goodput", None),
    "load_retransmits": ("Bulk TCP retransmits", None),
    "udp_rate": ("UDP transactions", None),
    "rpc_rate": ("RPC transactions", None),
    "rpc_payload": ("RPC payload goodput, both ways", None),
    "connections": ("Connections", None),
}
# Per-site metrics of sites on separate hosts: the display name names the end by what it did,
# which depends on the direction the case's workload ran (iperf3 -R: site b sends; --bidir:
# both do), so it is made from the record's direction, never fixed to 'sender (site a)'.
# {end}: 'sender (site a)'; {role}: 'sender' ('site a' when both ways).
SITE_NAMES: dict[str, tuple[str, str]] = {
    "cpu_busy_a": ("a", "CPU busy, {end}"), "cpu_busy_b": ("b", "CPU busy, {end}"),
    "cpu_busy_max_a": ("a", "CPU busy, {role} max"),
    "cpu_busy_max_b": ("b", "CPU busy, {role} max"),
    "cpu_per_gbit_a": ("a", "CPU per Gbit/s, {end}"),
    "cpu_per_gbit_b": ("b", "CPU per Gbit/s, {end}"),
}


def role(site: str, direction: str | None) -> str:
    """What a site did in a workload that ran `direction` (records.WorkloadIdentity):
    'sender' or 'receiver' (a sends, unless reversed: iperf3 -R); 'site a' both ways."""
    if direction == "bidir":
        return f"site {site}"
    sender = "b" if direction == "reverse" else "a"
    return "sender" if site == sender else "receiver"


def end(site: str, direction: str | None) -> str:
    """'sender (site a)', 'receiver (site a)' (-R), 'site a, sending and receiving'."""
    if direction == "bidir":
        return f"site {site}, sending and receiving"
    return f"{role(site, direction)} (site {site})"


UNITS = {"us": "µs", "usec": "µs", "ms": "ms", "Mbps": "Mbit/s", "pps": "packets/s"}
_STAT = {"min": "min", "max": "max", "mean": "mean", "avg": "average", "std": "std dev"}
_COST = {"wire_pkts_per_inner": "Wire packets per inner packet",
         "wire_bytes_per_inner_byte": "Wire bytes per inner byte",
         "cpu_per_mpps": "CPU per Mpps (host)",
         "datapath_cpu_per_mpps": "Tunnel daemons' CPU per Mpps"}
_GOAL = {"ndr": "NDR", "pdr": "PDR", "rfc2544": "RFC 2544 rate"}


def _quantile(dims: dict[str, Any]) -> str:
    if "q" in dims:
        return f"p{float(dims['q']):g}"
    return _STAT.get(str(dims.get("stat")), str(dims.get("stat", "")))


def _size(s: Any) -> str:
    s = str(s)
    return "IMIX" if s.lower() == "imix" else (f"{s} B" if s.isdigit() else s)


def _at(dims: dict[str, Any]) -> str:
    """{"goal": "ndr", "load_pct": 10} -> '10% of NDR'."""
    name = _GOAL.get(str(dims.get("goal")), str(dims.get("goal", "")))
    return f"{float(dims['load_pct']):g}% of {name}" if "load_pct" in dims else name


def _by_dims(base: str, dims: dict[str, Any]) -> str | None:
    if base.endswith("_rtt") and base.split("_")[0] in ("tcp", "udp"):
        return f"{base.split('_')[0].upper()} RTT {_quantile(dims)}"
    if base == "rate_pps" and "goal" in dims:
        return f"{_at(dims)}, {_size(dims.get('size'))}"
    if base == "rate_mbps" and "goal" in dims:
        return f"{_at(dims)}, {_size(dims.get('size'))} ({str(dims.get('layer')).upper()} rate)"
    if base == "latency" and "goal" in dims:
        return f"Latency {_quantile(dims)} at {_at(dims)}, {_size(dims.get('size'))}"
    if base == "rpc_latency":
        return f"RPC latency {_quantile(dims)}"
    if base in _COST and "load_pct" in dims:   # loss-search: per inner packet at a load
        return (f"{_COST[base]} at {float(dims['load_pct']):g}% of NDR, "
                f"{_size(dims.get('size'))}")
    if base == "max_offered_pps":
        return f"Highest offered rate, {_size(dims.get('size'))}"
    return None


def display_name(metric: str, rec: MetricRecord | None = None,
                 direction: str | None = None) -> str:
    """What a reader sees for a metric ('cpu_busy_max' -> 'CPU busy, max'), from its record
    (base and dims) when given; a metric the catalogue does not know is shown as its key.
    `direction`: how the workload ran ('reverse', 'bidir', None), for the per-site metrics."""
    key = rec.base if rec is not None and not rec.dims else metric
    if key in SITE_NAMES:
        site, template = SITE_NAMES[key]
        return template.format(end=end(site, direction), role=role(site, direction))
    if rec is None:
        return EXACT[metric][0] if metric in EXACT else metric
    qual = {k: v for k, v in rec.dims.items() if k in QUALIFIER_DIMS}
    points = {k: v for k, v in rec.dims.items() if k not in QUALIFIER_DIMS}
    if not qual and rec.base in EXACT:
        name = EXACT[rec.base][0]
    elif not rec.dims:
        name = metric
    else:
        name = _by_dims(rec.base, qual) or (metric if not points else rec.base)
    return name + "".join(f" @ {k}{v}" for k, v in points.items())


def unit_label(metric: str, unit: str, rec: MetricRecord | None = None) -> str:
    """The unit as a reader reads it: µs not us, '% of all cores' for system-wide CPU."""
    override = EXACT.get(rec.base if rec is not None else metric, ("", None))[1]
    if override and unit in ("%", "", override):
        return override
    return UNITS.get(unit, unit)


def in_sentence(name: str) -> str:
    """A display name inside a sentence: lower-case first letter ('throughput'), unless it
    starts with an acronym ('TCP RTT p50', 'NDR, IMIX', 'CPU per Gbit/s')."""
    first = name.split(" ", 1)[0].rstrip(",")
    return name if len(first) > 1 and first.upper() == first else name[:1].lower() + name[1:]
