"""The mesh testbed here: N site namespaces on one underlay bridge, and two of them, the pair
a case measures, as the sites a and b of a pair Testbed, so every tunnel driver's pair
bring-up (`up`) runs unchanged between them.

    site i (tb-<rid>-s<i>) --veth-- bridge (tb-<rid>-m, tb<rid>mb) --veth-- site j ...

Underlay: site i has 198.18.0.i/24 and 2001:2::i/64 on its end of the veth (tb<rid>mu<i>);
the other end (tb<rid>mp<i>) is a port of the bridge in its own namespace, so every pair's
traffic, native or tunnelled, crosses the same bridge. Everything is made inside namespaces
that enter the ledger as they are made; nothing is created in the root namespace. The
case's Testbed names its pair's sites "a" (the sender) and "b" (the receiver), the roles the
drivers and workloads know; which mesh sites they are is in `notes["mesh"]`.
"""

from __future__ import annotations

from pathlib import Path

from .. import proc
from . import local, names, netlink
from .base import Site, Testbed
from .ledger import Ledger
from .meshspec import MeshSpec

MTU = 1500


def addresses(i: int) -> tuple[str, str]:
    """Site i's (1..N) underlay IPv4 and IPv6 addresses."""
    return f"198.18.0.{i}", f"2001:2::{i:x}"


def _batch(netns: str, lines: list[str]) -> None:
    proc.run(["ip", "-batch", "-"], netns=netns, input="\n".join(lines) + "\n", timeout=60)


def build(run_id: str, ledger: Ledger, spec: MeshSpec, pair: tuple[str, str], *,
          mtu: int = MTU, workdir: Path | None = None) -> Testbed:
    """The whole mesh (bridge + every site), the case's pair as sites a and b."""
    bridge_ns = names.netns_name(run_id, "m")
    netlink.create_netns(bridge_ns)
    ledger.netns(bridge_ns)
    bridge = names.link_name(run_id, "mb")
    lines = [f"link add {bridge} type bridge", f"link set {bridge} mtu {mtu} up",
             "link set lo up"]
    sites: dict[str, Site] = {}
    for name in spec.site_names():
        i = int(name[1:])
        ns = names.netns_name(run_id, name)
        netlink.create_netns(ns)
        ledger.netns(ns)
        for setting in local.SITE_SYSCTLS:
            proc.run(["sysctl", "-qw", setting], netns=ns, timeout=10)
        port, end = names.link_name(run_id, f"mp{i}"), names.link_name(run_id, f"mu{i}")
        lines += [f"link add {port} mtu {mtu} type veth peer name {end} netns {ns}",
                  f"link set {port} master {bridge} up"]
        a4, a6 = addresses(i)
        sites[name] = Site(name, ns, end, a4, a6)
    _batch(bridge_ns, lines)
    for s in sites.values():
        _batch(str(s.netns), ["link set lo up", f"link set {s.underlay_if} mtu {mtu}",
                              f"addr add {s.underlay4}/24 dev {s.underlay_if}",
                              f"addr add {s.underlay6}/64 dev {s.underlay_if} nodad",
                              f"link set {s.underlay_if} up"])
    sa, sb = sites[pair[0]], sites[pair[1]]
    a = Site("a", sa.netns, sa.underlay_if, sa.underlay4, sa.underlay6)
    b = Site("b", sb.netns, sb.underlay_if, sb.underlay4, sb.underlay6)
    wd = local.make_workdir(run_id, ledger, workdir)
    tb = Testbed("local-mesh", run_id, a, b, mtu, ledger, wd)
    tb.notes["mesh"] = {"sites": spec.sites, "pair": list(pair), "bridge_netns": bridge_ns,
                        "site_netns": {n: s.netns for n, s in sites.items()}}
    return tb
