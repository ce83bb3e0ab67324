"""SRv6 gateways and transit End nodes in a chain: seed 004's deployment (docs/chains.md,
"SRv6 gateways and a transit node").

    a -> gwa (seg6 encap: outer IPv6 + SRH) -> [router, End SID] -> ... -> gwb (End.DX4/DX6) -> b

- A `gateway` with `tunnel = "srv6"` routes the segments beyond its peer gateway with
  `encap seg6 mode encap segs S1,...,Sn`: the sites' packets get an outer IPv6 header and an
  SRH listing the path's segments, the End SID of every `router` with `srv6_end = true`
  between the gateways (in path order), then the peer gateway's decapsulation SID: `End.DX4`
  for IPv4 inside, `End.DX6` for IPv6. Back from the peer: the transit SIDs in reverse order.
- A `router` with `srv6_end = true` between two srv6 gateways owns a `seg6local End` SID: the
  SRH steers every packet to it (the outer destination is that SID until it advances the
  segment list), so the outer hop limit counts it; the inner TTL does not (it forwards the
  outer packets only, as anything between two gateways does: ChainSpec.routed_hops).
- SIDs: the SRv6 hop at position p (site a = 0) has the locator 2001:2:f:p::/64 (p in hex):
  End SID ::e, End.DX4 ::d4, End.DX6 ::d6. Every namespace from the first gateway to the
  second routes the other SRv6 hops' locators through its neighbour on that side, as the
  chain routes its segments (the path is the only path).
- Decapsulation: `End.DX4 nh4 0.0.0.0` / `End.DX6 nh6 ::`: the inner packet is forwarded by
  its own destination (the chain's static routes), so a router between a gateway and its site
  works; an `nh4` naming the neighbour makes the kernel resolve the inner destination on that
  link, which fails past it (measured: docs/chains.md).
- Every seg6local route is created with `count`: the per-hop figures read how many packets
  each SID processed (`srv6_end_packets` at a transit router, `srv6_end_dx4_packets` ... at a
  gateway), proof that the traffic took the SRv6 path.

Overhead: 40 (outer IPv6) + 8 (SRH) + 16 per segment; the sites' segments get the WAN MTU
minus that. Everything lives in the chain's namespaces and goes with them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..testbed.ledger import Ledger
from ..tunnels.srv6 import encap_route, parse_seg6local_counters, sid_route
from .base import GatewayTunnel, Hop, addr6, nets

IPV6_HEADER, SRH_FIXED, SID_BYTES = 40, 8, 16
KIND = "srv6"


def locator(pos: int) -> str:
    return f"2001:2:f:{pos:x}::/64"


def sid(pos: int, fn: str) -> str:
    """The SID of function `fn` (e: End, d4: End.DX4, d6: End.DX6) of the hop at `pos`."""
    return f"2001:2:f:{pos:x}::{fn}"


def is_srv6_gateway(hop: Hop) -> bool:
    return hop.kind == "gateway" and hop.params.get("tunnel") == KIND


def is_transit(hop: Hop) -> bool:
    return hop.kind == "router" and bool(hop.params.get("srv6_end"))


@dataclass(frozen=True)
class Plan:
    """Where the SRv6 functions of a chain sit (positions: site a = 0, hops 1..n)."""

    first: int
    second: int
    transit: tuple[int, ...]
    n: int

    def segments(self, towards: str, family: int) -> list[str]:
        """The SRH's segment list, in the order the packet visits them, of packets from
        site a's side to site b's (towards "b") or back ("a")."""
        fn = "d4" if family == 4 else "d6"
        if towards == "b":
            return [*(sid(p, "e") for p in self.transit), sid(self.second, fn)]
        return [*(sid(p, "e") for p in reversed(self.transit)), sid(self.first, fn)]

    @property
    def overhead(self) -> int:
        return IPV6_HEADER + SRH_FIXED + SID_BYTES * (len(self.transit) + 1)

    def srv6_positions(self) -> list[int]:
        return [self.first, *self.transit, self.second]

    def locator_routes(self, pos: int) -> list[tuple[str, str]]:
        """(locator, next hop) of the namespace at `pos`: the other SRv6 hops' locators
        through its neighbour on their side ([] outside the gateways' stretch)."""
        if not self.first <= pos <= self.second:
            return []
        out = []
        for p in self.srv6_positions():
            if p == pos:
                continue
            out.append((locator(p), addr6(pos, 2) if p > pos else addr6(pos - 1, 1)))
        return out

    def describe(self) -> dict[str, Any]:
        return {"first": self.first, "second": self.second, "transit": list(self.transit),
                "segments_to_b4": self.segments("b", 4), "segments_to_b6": self.segments("b", 6),
                "segments_to_a4": self.segments("a", 4), "segments_to_a6": self.segments("a", 6),
                "overhead": self.overhead}


def plan_of(hops: list[Hop] | tuple[Hop, ...]) -> Plan | None:
    """The plan of a chain's hops (pure); None without a pair of srv6 gateways."""
    gw = [i for i, h in enumerate(hops, 1) if is_srv6_gateway(h)]
    if len(gw) != 2:
        return None
    transit = tuple(i for i, h in enumerate(hops, 1) if gw[0] < i < gw[1] and is_transit(h))
    return Plan(gw[0], gw[1], transit, len(hops))


def problems(hops: list[Hop] | tuple[Hop, ...]) -> list[str]:
    """What is wrong with a chain's SRv6 parts, one line each (pure): a transit End router
    that no srv6 gateway pair steers through."""
    p = plan_of(hops)
    out = []
    for i, h in enumerate(hops, 1):
        if is_transit(h) and (p is None or i not in p.transit):
            where = ("there is no pair of srv6 gateways" if p is None else
                     f"it lies outside the srv6 gateways at positions {p.first} and {p.second}")
            out.append(f"router {h.name} has srv6_end = true but {where}: an End SID is only "
                       "visited when srv6 gateways put it in their SRH; place it between two "
                       'gateways with tunnel = "srv6", or leave srv6_end out')
    return out


def route_argvs(p: Plan, pos: int, right_if: str, left_if: str) -> list[list[str]]:
    """Every `ip` command the namespace at `pos` needs for SRv6 (pure): its locator routes,
    its SIDs (counted), and at a gateway the encap routes of the segments beyond its peer."""
    out = [["ip", "-6", "route", "add", dst, "via", via] for dst, via in p.locator_routes(pos)]
    if pos in p.transit:
        out.append(["ip", *sid_route(sid(pos, "e"), "End", right_if)])
    if pos in (p.first, p.second):
        # decapsulation towards this gateway's own site side; the inner packet then follows
        # its own destination's route (nh 0.0.0.0 / ::)
        site_if = left_if if pos == p.first else right_if
        out.append(["ip", *sid_route(sid(pos, "d4"), "End.DX4", site_if, "nh4", "0.0.0.0")])
        out.append(["ip", *sid_route(sid(pos, "d6"), "End.DX6", site_if, "nh6", "::")])
        towards, wan_if = ("b", right_if) if pos == p.first else ("a", left_if)
        beyond = range(p.second, p.n + 1) if pos == p.first else range(0, p.first)
        for seg in beyond:
            for net, fam in zip(nets(seg), (4, 6)):
                out.append(["ip", *encap_route(net, p.segments(towards, fam), wan_if,
                                               verb="replace")])
    return out


def up(hops: list[Hop], p: Plan, wan_mtu: int) -> dict[str, Any]:
    """Configure the SRv6 path in the chain's namespaces (they exist, with their routes); the
    case's `testbed.chain.gateway_tunnel`."""
    for pos in range(p.first, p.second + 1):
        hop = hops[pos - 1]
        for argv in route_argvs(p, pos, hop.right_if, hop.left_if):
            hop.run(argv, timeout=10)
    first, second = hops[p.first - 1], hops[p.second - 1]
    return {"kind": KIND, "label": "srv6", "impl": None, "encrypts": False,
            "gateways": [first.name, second.name],
            "transit": [hops[t - 1].name for t in p.transit],
            "wan_mtu": wan_mtu, "inner_mtu": wan_mtu - p.overhead, "endpoints": {},
            "srv6": p.describe()}


def counters(hop: Hop) -> dict[str, int]:
    """Packets/bytes each of the hop's counted SIDs processed, by action
    (`srv6_end_packets`, `srv6_end_dx4_packets`, ...)."""
    r = hop.run(["ip", "-s", "-6", "route", "show"], check=False, timeout=10)
    if not r.ok:
        return {}
    out: dict[str, int] = {}
    for _, c in parse_seg6local_counters(r.stdout).items():
        key = "srv6_" + c["action"].lower().replace(".", "_")
        for what in ("packets", "bytes", "errors"):
            out[f"{key}_{what}"] = out.get(f"{key}_{what}", 0) + c[what]
    return out


class Seg6Gateway(GatewayTunnel):
    """The "seg6" gateway style (tunnels/srv6.py declares it): no tunnel device, seg6 routes
    in the gateways and the End SIDs between them (`up` above); the srv6 driver is only
    asked what the host lacks."""

    encapsulates_on_input = True    # measured: tests/netns/test_chain_srv6_live.py
    gateways_as_sites = False       # routes in the chain's namespaces, on hosts too
    driver_underlay = False         # always IPv6 between the gateways

    def problems(self, params: dict[str, Any]) -> list[str]:
        if params.get("underlay") == 4:
            return ["srv6 needs an IPv6 underlay (SRv6 carries its segment list in IPv6 "
                    "headers): set underlay = 6 or leave underlay out"]
        return []

    def inner_mtu(self, params: dict[str, Any], wan_mtu: int, hops: Sequence[Hop],
                  driver_mtu: Callable[[], int]) -> int:
        """The SRH holds one segment per transit End router of `hops`, plus the
        decapsulation SID."""
        p = plan_of(list(hops))
        return wan_mtu - (p.overhead if p else IPV6_HEADER + SRH_FIXED + SID_BYTES)

    def up(self, tb: Any, first: Hop, second: Hop, first_pos: int, second_pos: int, n: int,
           ledger: Ledger, wan_mtu: int, sites: tuple[Any, Any] | None) -> dict[str, Any]:
        hops = list(tb.hops)
        plan = plan_of(hops)
        assert plan is not None and (plan.first, plan.second) == (first_pos, second_pos)
        return up(hops, plan, wan_mtu)

    def counters(self, hop: Hop) -> dict[str, int]:
        """Packets its End.DX4/End.DX6 SIDs decapsulated."""
        return counters(hop)
