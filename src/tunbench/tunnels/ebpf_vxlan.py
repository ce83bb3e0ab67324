"""ebpf-vxlan: tbtun, the project's eBPF tunnel, with VXLAN on the wire (RFC 7348; byte
compatible with the kernel's VXLAN device). See tunnels/_tbtun.py and docs/tbtun.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..tbtun import hub as tbhub
from ..tbtun import loader
from ..testbed.hub import Hub
from ._tbtun import TbtunDriver, TbtunParams


class EbpfVxlan(TbtunDriver):
    kind = "ebpf-vxlan"
    summary = "tbtun: rule-based eBPF tunnel (tc), VXLAN on the wire"
    encap = "vxlan"
    # on the hub: one attach point with a rule per spoke (the spokes run kernel VXLAN); the
    # hub sets VNI (spoke index), port and rules, decap is the user's
    hub_capable = True
    hub_params = ("decap",)

    @classmethod
    def hub_ship(cls, h: Hub) -> str | None:
        return tbhub.ship(h)

    @classmethod
    def hub_up(cls, h: Hub, params: TbtunParams, obj: str | None) -> dict[str, Any]:
        where = tbhub.tbtun(h, getattr(params, "decap", "tc"), obj,
                            getattr(params, "attach", "tc"))
        how = loader.attached_by(where, h.site)
        return {"devices": 0, "attach_points": 1, "rules": len(h.spokes), "pins": str(where),
                "decap": getattr(params, "decap", "tc"),
                "attach": how, "created_with": f"bpftool+{how}",
                **({"routes": len(h.spokes)} if h.on_hosts else {})}

    @classmethod
    def hub_counters(cls, section: dict[str, Any], h: Hub) -> dict[str, Any]:
        """tbtun's own counters on the hub: proof the rules carried the traffic."""
        where = Path(section.get("pins", ""))
        if not (section.get("pins") and h.site.exists(where)):
            return {}
        return {"hub": {k: v["packets"] for k, v in loader.stats(where, h.site).items()},
                "rules_with_traffic": len(loader.rule_counters(where, h.site))}


DRIVER = EbpfVxlan
