"""A site's TCP counters around a case (/proc/net/snmp and /proc/net/netstat, read in the
site's network namespace or on its host): how many segments were retransmitted, and how many
of those the receiver reported it already had (D-SACK), i.e. spurious retransmits.

On veth a flow can leave its sender from two CPUs (docs/methodology.md, "Native's retransmits
on veth"): it arrives out of order, the sender retransmits what was only late, and the
receiver D-SACKs it. Such a case's throughput varies with the reordering, not with loss; the
report says so when most of a method's retransmits were spurious (`spurious_pct`).

Counters are per network namespace: on the local testbed a site's are its own flows (and the
harness's control connections); on a host they are the host's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (table, field) -> the key a case records: what the sender retransmitted and what the
# receiver said it already held; what arrived out of order at the receiver
FIELDS = {("Tcp", "RetransSegs"): "retrans_segs",
          ("TcpExt", "TCPDSACKRecvSegs"): "dsack_recv_segs",
          ("TcpExt", "TCPOFOQueue"): "ofo_queued",
          ("Tcp", "OutSegs"): "out_segs"}
ARGV = ["cat", "/proc/net/snmp", "/proc/net/netstat"]


def parse(text: str) -> dict[str, int]:
    """The counters of FIELDS from /proc/net/snmp and /proc/net/netstat (each table is a
    header line of names and a line of values, both starting 'Table:'). A field this kernel
    does not have is left out."""
    tables: dict[str, dict[str, int]] = {}
    header: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if not rest:
            continue
        words = rest.split()
        if name not in header:
            header[name] = words
        else:
            tables[name] = {k: int(v) for k, v in zip(header.pop(name), words, strict=False)
                            if v.lstrip("-").isdigit()}
    out = {}
    for (table, field), key in FIELDS.items():
        if field in tables.get(table, {}):
            out[key] = tables[table][field]
    return out


def read(site: Any) -> dict[str, int]:
    """The site's counters now ({} when /proc cannot be read there)."""
    r = site.run(ARGV, check=False, timeout=10)
    return parse(r.stdout) if r.returncode == 0 else {}


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if k in before}


def spurious_pct(per_site: Mapping[str, Mapping[str, int]]) -> float | None:
    """Of the segments the sites retransmitted, the % the receivers D-SACKed (both ends
    summed: a stream's sender is a, or b with -R, or both with --bidir). None when nothing
    was retransmitted or the kernel lacks the counters."""
    sites = [d for d in per_site.values() if "retrans_segs" in d and "dsack_recv_segs" in d]
    retrans = sum(d["retrans_segs"] for d in sites)
    if not sites or retrans <= 0:
        return None
    return min(100.0, 100.0 * sum(d["dsack_recv_segs"] for d in sites) / retrans)
