"""gateway: a tunnel terminated at two gateway hops instead of the end hosts, as SD-WAN
edges do: traffic between the sites enters the tunnel at the first gateway (site a's side),
crosses what lies between the gateways (the WAN) encapsulated, and leaves it at the second.

Gateways come in pairs with the same tunnel kind, one on each side of the WAN. Which kinds can
be a gateway, and how, is each driver's declaration (`chain_gateway`, tunnels/base.py): the
kinds are computed (built()), and each style is one implementation of the gateway contract
(base.GatewayTunnel; STYLES below). The "device" style is the kind's own driver (vxlan,
wireguard, ipsec), brought up on a testbed whose two
sites are the gateway namespaces (their WAN-facing interfaces are its underlay), registered
in the chain's ledger, with:
- `behind`: the prefixes of the segments on each gateway's site side, which the driver lets
  into its tunnel (WireGuard allowed-ips, IPsec traffic selectors) besides its inner
  addresses: a gateway forwards the sites' packets, not only its own;
- its own private directory (keys, PSKs, charon configurations: 0600, removed at teardown)
  and `link_tag` "g", so a site tunnel of the same kind in the same case never clashes with
  it (wireguard-go's interface names are system-wide).
Then each gateway routes the segments beyond the other gateway through the tunnel.

The "seg6" style (`tunnel = "srv6"`) is seed 004's deployment and has no tunnel device: the
first gateway encapsulates with `seg6` and an SRH listing the path's segments (transit End SIDs of routers
with `srv6_end = true`, then the peer's End.DX4/End.DX6), the second decapsulates (chain/srv6.py;
srv6.Seg6Gateway; its driver, tunnels/srv6.py, is only asked what the host lacks). It needs an
IPv6 underlay: `underlay = 4` is refused.

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
from .base import Function, GatewayTunnel, Hop, Param, nets


def built() -> tuple[str, ...]:
    """The tunnel kinds a gateway pair terminates: every driver declaring `chain_gateway`."""
    return tunnels.chain_gateway_kinds()


def style_of(params: dict[str, Any]) -> GatewayTunnel:
    """The gateway contract's implementation for a gateway's tunnel kind (one of built())."""
    return STYLES[str(tunnels.get(params["tunnel"]).chain_gateway)]


class Gateway(Function):
    kind = "gateway"
    summary = "a tunnel terminated here and at the peer gateway across the WAN (a kind " \
              "whose driver declares chain_gateway)"
    params = {
        "tunnel": Param(str, "vxlan", lambda kind: kind in built(), "the tunnel kind the "
                        "gateways terminate (one whose driver declares chain_gateway)",
                        '"ipsec"'),
        "impl": Param(str, "", None, "the tunnel's implementation (wireguard: kernel|go; "
                      "ipsec: libipsec|kernel|xfrm); empty: the kind's own choice on this "
                      "host", '"libipsec"'),
        "underlay": Param(int, 0, (0, 6), "the IP family between the gateways: 4 or 6 (0: "
                          "the kind's own; srv6 needs 6)", "6"),
    }

    def counters(self, hop: Hop) -> dict[str, int]:
        """The gateway style's own counters (seg6: packets its End.DX4/End.DX6 SIDs
        decapsulated)."""
        return style_of(hop.params).counters(hop)

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        """Nothing alone: the pair is brought up together (tunnel_up)."""


def pair_problems(params: dict[str, Any], here: bool = True) -> list[str]:
    """What is wrong with a gateway pair's tunnel: an implementation the kind does not have,
    or what this host lacks for it (a kernel ESP gateway on a kernel without ESP), in one
    line, refused with the chain (once per pair) before anything is created."""
    if params.get("tunnel") not in built():
        return []   # refused as such already (spec._gateway)
    if params.get("underlay", 0) not in (0, 4, 6):
        return [f"underlay {params['underlay']} must be 4 or 6 (or left out: the tunnel "
                "kind's own)"]
    refused = style_of(params).problems(params)
    if refused:
        return refused
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
    if params.get("underlay") and style_of(params).driver_underlay:
        raw["underlay"] = params["underlay"]
    try:
        return drv.parse_params(raw)
    except SpecError as e:   # checked before (Gateway.check): a driver's own refusal
        raise SpecError(f"gateway tunnel: {e}", e.hint) from None


def inner_mtu(params: dict[str, Any], wan_mtu: int,
              hops: tuple[Hop, ...] | list[Hop] = ()) -> int:
    """The MTU of the path between the sites through the gateways' tunnel (pure): the
    driver's tunnel MTU over the WAN, or what the style computes (seg6: its SRH holds one
    segment per transit End router of `hops`, plus the decapsulation SID)."""
    drv = tunnels.get(params["tunnel"])
    return style_of(params).inner_mtu(
        params, wan_mtu, hops, lambda: int(drv.tunnel_mtu(tunnel_params(params), wan_mtu)))


def behind(first_pos: int, second_pos: int, n: int) -> dict[str, tuple[str, ...]]:
    """The segments on each gateway's site side, IPv4 and IPv6 (pure). Gateway "a" is the
    first (site a's side: segments 0 .. first_pos - 1), "b" the second (second_pos .. n)."""
    a = [p for seg in range(first_pos) for p in nets(seg)]
    b = [p for seg in range(second_pos, n + 1) for p in nets(seg)]
    return {"a": tuple(a), "b": tuple(b)}


def tunnel_up(tb: Testbed, first: Hop, second: Hop, first_pos: int, second_pos: int,
              n: int, ledger: Ledger, wan_mtu: int,
              sites: tuple[Site, Site] | None = None) -> dict[str, Any]:
    """The gateways' tunnel, and their routes through it. Positions count site a as 0.
    `sites`: the gateways as sites already made (on hosts: an agent in each gateway's
    namespace, chain/hosts.py, with its own case directory there); else namespaces here."""
    return style_of(first.params).up(tb, first, second, first_pos, second_pos, n, ledger,
                                     wan_mtu, sites)


class DeviceGateway(GatewayTunnel):
    """The "device" gateway style: the kind's driver brings its tunnel up on a testbed whose
    two sites are the gateways (module docstring), then each gateway routes the segments
    beyond the other through it."""

    def up(self, tb: Any, first: Hop, second: Hop, first_pos: int, second_pos: int, n: int,
           ledger: Ledger, wan_mtu: int, sites: tuple[Any, Any] | None) -> dict[str, Any]:
        return _device_up(tb, first, second, first_pos, second_pos, n, ledger, wan_mtu,
                          sites)


STYLES: dict[str, GatewayTunnel] = {"device": DeviceGateway(), "seg6": srv6.Seg6Gateway()}


def _device_up(tb: Testbed, first: Hop, second: Hop, first_pos: int, second_pos: int,
               n: int, ledger: Ledger, wan_mtu: int,
               sites: tuple[Site, Site] | None) -> dict[str, Any]:
    kind = first.params["tunnel"]
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
