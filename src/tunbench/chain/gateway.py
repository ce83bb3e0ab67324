"""gateway: a tunnel terminated at two gateway hops instead of the end hosts, as SD-WAN
edges do: traffic between the sites enters the tunnel at the first gateway (site a's side),
crosses what lies between the gateways (the WAN) encapsulated, and leaves it at the second.

Gateways come in pairs with the same tunnel kind, one on each side of the WAN. The tunnel is
the kind's own driver, brought up on a testbed whose two sites are the gateway namespaces
(their WAN-facing interfaces are its underlay), registered in the chain's ledger. Then each
gateway routes the segments beyond the other gateway through the tunnel. Kinds: vxlan only
for now (its devices are per namespace; wireguard-go's names are system-wide and would clash
with a site tunnel of the same run, and ipsec's charon needs its own private /run per
gateway: both next).
"""

from __future__ import annotations

from typing import Any

from .. import tunnels
from ..testbed.base import Site, Testbed
from ..testbed.ledger import Ledger
from .base import Function, Hop, Param

BUILT = ("vxlan",)


class Gateway(Function):
    kind = "gateway"
    summary = "a tunnel terminated here and at the peer gateway across the WAN (vxlan)"
    params = {"tunnel": Param(str, "vxlan", BUILT, "the tunnel kind the gateways terminate "
                              f"({', '.join(BUILT)})", '"vxlan"')}

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        """Nothing alone: the pair is brought up together (tunnel_up)."""


def tunnel_up(tb: Testbed, first: Hop, second: Hop, first_pos: int, second_pos: int,
              n: int, ledger: Ledger) -> dict[str, Any]:
    """The gateways' tunnel, and their routes through it. Positions count site a as 0."""
    kind = first.params["tunnel"]
    drv = tunnels.get(kind)()
    params = drv.parse_params({})
    ga = Site("a", first.netns, first.right_if, first.right4, first.right6)
    gb = Site("b", second.netns, second.left_if, second.left4, second.left6)
    gtb = Testbed("chain-gateways", tb.run_id, ga, gb, tb.underlay_mtu, ledger, tb.workdir)
    ep = drv.up(gtb, params)
    from .build import nets
    for seg in range(n + 1):
        n4, n6 = nets(seg)
        if seg >= second_pos:      # beyond the second gateway: through the tunnel
            _replace(first.netns, n4, ep.b4, str(ep.a_ifname))
            if ep.b6:
                _replace(first.netns, n6, str(ep.b6), str(ep.a_ifname))
        if seg <= first_pos - 1:   # before the first gateway, seen from the second
            _replace(second.netns, n4, ep.a4, str(ep.b_ifname))
            if ep.a6:
                _replace(second.netns, n6, str(ep.a6), str(ep.b_ifname))
    return {"kind": kind, "gateways": [first.name, second.name], "endpoints": ep.describe()}


def _replace(netns: str, dst: str, via: str, dev: str) -> None:
    from .. import proc
    proc.run(["ip", "route", "replace", dst, "via", via, "dev", dev], netns=netns, timeout=10)
