"""The hub of a hub-and-spokes testbed (testbed/hub.py) built two ways, for comparison.

- `kernel_vxlan`: what Linux offers, one VXLAN device per spoke (VNI i, remote = spoke i),
  each with the hub's inner address, a /32 route to its spoke and a static neighbour;
- `tbtun`: one attach point on the hub's underlay device and one rule per spoke (inner /32 ->
  spoke's underlay, VNI i, the spoke device's MAC), one realm route for the whole overlay.

Spokes run the kernel's VXLAN device in both cases, so only the hub differs (and tbtun is
checked against the kernel's wire format at N peers at once). `kernel_memory_kb` gives the
kernel-side memory the comparison reads before and after (slab, per-CPU, vmalloc): on a shared
host it moves with everything else, so benchmarks report it next to tbtun's exact map memory
(`map_memory`).
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import proc
from ..testbed import names
from ..testbed.hub import HUB_MAC, INNER_MTU, VXLAN_PORT, Hub, batch
from ..tunnels._tbtun import REALM
from . import loader, maps

OVERLAY = "198.19.0.0/16"
MEMINFO_KEYS = ("Slab", "Percpu", "VmallocUsed")


def kernel_vxlan(hub: Hub) -> list[str]:
    """N kernel VXLAN devices on the hub (one `ip -batch`); returns their names."""
    lines, devs = [], []
    for s in hub.spokes:
        dev = names.link_name(hub.run_id, f"v{s.index}")
        lines += [f"link add {dev} address {HUB_MAC} type vxlan id {s.index} local "
                  f"{hub.underlay4} remote {s.underlay4} dstport {VXLAN_PORT} dev "
                  f"{hub.underlay_if} nolearning",
                  f"link set {dev} addrgenmode none",
                  f"link set {dev} mtu {INNER_MTU} up",
                  f"addr add {hub.inner4}/32 dev {dev}",
                  f"route add {s.inner4}/32 dev {dev} src {hub.inner4}",
                  f"neigh add {s.inner4} lladdr {s.mac} dev {dev} nud permanent"]
        devs.append(dev)
    batch(hub.netns, lines)
    return devs


def spoke_rule(hub: Hub, index: int) -> maps.Rule:
    s = hub.spokes[index - 1]
    return maps.Rule(f"{s.inner4}/32", s.underlay4, s.index, "vxlan", VXLAN_PORT, s.mac)


def tbtun(hub: Hub, decap: str = "tc") -> Path:
    """One tbtun instance on the hub's underlay device with one rule per spoke; returns its
    pin directory (for `tunnel-rules --site`)."""
    where = loader.load(hub.ledger, hub.run_id, "hub")
    loader.configure(where, local4=hub.underlay4, realm=REALM, mtu=1500,
                     vxlan_port=VXLAN_PORT, geneve_port=maps.DEFAULT_PORTS["geneve"])
    loader.add_rules(where, [spoke_rule(hub, s.index) for s in hub.spokes])
    loader.attach(hub.ledger, hub.netns, hub.underlay_if, where, decap)
    # the inner address on the underlay device; ONE realm route for every spoke, via the
    # router (whose MAC is the outer destination for all of them)
    dev = hub.underlay_if
    hub.run(["ip", "addr", "add", f"{hub.inner4}/32", "dev", dev])
    hub.ledger.command(["ip", "addr", "del", f"{hub.inner4}/32", "dev", dev], hub.netns)
    hub.run(["ip", "route", "add", OVERLAY, "via", hub.gateway4, "dev", dev, "onlink",
             "realm", str(REALM), "mtu", str(INNER_MTU), "src", hub.inner4])
    hub.ledger.command(["ip", "route", "del", OVERLAY, "dev", dev], hub.netns)
    return where


def kernel_memory_kb() -> int:
    """Slab + per-CPU + vmalloc memory of the whole host (kB, /proc/meminfo)."""
    total = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in MEMINFO_KEYS:
            total += int(rest.split()[0])
    return total


def map_memory(where: Path) -> int:
    """Bytes the kernel accounts to tbtun's maps of one site (bpftool's bytes_memlock)."""
    total = 0
    for name in loader.MAP_NAMES:
        out = proc.run(["bpftool", "-j", "map", "show", "pinned",
                        str(loader.map_path(where, name))], timeout=20).stdout
        total += int(json.loads(out).get("bytes_memlock", 0))
    return total
