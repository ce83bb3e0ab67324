"""nat: nftables source NAT on the hop's right (WAN-facing) side: `masquerade` (the address
of the outgoing interface, chosen per packet) or `snat` (that address, fixed in the rule).
Site b then sees site a's traffic coming from the NAT hop, as behind a real branch NAT.
Replies are translated back by conntrack; traffic started from site b is not translated.
"""

from __future__ import annotations

from typing import Any

from ..testbed.ledger import Ledger
from .base import Function, Hop, Param, nft, nft_counters

TABLE = "tb_nat"


def ruleset(params: dict[str, Any], out_if: str, out4: str) -> str:
    """The nftables script of one NAT hop (pure: tested without root)."""
    action = "masquerade" if params["mode"] == "masquerade" else f"snat to {out4}"
    return "\n".join([
        f"table ip {TABLE} {{", "  counter translated {}",
        "  chain postrouting {", "    type nat hook postrouting priority 100; policy accept;",
        f'    oifname "{out_if}" counter name translated {action}', "  }", "}"]) + "\n"


class Nat(Function):
    kind = "nat"
    summary = "nftables source NAT towards site b (masquerade or snat)"
    tools = ("nft",)
    params = {"mode": Param(str, "masquerade", ("masquerade", "snat"), "masquerade or snat",
                            '"snat"')}

    def configure(self, hop: Hop, ledger: Ledger) -> None:
        nft(hop, ruleset(hop.params, hop.right_if, hop.right4))

    def counters(self, hop: Hop) -> dict[str, int]:
        return nft_counters(hop, TABLE, "ip")


FUNCTION = Nat
