"""mesh: N sites (namespaces here on one underlay bridge, or hosts over SSH, one of which may
be this host's own network stack: `local`), every listed
pair measured, each pair with every tunnel kind and workload and its own native
(testbed/meshspec.py for the spec and the schedule, testbed/mesh.py for the testbed here,
testbed/meshhosts.py on hosts; docs/topologies.md). The pairs run one after another; on hosts
with `parallel = true` the pairs of one colour of the schedule run at the same time (`steps`,
lanes.py)."""

from __future__ import annotations

from typing import Any

from .. import tunnels
from ..errors import SpecError
from ..remote.transport import SshOptions
from ..testbed import mesh, meshspec
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger
from ..testbed.meshhosts import MeshHosts
from .base import Slot, Topology, TopoNeeds, TopoParam
from .pair import site_kernel, site_tools  # what each site of a pair needs: a mesh's too


class Mesh(Topology):
    name = "mesh"
    summary = ("N sites, every pair measured (one at a time, or on hosts a colour of disjoint "
               "pairs at once); one N x N grid per figure")
    chosen_by = '[testbed] kind = "mesh" (--testbed mesh --sites N)'
    resume_reruns_failed = True   # a failed pair is a hole in the grid: --resume fills it
    params = (
        TopoParam("[testbed] kind", "--testbed", "pair", '"mesh" for this topology'),
        TopoParam("[testbed] sites", "--sites", "none (required here; on hosts: the sN given)",
                  f"sites s1..sN, 3..{meshspec.MAX_SITES}: namespaces here on one bridge"),
        TopoParam("[testbed] pairs", None, "all",
                  '"all" (N(N-1)/2 pairs) or a list like ["s1-s2", "s2-s3"]'),
        TopoParam("[testbed] directions", None, "one",
                  '"both": each pair also measured from its second site to its first'),
        TopoParam("[testbed] parallel", None, "false",
                  "true, sites on hosts only: the disjoint pairs of one colour of the "
                  "schedule at the same time, the next colour when all have ended (refused "
                  "here, and with two sites on one host)"),
        TopoParam("[sites] s1..sN", "--site s1=TARGET --site s2=TARGET ...", "namespaces here",
                  "each site on a host of its own, over SSH (testbed.sites defaults to N); "
                  "at most one TARGET may be 'local': this host's own network stack as one "
                  "site, beside the others on hosts"),
    )

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds(tools=("ip", "ping", "sysctl"),
                         kernel=("CONFIG_NET_NS", "CONFIG_VETH", "CONFIG_BRIDGE"),
                         hosts="none (N namespaces and a bridge namespace here), or N hosts "
                               "over SSH, one of which may be this host ('local'; parallel = "
                               "true: a colour's pairs at once)")

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        """The kinds whose drivers declare mesh_capable (on hosts: not not_on_hosts)."""
        return tunnels.mesh_kinds(on_hosts)

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        return getattr(exp, "mesh", None) is not None

    @classmethod
    def slots(cls, exp: Any) -> tuple[Slot, ...]:
        """Each pair in the order of the schedule (the colours of its edge colouring, one
        after another): every case of a pair, native first, before the next pair, so each
        pair's share of native is measured in the same round."""
        return tuple(Slot(pair=(a, b), colour=slot["colour"])
                     for slot in exp.mesh.schedule() for a, b in slot["pairs"])

    @classmethod
    def parallel(cls, exp: Any) -> bool:
        """Whether a colour's pairs run at the same time: `parallel = true`, sites on hosts
        (the spec refuses parallel here; this guards a spec built around it)."""
        return bool(exp.mesh.parallel and exp.sites)

    @classmethod
    def steps(cls, exp: Any, cases: list[Any]) -> list[list[list[Any]]]:
        """parallel: each colour of a round one step, its pairs the lanes (a pair's two
        directions, directions = "both", in one lane: they share its sites), each lane its
        pair's cases in plan order; else one case after another."""
        if not cls.parallel(exp):
            return super().steps(exp, cases)
        out: list[list[list[Any]]] = []
        key = None
        lanes: dict[frozenset[str], list[Any]] = {}
        for case in cases:   # plan order: a round's colours one after another
            if (case.repeat, case.colour) != key:
                key = (case.repeat, case.colour)
                out.append([])
                lanes = {}
            pair = frozenset(case.pair)
            if pair not in lanes:
                lanes[pair] = []
                out[-1].append(lanes[pair])
            lanes[pair].append(case)
        return out

    @classmethod
    def plan_text(cls, exp: Any) -> list[str]:
        """The schedule, computed up front (testbed/meshspec.py), and which pairs run
        together."""
        spec = exp.mesh
        slots = spec.schedule()
        here = [n for n, s in exp.sites.items() if s.local]
        hosts = f"on hosts and this host ({here[0]})" if here else "on hosts"
        how = (f"{hosts}, the pairs of a colour at the same time (parallel = true), one "
               "colour after another" if cls.parallel(exp)
               else (hosts if exp.sites else "on this host") + " one pair at a time")
        return [f"mesh: {spec.sites} sites, {len(spec.pairs)} pair(s), {len(slots)} "
                f"colour(s) of disjoint pairs; {how}"] + [
            f"  colour {slot['colour']}"
            + (" (together)" if cls.parallel(exp) and len(_lanes(slot)) > 1 else "") + ": "
            + ", ".join(f"{a}->{b}" if spec.directions == "both" else f"{a}-{b}"
                        for a, b in slot["pairs"])
            for slot in slots] + ([f"  sites: {where(exp.sites)}"] if exp.sites else [])

    @classmethod
    def open(cls, exp: Any, ssh: SshOptions) -> MeshHosts:
        """s1..sN on hosts: every host and every pair of the schedule checked before any
        change (testbed/meshhosts.py)."""
        hosts = MeshHosts(exp.sites, ssh)
        hosts.open([(a, b) for slot in exp.mesh.schedule() for a, b in slot["pairs"]],
                   mtus=exp.all_mtus(), tools=site_tools(exp), kernel=site_kernel(exp))
        return hosts

    @classmethod
    def check(cls, exp: Any, case: Any, hosts: Any = None) -> None:
        """N within 3..MAX_SITES, the case's pair two of its sites, MTU 1500, and the hosts
        opened as a mesh's when its sites are on hosts (none when they are here)."""
        spec = exp.mesh
        if not 3 <= spec.sites <= meshspec.MAX_SITES:
            raise SpecError(f"a mesh of {spec.sites} sites cannot be built",
                            f"give --sites 3..{meshspec.MAX_SITES}")
        names = spec.site_names()
        pair = tuple(case.pair or ())
        if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(names):
            raise SpecError(f"mesh pair {'-'.join(map(str, pair)) or 'none'} is not two "
                            f"sites of s1..s{spec.sites}",
                            "measure the pairs the mesh's schedule plans")
        if case.mtu != mesh.MTU:
            raise SpecError(f"the mesh's underlay MTU is {mesh.MTU}, not {case.mtu}",
                            "leave --mtu / experiment.mtus out")
        if exp.sites and not isinstance(hosts, MeshHosts):
            raise SpecError("the mesh's sites were not opened as a mesh's hosts",
                            "give [sites] s1..sN: runner.open_topology opens them so")
        if not exp.sites and hosts is not None:
            raise SpecError("a mesh on this host's namespaces takes no hosts opened over SSH",
                            "give [sites] s1..sN to put its sites on hosts")

    @classmethod
    def sections(cls, exp: Any, case: Any) -> dict[str, Any]:
        """The case's pair and its slot in the schedule; `parallel`: the campaign ran a
        colour's pairs at the same time, and then `alongside`: the other pairs of its colour,
        which ran while it did (none for a colour of one pair). Its start and end are the
        case's `started` and `ended`."""
        if case.pair is None:
            return {}
        parallel = cls.parallel(exp)
        slot = next((s for s in exp.mesh.schedule() if s["colour"] == case.colour), None)
        others = [] if slot is None or not parallel else \
            ["-".join(sorted(p, key=lambda n: int(n[1:]))) for p in _lanes(slot)
             if p != frozenset(case.pair)]
        return {"mesh": {"pair": list(case.pair), "colour": case.colour,
                         "parallel": parallel, "sites": exp.mesh.sites,
                         **({"alongside": others} if parallel else {})}}

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger,
              hosts: Any = None) -> Testbed:
        """Here: the mesh's bridge and the case's pair only (its two sites as a and b; the
        other sites are not built for it, testbed/mesh.py). On hosts: the pair testbed
        between the pair's two hosts, the others untouched (testbed/meshhosts.py)."""
        cls.check(exp, case, hosts)
        if hosts is not None:
            built: Testbed = hosts.build(run_id, ledger, case.pair, mtu=case.mtu)
            return built
        return mesh.build(run_id, ledger, exp.mesh, case.pair, mtu=case.mtu)


def where(sites: dict[str, Any]) -> str:
    """Where each site of a mesh on hosts is: `s1 local (this host), s2 root@h2, ...`."""
    return ", ".join(f"{n} {'local (this host)' if s.local else s.target}"
                     for n, s in sites.items())


def _lanes(slot: dict[str, Any]) -> list[frozenset[str]]:
    """The undirected pairs of a colour of the schedule, in its order (a pair's two
    directions are one lane)."""
    return list(dict.fromkeys(frozenset(p) for p in slot["pairs"]))


TOPOLOGY = Mesh
