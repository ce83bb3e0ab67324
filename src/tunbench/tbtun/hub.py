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

On hosts (testbed/hubhosts.py) the same two builds run on the hub host through its agent, with
two differences: the links are journaled there before the `ip -batch` that makes them
(hubhosts.own_links), and tbtun gets one /32 route per spoke via the hub's next hop towards
it (spokes on a shared link have MACs of their own; the namespace testbed's router gives one
next hop for all, hence one route), its inner address on a tbtun-owned empty bridge so that
deleting that one journaled link removes the address and every route using it.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..testbed import names
from ..testbed.base import Site
from ..testbed.hub import HUB_MAC, VXLAN_PORT, Hub, batch, own_links
from ..testbed.remote import RemoteSite
from ..tunnels._tbtun import REALM
from . import loader, maps

OVERLAY = "198.19.0.0/16"
MEMINFO_KEYS = ("Slab", "Percpu", "VmallocUsed")


def kernel_vxlan(hub: Hub) -> list[str]:
    """N kernel VXLAN devices on the hub (one `ip -batch`); returns their names."""
    lines, devs = [], [names.link_name(hub.run_id, f"v{s.index}") for s in hub.spokes]
    own_links(hub.site, hub.ledger, devs)
    for s, dev in zip(hub.spokes, devs, strict=True):
        lines += [f"link add {dev} address {HUB_MAC} type vxlan id {s.index} local "
                  f"{hub.underlay4} remote {s.underlay4} dstport {VXLAN_PORT} dev "
                  f"{hub.underlay_if} nolearning",
                  f"link set {dev} addrgenmode none",
                  f"link set {dev} mtu {hub.inner_mtu} up",
                  f"addr add {hub.inner4}/32 dev {dev}",
                  f"route add {s.inner4}/32 dev {dev} src {hub.inner4}",
                  f"neigh add {s.inner4} lladdr {s.mac} dev {dev} nud permanent"]
    batch(hub.site, lines)
    return devs


def spoke_rule(hub: Hub, index: int) -> maps.Rule:
    s = hub.spokes[index - 1]
    return maps.Rule(f"{s.inner4}/32", s.underlay4, s.index, "vxlan", VXLAN_PORT, s.mac)


def ship(hub: Hub) -> str | None:
    """Hosts: the compiled object copied into the hub's case directory (before the setup is
    timed: the namespace hub reads it in place); its path there. None: in place."""
    if not isinstance(hub.site, RemoteSite):
        return None
    obj = f"{hub.site.workdir}/{loader.object_path().name}"
    hub.site.write_file(hub.ledger, Path(obj), loader.object_path().read_bytes())
    return obj


def tbtun(hub: Hub, decap: str = "tc", obj: str | None = None, attach: str = "tc") -> Path:
    """One tbtun instance on the hub's underlay device with one rule per spoke; returns its
    pin directory (for `tunnel-rules --site`). `obj`: the object on the hub's host (ship);
    `attach`: tc, tcx or auto (tcx where the hub's kernel has it)."""
    site = hub.site
    how = loader.attach_method(attach, site.run(["uname", "-r"], timeout=10).stdout.strip(),
                               "tbtun on the hub")     # before anything is made
    if hub.on_hosts and obj is None:
        obj = ship(hub)
    where = loader.load(hub.ledger, hub.run_id, "hub", site, obj)
    loader.configure(where, local4=hub.underlay4, realm=REALM, mtu=hub.underlay_mtu,
                     vxlan_port=VXLAN_PORT, geneve_port=maps.DEFAULT_PORTS["geneve"],
                     site=site)
    loader.add_rules(where, [spoke_rule(hub, s.index) for s in hub.spokes], site)
    loader.attach(hub.ledger, hub.netns, hub.underlay_if, where, decap, site, how)
    if hub.on_hosts:
        _routes_per_spoke(hub)
        return where
    # the inner address on the underlay device; ONE realm route for every spoke, via the
    # router (whose MAC is the outer destination for all of them)
    dev = hub.underlay_if
    hub.run(["ip", "addr", "add", f"{hub.inner4}/32", "dev", dev])
    hub.ledger.command(["ip", "addr", "del", f"{hub.inner4}/32", "dev", dev], hub.netns)
    hub.run(["ip", "route", "add", OVERLAY, "via", hub.gateway4, "dev", dev, "onlink",
             "realm", str(REALM), "mtu", str(hub.inner_mtu), "src", hub.inner4])
    hub.ledger.command(["ip", "route", "del", OVERLAY, "dev", dev], hub.netns)
    return where


def _routes_per_spoke(hub: Hub) -> None:
    """Hosts: the hub's inner address on an empty bridge of ours (journaled; the kernel drops
    routes whose source address goes with it) and one realm route per spoke via the hub's
    next hop towards it, in one `ip -batch`."""
    holder = names.link_name(hub.run_id, "i")
    own_links(hub.site, hub.ledger, [holder])
    dev = hub.underlay_if
    batch(hub.site, [f"link add {holder} type bridge", f"link set {holder} addrgenmode none",
                     f"link set {holder} up", f"addr add {hub.inner4}/32 dev {holder}",
                     *(f"route add {s.inner4}/32 via {s.nexthop4} dev {dev} onlink realm "
                       f"{REALM} mtu {hub.inner_mtu} src {hub.inner4}" for s in hub.spokes)])


def kernel_memory_kb(site: Site | None = None) -> int:
    """Slab + per-CPU + vmalloc memory of the whole host (kB, /proc/meminfo) of `site` (this
    host by default)."""
    total = 0
    text = site.read_file("/proc/meminfo").decode() if site is not None and site.remote \
        else Path("/proc/meminfo").read_text()
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in MEMINFO_KEYS:
            total += int(rest.split()[0])
    return total


def map_memory(where: Path, site: Site | None = None) -> int:
    """Bytes the kernel accounts to tbtun's maps of one site (bpftool's bytes_memlock), on the
    host of `site` (this host by default)."""
    site = site or loader.here()
    total = 0
    for name in loader.MAP_NAMES:
        out = site.run_host(["bpftool", "-j", "map", "show", "pinned",
                             str(loader.map_path(where, name))], timeout=20).stdout
        total += int(json.loads(out).get("bytes_memlock", 0))
    return total
