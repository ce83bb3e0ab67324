"""The network-function contract: one module per kind (router, firewall, nat, wan), like the
tunnel drivers. A function is one namespace between two chain segments; its kind says what it
accepts as parameters, what it needs on this host, how it configures its namespace and which
counters of its own (nftables, qdiscs) it adds to the per-hop figures.

Parameters are checked with one line per problem before anything is created.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..testbed.ledger import Ledger

RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$", re.I)
SIZE_RE = re.compile(r"^\d+(b|kb|k|mb|m)?$", re.I)
TIME_RE = re.compile(r"^\d+(\.\d+)?(us|ms|s)$")

# Fragment reassembly in a chain's namespaces (chain/build.py CHAIN_SYSCTLS, and conntrack's
# own IPv6 reassembly in a stateful firewall): incomplete datagrams expire after this, and a
# namespace holds this much of them before it refuses every fragment (docs/chains.md,
# "Fragments in a chain")
FRAG_TIMEOUT_S = 1
FRAG_HIGH_THRESH = 64 << 20


def addr4(seg: int, end: int) -> str:
    """The address of end `end` of segment `seg` (site a's side is segment 0)."""
    return f"198.18.{seg}.{end}"


def addr6(seg: int, end: int) -> str:
    return f"2001:2:1:{seg:x}::{end}"


def nets(seg: int) -> tuple[str, str]:
    """Segment `seg`'s IPv4 and IPv6 prefixes."""
    return f"198.18.{seg}.0/24", f"2001:2:1:{seg:x}::/64"


@dataclass(frozen=True)
class Param:
    """One parameter of a kind: its type, default, the values allowed (a tuple of choices,
    a (lo, hi) range for numbers, a regex or a predicate for strings) and its help."""

    type: type
    default: Any
    allowed: Any = None
    help: str = ""
    example: str = ""


@dataclass(frozen=True)
class Hop:
    """One function placed in a chain: where it sits and how it is reached."""

    name: str                  # unique in the chain; part of its namespace name
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    netns: str = ""            # set when built
    left_if: str = ""          # towards site a
    right_if: str = ""         # towards site b
    left4: str = ""            # its address on the left segment (pinged for per-hop latency)
    right4: str = ""
    left6: str = ""
    right6: str = ""
    host: str = ""             # the host it runs on ("" : this one; a site's target on hosts)
    # how argv reaches its namespace on that host (None: proc.run here; chain/hosts.py)
    runner: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    def run(self, argv: list[str], **kw: Any) -> Any:
        """argv in the hop's namespace, on whichever host it runs (proc.run's keywords)."""
        if self.runner is None:
            from .. import proc
            return proc.run(argv, netns=self.netns, **kw)
        return self.runner(argv, **kw)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "params": dict(self.params),
                "netns": self.netns, "left_if": self.left_if, "right_if": self.right_if,
                "left4": self.left4, "right4": self.right4,
                **({"host": self.host} if self.host else {})}


class Function:
    """A kind of network function. Subclasses set `kind`, `summary`, `params`, and override
    `configure` (and `counters` where they keep counters of their own)."""

    kind: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}
    tools: ClassVar[tuple[str, ...]] = ()
    routed: ClassVar[bool] = True     # forwards at IP level: decrements the TTL

    @classmethod
    def parse(cls, raw: dict[str, Any], where: str, problems: list[str]) -> dict[str, Any]:
        """Validated parameters (defaults filled in); problems appended one line each."""
        out: dict[str, Any] = {}
        for key in sorted(set(raw) - set(cls.params)):
            known = ", ".join(cls.params) or "none"
            problems.append(f"{where}: unknown parameter {key!r} of a {cls.kind} "
                            f"(its parameters: {known})")
        for key, p in cls.params.items():
            val = raw.get(key, p.default)
            if key in raw and not _check(p, val):
                problems.append(f"{where}.{key} {val!r} is not valid: {p.help}"
                                + (f" (e.g. {key} = {p.example})" if p.example else ""))
                continue
            out[key] = val
        problems.extend(f"{where}: {msg}" for msg in cls.check(out))
        return out

    @classmethod
    def check(cls, params: dict[str, Any]) -> list[str]:
        """Problems of the parameters taken together (after each one is checked)."""
        return []

    @classmethod
    def host_problems(cls, params: dict[str, Any]) -> list[str]:
        """What this host lacks for these parameters (kernel features): one line each."""
        return []

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        """Set up the hop's namespace (forwarding is already on; routes are set)."""

    def counters(self, hop: Hop) -> dict[str, int]:
        """Counters of the function itself (packets it dropped by policy, ...)."""
        return {}


