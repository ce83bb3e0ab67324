"""gateway: a tunnel terminated at two gateway hops instead of the end hosts, as SD-WAN
edges do: traffic between the sites enters the tunnel at the first gateway (site a's side),
crosses what lies between the gateways (the WAN) encapsulated, and leaves it at the second.

Gateways come in pairs with the same tunnel kind, one on each side of the WAN. The tunnel is
the kind's own driver (tunnels/: vxlan, wireguard, ipsec), brought up on a testbed whose two
sites are the gateway namespaces (their WAN-facing interfaces are its underlay), registered
in the chain's ledger, with:
- `behind`: the prefixes of the segments on each gateway's site side, which the driver lets
  into its tunnel (WireGuard allowed-ips, IPsec traffic selectors) besides its inner
  addresses: a gateway forwards the sites' packets, not only its own;
- its own private directory (keys, PSKs, charon configurations: 0600, removed at teardown)
  and `link_tag` "g", so a site tunnel of the same kind in the same case never clashes with
  it (wireguard-go's interface names are system-wide).
Then each gateway routes the segments beyond the other gateway through the tunnel.

`tunnel = "srv6"` is seed 004's deployment and has no tunnel device: the first gateway
encapsulates with `seg6` and an SRH listing the path's segments (transit End SIDs of routers
with `srv6_end = true`, then the peer's End.DX4/End.DX6), the second decapsulates (chain/srv6.py;
its driver, tunnels/srv6.py, is only asked what the host lacks). It needs an IPv6 underlay:
`underlay = 4` is refused.

The inner path's MTU follows from the overhead: the segments on the site sides get the
tunnel's MTU (`inner_mtu`: WAN MTU minus the kind's overhead, and at most 1400 for libipsec),
the WAN keeps the experiment's MTU, so the sites' packets fit the tunnel unfragmented.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import tunnels
from ..errors import SpecError
from ..testbed.base import Site, Testbed
from ..testbed.ledger import Ledger
from . import srv6
from .base import Function, Hop, Param

BUILT = ("vxlan", "wireguard", "ipsec", "srv6")


class Gateway(Function):
    kind = "gateway"
    summary = "a tunnel terminated here and at the peer gateway across the WAN " \
              f"({', '.join(BUILT)})"
    params = {
        "tunnel": Param(str, "vxlan", BUILT, "the tunnel kind the gateways terminate "
                        f"({', '.join(BUILT)})", '"ipsec"'),
        "impl": Param(str, "", None, "the tunnel's implementation (wireguard: kernel|go; "
                      "ipsec: libipsec|kernel|xfrm); empty: the kind's own choice on this "
                      "host", '"libipsec"'),
        "underlay": Param(int, 0, (0, 6), "the IP family between the gateways: 4 or 6 (0: "
                          "the kind's own; srv6 needs 6)", "6"),
    }

    def counters(self, hop: Hop) -> dict[str, int]:
        """An srv6 gateway: packets its End.DX4/End.DX6 SIDs decapsulated."""
        return srv6.counters(hop) if srv6.is_srv6_gateway(hop) else {}

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        """Nothing alone: the pair is brought up together (tunnel_up)."""


def pair_problems(params: dict[str, Any], here: bool = True) -> list[str]:
    """What is wrong with a gateway pair's tunnel: an implementation the kind does not have,
    or what this host lacks for it (a kernel ESP gateway on a kernel without ESP), in one
    line, refused with the chain (once per pair) before anything is created."""
    if params.get("tunnel") not in BUILT:
        return []   # refused as such already (spec._gateway)
    if params.get("underlay", 0) not in (0, 4, 6):
        return [f"underlay {params['underlay']} must be 4 or 6 (or left out: the tunnel "
                "kind's own)"]
    if params["tunnel"] == srv6.KIND and params.get("underlay") == 4:
        return ["srv6 needs an IPv6 underlay (SRv6 carries its segment list in IPv6 "
                "headers): set underlay = 6 or leave underlay out"]
    drv = tunnels.get(params["tunnel"])
    impls, impl = drv.implementations(), params.get("impl") or ""
    if impl and impl not in impls:
        return [f"impl {impl!r} is not an implementation of {params['tunnel']} "
                f"({', '.join(impls) or 'it has one only: leave impl out'})"]
    if not here:
        return []   # between hosts: asked of the hosts (chain/hosts.py tools and kernel)
    try:
        p = tunnel_params(params)
    except SpecError as e:   # e.g. an underlay the kind does not take
        return [e.one_line()]
    missing = drv.requirements(p)
    if not missing:
        return []
    return [f"{drv.display(p)} needs what this host lacks: "
            f"{', '.join(m.what for m in missing)} ({missing[0].fix})"]


def tunnel_params(params: dict[str, Any]) -> Any:
    """The gateway tunnel's driver parameters (the driver's defaults, impl if given)."""
    drv = tunnels.get(params["tunnel"])
    raw: dict[str, Any] = {"impl": params["impl"]} if params.get("impl") else {}
    if params.get("underlay") and params["tunnel"] != srv6.KIND:
        raw["underlay"] = params["underlay"]
    try:
        return drv.parse_params(raw)
    except SpecError as e:   # checked before (Gateway.check): a driver's own refusal
        raise SpecError(f"gateway tunnel: {e}", e.hint) from None


def inner_mtu(params: dict[str, Any], wan_mtu: int,
              hops: tuple[Hop, ...] | list[Hop] = ()) -> int:
    """The MTU of the path between the sites through the gateways' tunnel (pure); srv6: its
    SRH holds one segment per transit End router of `hops`, plus the decapsulation SID."""
    if params.get("tunnel") == srv6.KIND:
        p = srv6.plan_of(hops)
        return wan_mtu - (p.overhead if p else srv6.IPV6_HEADER + srv6.SRH_FIXED
                          + srv6.SID_BYTES)
    drv = tunnels.get(params["tunnel"])
    return int(drv.tunnel_mtu(tunnel_params(params), wan_mtu))


def behind(first_pos: int, second_pos: int, n: int) -> dict[str, tuple[str, ...]]:
    """The segments on each gateway's site side, IPv4 and IPv6 (pure). Gateway "a" is the
    first (site a's side: segments 0 .. first_pos - 1), "b" the second (second_pos .. n)."""
    from .build import nets
    a = [p for seg in range(first_pos) for p in nets(seg)]
    b = [p for seg in range(second_pos, n + 1) for p in nets(seg)]
    return {"a": tuple(a), "b": tuple(b)}


def tunnel_up(tb: Testbed, first: Hop, second: Hop, first_pos: int, second_pos: int,
              n: int, ledger: Ledger, wan_mtu: int,
              sites: tuple[Site, Site] | None = None) -> dict[str, Any]:
    """The gateways' tunnel, and their routes through it. Positions count site a as 0.
    `sites`: the gateways as sites already made (on hosts: an agent in each gateway's
    namespace, chain/hosts.py, with its own case directory there); else namespaces here."""
    kind = first.params["tunnel"]
    if kind == srv6.KIND:   # no tunnel device: seg6 routes in the gateways (chain/srv6.py)
        hops = list(tb.hops)
        plan = srv6.plan_of(hops)
        assert plan is not None and (plan.first, plan.second) == (first_pos, second_pos)
        return srv6.up(hops, plan, wan_mtu)
    drv = tunnels.get(kind)()
    params = tunnel_params(first.params)
    if sites is None:
        ga = Site("a", first.netns, first.right_if, first.right4, first.right6)
        gb = Site("b", second.netns, second.left_if, second.left4, second.left6)
        gwdir = Path(tb.workdir) / "gateways"
        ga.make_dir(ledger, gwdir)
    else:
        ga, gb = sites
        gwdir = Path(tb.workdir)   # each remote gateway writes in its own directory there
    gtb = Testbed("chain-gateways", tb.run_id, ga, gb, wan_mtu, ledger, gwdir,
                  shares_cpus=sites is None,
                  behind=_behind_with_self(ga, gb, behind(first_pos, second_pos, n)),
                  link_tag="g")
    ep = drv.up(gtb, params)
    from .build import nets
    for seg in range(n + 1):
        n4, n6 = nets(seg)
        if seg >= second_pos:      # beyond the second gateway: through the tunnel
            _replace(first, n4, ep.b4, str(ep.a_ifname))
            if ep.b6:
                _replace(first, n6, str(ep.b6), str(ep.a_ifname))
        if seg <= first_pos - 1:   # before the first gateway, seen from the second
            _replace(second, n4, ep.a4, str(ep.b_ifname))
            if ep.a6:
                _replace(second, n6, str(ep.a6), str(ep.b_ifname))
    impl = drv.resolve_impl(params)
    return {"kind": kind, "label": drv.display(params), "impl": impl,
            "encrypts": drv.encrypts, "carries": list(drv.carries),
            "kernel_datapath": drv.kernel_datapath(impl), "gateways": [first.name, second.name],
            "wan_mtu": wan_mtu, "inner_mtu": ep.mtu, "endpoints": ep.describe()}


def _behind_with_self(ga: Site, gb: Site, segs: dict[str, tuple[str, ...]]
                      ) -> dict[str, tuple[str, ...]]:
    """A gateway's answers to site a's pings of its WAN address return through the tunnel
    (its route to site a's segments): its own WAN address is behind it too."""
    return {"a": (*segs["a"], f"{ga.underlay4}/32", f"{ga.underlay6}/128"),
            "b": (*segs["b"], f"{gb.underlay4}/32", f"{gb.underlay6}/128")}


def _replace(hop: Hop, dst: str, via: str, dev: str) -> None:
    hop.run(["ip", "route", "replace", dst, "via", via, "dev", dev], timeout=10)
