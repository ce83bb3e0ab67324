"""Summary lines of iputils ping: packets sent/received and the RTT statistics (pure parser)."""

from __future__ import annotations

import re
from typing import Any

PACKETS_RE = re.compile(r"(\d+) packets transmitted, (\d+) received")
RTT_RE = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")


def parse_ping(text: str) -> dict[str, Any]:
    """{'transmitted', 'received', 'loss_pct', 'rtt_min_ms', 'rtt_avg_ms', 'rtt_max_ms'}; RTTs
    are None when nothing came back."""
    m = PACKETS_RE.search(text)
    if not m:
        raise ValueError("no ping summary line (N packets transmitted, M received)")
    sent, got = int(m.group(1)), int(m.group(2))
    r = RTT_RE.search(text)
    rtt = [float(x) for x in r.groups()[:3]] if r else [None, None, None]
    return {"transmitted": sent, "received": got,
            "loss_pct": 100.0 * (sent - got) / sent if sent else None,
            "rtt_min_ms": rtt[0], "rtt_avg_ms": rtt[1], "rtt_max_ms": rtt[2]}
