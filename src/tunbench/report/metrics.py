"""The metric catalogue: the display name and unit of every metric, in one place.

Result files keep the internal names (`cpu_busy_max`, `lat_p50_us_at_10pct_ndr_361`) and the
units the workloads recorded; tables, figures and compare show what a reader understands
("CPU busy, max", "Latency p50 at 10% of NDR, 361 B", µs). Names follow the workloads'
naming conventions (see report/data.py), so a metric a workload adds later that follows them
is named without an entry here; one that does not is shown as its internal name.
"""

from __future__ import annotations

import re
from collections.abc import Callable

EXACT: dict[str, tuple[str, str | None]] = {
    # name -> (display name, unit override; None keeps the recorded unit)
    "throughput": ("Throughput", None),
    "retransmits": ("TCP retransmits", None),
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
    "loss": ("Packet loss", None),
    "jitter": ("Jitter", None),
    "sent_rate": ("Sent rate", None),
    "ttl": ("TTL at the far end", None),
    "hops": ("Hops", None),
}
UNITS = {"us": "µs", "usec": "µs", "ms": "ms", "Mbps": "Mbit/s", "pps": "packets/s"}
_QUANT = {"min": "min", "max": "max", "mean": "mean", "avg": "average"}


def _quantile(q: str) -> str:
    if q in _QUANT:
        return _QUANT[q]
    m = re.fullmatch(r"p(\d+)(?:[_.](\d+))?", q)
    return f"p{m[1]}" + (f".{m[2]}" if m[2] else "") if m else q


def _size(s: str) -> str:
    return "IMIX" if s.lower() == "imix" else (f"{s} B" if s.isdigit() else s)


def _search(s: str) -> str:
    """'10pct_ndr' -> '10% of NDR'; 'ndr' -> 'NDR'; 'rfc2544' -> 'RFC 2544 rate'."""
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)pct_)?(ndr|pdr|rfc2544)", s)
    if not m:
        return s
    name = {"ndr": "NDR", "pdr": "PDR", "rfc2544": "RFC 2544 rate"}[m[2]]
    return f"{m[1]}% of {name}" if m[1] else name


PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (re.compile(r"^(tcp|udp)_rtt_(\w+)$"),
     lambda m: f"{m[1].upper()} RTT {_quantile(m[2])}"),
    (re.compile(r"^(tcp|udp)_rate$"), lambda m: f"{m[1].upper()} transactions"),
    (re.compile(r"^(ndr|pdr|rfc2544)_pps_(\w+)$"),
     lambda m: f"{_search(m[1])}, {_size(m[2])}"),
    (re.compile(r"^(ndr|pdr|rfc2544)_mbps_(l2|l3)_(\w+)$"),
     lambda m: f"{_search(m[1])}, {_size(m[3])} ({m[2].upper()} rate)"),
    (re.compile(r"^lat_(\w+?)_us_at_(.+)_([0-9]+|imix)$"),
     lambda m: f"Latency {_quantile(m[1])} at {_search(m[2])}, {_size(m[3])}"),
    (re.compile(r"^max_offered_pps_(\w+)$"),
     lambda m: f"Highest offered rate, {_size(m[1])}"),
]


def display_name(metric: str) -> str:
    """What a reader sees for a metric ('cpu_busy_max' -> 'CPU busy, max'); a name the
    catalogue does not know is shown as it is."""
    base, sep, point = metric.partition("@")
    if base in EXACT:
        name = EXACT[base][0]
    else:
        name = next((fn(m) for pat, fn in PATTERNS if (m := pat.match(base))), base)
    return f"{name} @ {point}" if sep else name


def unit_label(metric: str, unit: str) -> str:
    """The unit as a reader reads it: µs not us, '% of all cores' for system-wide CPU."""
    override = EXACT.get(metric.partition("@")[0], ("", None))[1]
    if override and unit in ("%", "", override):
        return override
    return UNITS.get(unit, unit)
