"""gretap: Linux kernel GRE over IPv4 carrying Ethernet frames (L2 GRE), optional key.

The same device attributes as `gre` (pyroute2 kind "gretap"); the inner Ethernet header adds
14 bytes: 38 bytes over IPv4 without a key, 42 with one.
"""

from __future__ import annotations

from .base import ETH_HEADER
from .gre import Gre, gre_needs


class Gretap(Gre):
    kind = "gretap"
    carries = ("tcp", "udp", "l2")   # Ethernet in GRE
    summary = "kernel GRE over IPv4, L2 (Ethernet in GRE), optional key"
    link_kind = "gretap"
    suffix = "gtap"
    inner_eth = ETH_HEADER
    needs = gre_needs("GRE tap tunnels (ip_gre)")


DRIVER = Gretap
