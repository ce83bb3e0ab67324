"""srv6: Linux SRv6 (seg6 lwtunnel) encapsulation over the IPv6 underlay, IPv4 and IPv6 inside.

There is no tunnel interface. Each site holds its inner addresses on `lo` (this kernel has no
dummy driver) and routes the other site's inner addresses with `encap seg6 mode encap segs ...`
out of the underlay. The far site terminates with seg6local SIDs from its own locator:
`End.DX4 nh4 <own inner v4>` for IPv4 and `End.DT6 table local` for IPv6 (DESIGN.md §5:
End.DX6 and `table main` dropped everything on this kernel).

`segments` is the number of SIDs in the segment list. With two sites, segments N > 1 means the
first N-1 SIDs are plain `End` SIDs of the far site: the packet crosses the underlay once, then
the far site processes the SRH N times (End, End, ..., End.DX4/DT6), each a route lookup on the
next SID. It models the header cost (16 bytes per SID) and the per-segment processing, not
extra wire hops; the inner TTL/hop limit is not decremented (measured: ping replies keep ttl 64).

Overhead: 40 (outer IPv6) + 8 (SRH) + 16 per segment. The kernel subtracts the same headroom
from the route MTU, so a DF packet of exactly the tunnel MTU passes and one byte more fails.

Proof of the datapath: every seg6local route is created with `count`, so `ip -s -6 route`
reports packets/bytes that arrived SRv6-encapsulated with that SID active (see counters()).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..testbed.base import Site, Testbed
from .base import (
    IPV6_HEADER,
    Endpoints,
    KernelOption,
    Needs,
    Tool,
    TunnelDriver,
    TunnelParams,
    inner_addrs,
)

SRH_FIXED = 8
SID_BYTES = 16
MAX_SEGMENTS = 32
LOCATOR = {"a": "2001:2:0:f1::", "b": "2001:2:0:f2::"}   # per-site SID locator (/64)


@dataclass(frozen=True)
class Srv6Params(TunnelParams):
    segments: int = field(default=1, metadata={
        "help": f"SIDs in the segment list (1..{MAX_SEGMENTS}; 16 bytes each)"})

    def validate(self) -> list[str]:
        if not 1 <= self.segments <= MAX_SEGMENTS:
            return [f"segments {self.segments} out of range (1..{MAX_SEGMENTS}: the number of "
                    "SIDs in the segment list, at least 1)"]
        return []


def sids(site: str, segments: int) -> tuple[list[str], str, str]:
    """(End SIDs, End.DX4 SID, End.DT6 SID) of a site's locator."""
    loc = LOCATOR[site]
    return [f"{loc}e{i}" for i in range(1, segments)], f"{loc}d4", f"{loc}d6"


def encap_route(prefix: str, segs: list[str], dev: str, verb: str = "add",
                src: str | None = None) -> list[str]:
    """`ip` arguments of a route that encapsulates towards `prefix` with an SRH of `segs`
    (`seg6 mode encap`); the family follows the prefix. One builder for the tunnel's sites
    and the chain's gateways."""
    fam = ["-6"] if ":" in prefix else []
    return [*fam, "route", verb, prefix, "encap", "seg6", "mode", "encap", "segs",
            ",".join(segs), "dev", dev, *(["src", src] if src else [])]


def sid_route(sid: str, action: str, dev: str, *extra: str) -> list[str]:
    """`ip` arguments of a counted seg6local SID: End, End.DX4 (nh4 ADDR), End.DX6 (nh6 ADDR),
    End.DT6 (table T)."""
    return ["-6", "route", "add", f"{sid}/128", "encap", "seg6local", "action", action,
            *extra, "count", "dev", dev]


_ROUTE = re.compile(r"^(?P<dst>\S+)\s+encap seg6local action (?P<action>\S+).*?"
                    r"packets (?P<packets>\d+) bytes (?P<bytes>\d+) errors (?P<errors>\d+)")


