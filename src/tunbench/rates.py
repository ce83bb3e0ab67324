"""tc rate strings as numbers (tc: 'mbit' is 10^6 bit/s, 'mbps' is 10^6 *bytes*/s)."""

from __future__ import annotations

import re

_RATE_UNITS = {"bit": 1e-6, "kbit": 1e-3, "mbit": 1.0, "gbit": 1e3, "tbit": 1e6,
               "bps": 8e-6, "kbps": 8e-3, "mbps": 8.0, "gbps": 8e3, "tbps": 8e6}


def rate_mbps(rate: str) -> float:
    """'500mbit' -> 500.0 (Mbit/s); '10mbps' -> 80.0."""
    m = re.match(r"^(\d+(?:\.\d+)?)([a-z]+)$", rate.strip().lower())
    if not m or m.group(2) not in _RATE_UNITS:
        raise ValueError(f"not a tc rate: {rate!r}")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]
