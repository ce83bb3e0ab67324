"""The mesh testbed here: the mesh's underlay bridge and, of its N sites, the two a case
measures, as the sites a and b of a pair Testbed, so every tunnel driver's pair bring-up
(`up`) runs unchanged between them.

    site i (tb-<rid>-s<i>) --veth-- bridge (tb-<rid>-m, tb<rid>mb) --veth-- site j

A case builds (and its ledger undoes) the bridge namespace and its pair's two sites only,
never the other N - 2: only the pair takes part in the measurement, and the case's setup then
costs the same at every N (it was the whole mesh per case: 135 ms at N = 3, 247 ms at N = 8;
docs/topologies.md). Each site keeps its place in the mesh whichever pair it is in: site i is
tb-<rid>-s<i> with 198.18.0.i/24 and 2001:2::i/64 on its end of the veth (tb<rid>mu<i>),
whose other end (tb<rid>mp<i>) is a port of the bridge in its own namespace, so every pair's
traffic, native or tunnelled, crosses a bridge between its two sites' addresses. Everything
is made inside namespaces that enter the ledger as they are made; nothing is created in the
root namespace. The case's Testbed names its pair's sites "a" (the sender) and "b" (the
receiver), the roles the drivers and workloads know; which mesh sites they are, and their
namespaces, is in `notes["mesh"]`.
"""

from __future__ import annotations

from pathlib import Path

from .. import proc
from ..errors import SpecError
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
    """The bridge and the pair's two sites (the sender as a, the receiver as b); the mesh's
    other sites are not built for this case."""
    if len(set(pair)) != 2 or not set(pair) <= set(spec.site_names()):
        raise SpecError(f"mesh pair {'-'.join(pair)} is not two sites of s1..s{spec.sites}",
                        "measure the pairs the mesh's schedule plans")
    bridge_ns = names.netns_name(run_id, "m")
    netlink.create_netns(bridge_ns)
    ledger.netns(bridge_ns)
    bridge = names.link_name(run_id, "mb")
    lines = [f"link add {bridge} type bridge", f"link set {bridge} mtu {mtu} up",
             "link set lo up"]
    sites: dict[str, Site] = {}
    for name in pair:
        i = int(name[1:])
        ns = names.netns_name(run_id, name)
        netlink.create_netns(ns)
        ledger.netns(ns)
        # one sysctl for all of a site's settings (one process in the namespace, not four)
        proc.run(["sysctl", "-qw", *local.SITE_SYSCTLS], netns=ns, timeout=10)
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
    # site_netns: the namespaces this case built, its pair's two (the whole mesh's before)
    tb.notes["mesh"] = {"sites": spec.sites, "pair": list(pair), "bridge_netns": bridge_ns,
                        "site_netns": {n: s.netns for n, s in sites.items()}}
    return tb