class GatewayTunnel:
    """How a pair of gateway hops terminates a tunnel kind (chain/gateway.py). The kind's
    driver names its style (`chain_gateway`, tunnels/base.py) and chain/gateway.py keeps one
    implementation per style: "device", the driver's own `up` between the two gateways
    (gateway.DeviceGateway); "seg6", SRv6 routes and no device (srv6.Seg6Gateway)."""

    # the first gateway encapsulates the sites' packets on input (a route, no forwarding of
    # its own): the pair forwards them once, not twice (ChainSpec.routed_hops)
    encapsulates_on_input: ClassVar[bool] = False
    # between hosts, each gateway is a site of the tunnel with an agent in its namespace
    # (chain/hosts.py); else routes in the gateways' namespaces are all it takes
    gateways_as_sites: ClassVar[bool] = True
    # the gateway's `underlay` parameter is given to the tunnel driver (else the style has
    # its own: srv6 runs over IPv6)
    driver_underlay: ClassVar[bool] = True

    def problems(self, params: dict[str, Any]) -> list[str]:
        """The gateway parameters this style refuses, one line each (before the driver is
        asked for its implementation and what the host lacks)."""
        return []

    def inner_mtu(self, params: dict[str, Any], wan_mtu: int, hops: Sequence[Hop],
                  driver_mtu: Callable[[], int]) -> int:
        """The MTU of the path between the sites through the pair's tunnel (pure);
        `driver_mtu`: the driver's own tunnel_mtu for these parameters and the WAN's MTU."""
        return driver_mtu()

    def up(self, tb: Any, first: Hop, second: Hop, first_pos: int, second_pos: int, n: int,
           ledger: Ledger, wan_mtu: int, sites: tuple[Any, Any] | None) -> dict[str, Any]:
        """The pair's tunnel and their routes through it; the case's gateway_tunnel record."""
        raise NotImplementedError

    def counters(self, hop: Hop) -> dict[str, int]:
        """A gateway's own counters of the tunnel (packets it decapsulated, ...)."""
        return {}


def _check(p: Param, val: Any) -> bool:
    if p.type is bool:
        return isinstance(val, bool)
    if p.type is int:
        if isinstance(val, bool) or not isinstance(val, int):
            return False
        return p.allowed is None or p.allowed[0] <= val <= p.allowed[1]
    if p.type is str:
        if not isinstance(val, str):
            return False
        if isinstance(p.allowed, tuple):
            return val in p.allowed
        if isinstance(p.allowed, re.Pattern):
            return bool(p.allowed.match(val))
        if callable(p.allowed):     # a predicate (values known only at run time)
            return bool(p.allowed(val))
        return True
    return isinstance(val, p.type)


def nft(hop: Hop, script: str) -> None:
    """Load an nftables ruleset into a hop's namespace (nft -f - reads it from stdin: a
    ruleset of 1000 rules is one transaction, not 1000 processes)."""
    hop.run(["nft", "-f", "-"], input=script, timeout=60)


def nft_counters(hop: Hop, table: str, family: str = "inet") -> dict[str, int]:
    """Packets and bytes of every named counter in one table (`nft -j list counters`)."""
    import json

    r = hop.run(["nft", "-j", "list", "table", family, table], check=False, timeout=20)
    if not r.ok:
        return {}
    out: dict[str, int] = {}
    for item in json.loads(r.stdout or "{}").get("nftables", []):
        c = item.get("counter")
        if isinstance(c, dict) and "name" in c:
            out[f"{c['name']}_packets"] = int(c.get("packets", 0))
            out[f"{c['name']}_bytes"] = int(c.get("bytes", 0))
    return out
