"""sit: Linux kernel IPv6-in-IPv4 (RFC 4213 configured tunnel, IP protocol 41), inner IPv6 only.

Created with pyroute2 (kind "sit": IFLA_SIT_LOCAL / REMOTE / LINK / TTL). The endpoints carry
only IPv6 inner addresses; the runner measures it with inner family 6.
"""

from __future__ import annotations

from .base import KernelOption, Needs
from .ipip import Ipip


class Sit(Ipip):
    kind = "sit"
    summary = "kernel IPv6-in-IPv4 (sit, protocol 41), inner IPv6 only"
    link_kind = "sit"
    suffix = "sit"
    needs = {"": Needs(kernel=(KernelOption("CONFIG_IPV6_SIT", "sit",
                                            "SIT (IPv6-in-IPv4) tunnels"),))}
    inner_families = (6,)


DRIVER = Sit