def parse_seg6local_counters(text: str) -> dict[str, dict[str, Any]]:
    """`ip -s -6 route show` -> {sid: {action, packets, bytes, errors}} of counted seg6local
    routes (pure; tested on captured output)."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        m = _ROUTE.match(line.strip())
        if m:
            out[m["dst"].split("/")[0]] = {"action": m["action"], "packets": int(m["packets"]),
                                           "bytes": int(m["bytes"]), "errors": int(m["errors"])}
    return out


class Srv6(TunnelDriver[Srv6Params]):
    kind = "srv6"
    chain_gateway = "seg6"        # no device: seg6 routes in the gateways (chain/srv6.py)
    summary = "kernel SRv6 encapsulation (seg6 lwtunnel, End.DX4/End.DT6) over IPv6"
    Params = Srv6Params
    underlay_family = 6
    needs = {"": Needs(
        tools=(Tool("ip", "iproute2", "SRv6 routes", ("-V",)),),
        kernel=(KernelOption("CONFIG_IPV6", None, "IPv6"),
                KernelOption("CONFIG_IPV6_SEG6_LWTUNNEL", None,
                             "SRv6 encap and seg6local routes")))}

    @classmethod
    def overhead(cls, params: Srv6Params, family: int = 6) -> int:
        return IPV6_HEADER + SRH_FIXED + SID_BYTES * params.segments

    def up(self, tb: Testbed, params: Srv6Params) -> Endpoints:
        a4, b4, a6, b6 = inner_addrs(0)
        mtu = self.tunnel_mtu(params, tb.underlay_mtu)
        mine = {"a": (a4, a6), "b": (b4, b6)}
        for site in (tb.a, tb.b):
            my4, my6 = mine[site.name]
            self._ip(tb, site, ["addr", "add", f"{my4}/32", "dev", "lo"])
            self._ip(tb, site, ["-6", "addr", "add", f"{my6}/128", "dev", "lo"])
        for site in (tb.a, tb.b):
            peer = tb.other(site)
            my4, my6 = mine[site.name]
            peer4, peer6 = mine[peer.name]
            dev = site.underlay_if
            # the peer's locator is reached over the underlay
            self._ip(tb, site, ["-6", "route", "add", f"{LOCATOR[peer.name]}/64",
                                "via", peer.underlay6, "dev", dev])
            ends, dx4, dt6 = sids(peer.name, params.segments)
            self._ip(tb, site, encap_route(f"{peer4}/32", [*ends, dx4], dev, src=my4))
            self._ip(tb, site, encap_route(f"{peer6}/128", [*ends, dt6], dev, src=my6))
            # this site's own SIDs, each counted
            my_ends, my_dx4, my_dt6 = sids(site.name, params.segments)
            for sid in my_ends:
                self._ip(tb, site, sid_route(sid, "End", dev))
            self._ip(tb, site, sid_route(my_dx4, "End.DX4", dev, "nh4", my4))
            self._ip(tb, site, sid_route(my_dt6, "End.DT6", dev, "table", "local"))
        return Endpoints(
            a4=a4, b4=b4, a6=a6, b6=b6, mtu=mtu, overhead=self.overhead(params),
            info={"segments": params.segments, "underlay": 6, "inner_on": "lo",
                  "segment_list_a_to_b4": [*sids("b", params.segments)[0],
                                           sids("b", params.segments)[1]],
                  "segment_list_a_to_b6": [*sids("b", params.segments)[0],
                                           sids("b", params.segments)[2]],
                  "wire_hops": 1,
                  "extra_segments": "End SIDs of the far site, processed there in turn"})

    @staticmethod
    def _ip(tb: Testbed, site: Site, args: list[str]) -> None:
        """Run `ip ARGS` in a site and register its undo (`add` -> `del`) in the ledger."""
        site.run(["ip", *args], timeout=10)
        i = args.index("add")
        rest = args[i + 1:] if "addr" in args[:i] else args[i + 1:i + 2]   # routes: by prefix
        site.record_command(tb.ledger, ["ip", *args[:i], "del", *rest])

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Per site: packets/bytes its seg6local SIDs processed (only SRv6-encapsulated packets
        addressed to those SIDs can move them), by action."""
        out: dict[str, dict[str, int]] = {}
        for site in (tb.a, tb.b):
            text = site.run(["ip", "-s", "-6", "route", "show"], timeout=10).stdout
            acc: dict[str, int] = {}
            for sid, c in parse_seg6local_counters(text).items():
                if not sid.startswith(LOCATOR[site.name]):
                    continue
                key = c["action"].lower().replace(".", "_")
                for what in ("packets", "bytes", "errors"):
                    acc[f"{key}_{what}"] = acc.get(f"{key}_{what}", 0) + c[what]
            out[site.name] = acc
        return out


DRIVER = Srv6
