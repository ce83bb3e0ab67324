"""The tunnel driver contract. One module per kind under tunnels/, each exporting DRIVER.

A driver states:
- `kind` and a one-line `summary`;
- `Params`: a frozen dataclass of its parameters with defaults; `validate()` returns problems;
- `requirements(params)`: what this host lacks to run it (kernel feature, tool), with fixes;
- `overhead(params, family)`: bytes its encapsulation adds to an inner packet on an underlay
  of that IP family, so the tunnel MTU is computed, never hard-coded;
- `up(testbed, params)`: builds the tunnel between site a and site b, registering every object
  in the testbed's ledger, and returns the inner endpoints. Teardown is the ledger's job.
A kind with several implementations (kernel vs userspace) is one driver with an `impl` param.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..capabilities import Missing
from ..errors import SpecError
from ..params import coerce_fields
from ..testbed import netlink
from ..testbed.base import Site, Testbed

IPV4_HEADER = 20
IPV6_HEADER = 40
UDP_HEADER = 8
ETH_HEADER = 14

# Inner (overlay) addresses: 198.19.<index>.0/24 and 2001:2:0:<index+1>::/64.
INNER4 = "198.19.{i}.{host}"
INNER6 = "2001:2:0:{j:x}::{host}"


def inner_addrs(index: int = 0) -> tuple[str, str, str, str]:
    """(a4, b4, a6, b6) inner addresses of tunnel number `index`."""
    return (INNER4.format(i=index, host=1), INNER4.format(i=index, host=2),
            INNER6.format(j=index + 1, host=1), INNER6.format(j=index + 1, host=2))


@dataclass(frozen=True)
class TunnelParams:
    """Base of every driver's parameters. Subclasses add fields with defaults."""

    def validate(self) -> list[str]:
        return []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Endpoints:
    """What `up` returns: where inner traffic goes and what carries it."""

    a4: str                          # inner IPv4 of site a
    b4: str                          # inner IPv4 of site b
    mtu: int                         # MTU of the inner path (tunnel interface MTU)
    overhead: int                    # header bytes added per packet
    a6: str | None = None
    b6: str | None = None
    a_ifname: str | None = None      # device carrying inner traffic in site a (counters, ethtool)
    b_ifname: str | None = None
    # devices in site b on which decapsulated inner packets are *received* (a capture receiver
    # counts there, a tc filter drops there); empty when inner packets reach the stack without
    # a device receive (SRv6 End.DX4/DT6, transport-mode ESP): loss-search then uses sockets
    rx_ifnames: tuple[str, ...] = ()
    relay: bool = False              # a stream relay (e.g. SSH -L), not a packet tunnel
    relay_ports: tuple[int, ...] = ()  # TCP ports a relay carries (only with relay=True)
    datapath_pids: dict[str, list[int]] = field(default_factory=dict)  # site -> daemon PIDs
    info: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class TunnelDriver(ABC):
    kind: ClassVar[str]
    summary: ClassVar[str]
    Params: ClassVar[type[TunnelParams]] = TunnelParams
    underlay_family: ClassVar[int] = 4   # IP family the encapsulation runs over
    inner_families: ClassVar[tuple[int, ...]] = (4, 6)  # inner IP families it carries
    # a parameter an experiment may give as a list: one tunnel (and case) per value, like a
    # workload's sweep (wireguard and ipsec: `tunnels`, the number of ECMP-spread tunnels)
    sweep: ClassVar[str | None] = None

    # ---- parameters -------------------------------------------------------------------
    @classmethod
    def parse_params(cls, raw: dict[str, Any], where: str = "") -> TunnelParams:
        """Build Params from a dict of user values; unknown keys and bad types are errors."""
        problems, values = coerce_fields(cls.Params, raw, f"{where}tunnel {cls.kind}")
        if problems:
            raise SpecError("; ".join(problems), "see `tunbench list --params`")
        params = cls.Params(**values)
        problems = [f"{where}tunnel {cls.kind}: {p}" for p in params.validate()]
        if problems:
            raise SpecError("; ".join(problems), "see `tunbench list --params`")
        return params

    # ---- host capability -------------------------------------------------------------
    @classmethod
    @abstractmethod
    def requirements(cls, params: TunnelParams) -> list[Missing]:
        """What this host lacks for these params (empty list: it can run here)."""

    @classmethod
    @abstractmethod
    def overhead(cls, params: TunnelParams, family: int = 4) -> int:
        """Bytes added to each inner packet by the encapsulation over an underlay of `family`."""

    @classmethod
    def family(cls, params: TunnelParams) -> int:
        """Underlay IP family these params run over (a `underlay` param overrides the default)."""
        return int(getattr(params, "underlay", cls.underlay_family))

    @classmethod
    def tunnel_mtu(cls, params: TunnelParams, underlay_mtu: int) -> int:
        return underlay_mtu - cls.overhead(params, cls.family(params))

    # ---- life cycle --------------------------------------------------------------------
    @abstractmethod
    def up(self, tb: Testbed, params: TunnelParams) -> Endpoints:
        """Build the tunnel; register every created object in tb.ledger as soon as it exists."""

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Counters that prove the datapath carried the traffic, per site."""
        out: dict[str, dict[str, int]] = {}
        for site, ifname in ((tb.a, ep.a_ifname), (tb.b, ep.b_ifname)):
            if ifname:
                out[site.name] = netlink.link_stats(site.netns, ifname)
        return out

    @staticmethod
    def underlay_addr(site: Site, family: int) -> str:
        return site.underlay4 if family == 4 else site.underlay6
