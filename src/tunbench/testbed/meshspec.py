"""`[testbed] kind = "mesh"` of an experiment (and `--testbed mesh --sites N`) -> a validated
MeshSpec, and its schedule: which pairs of sites are measured, in which order, every problem
one line, before anything is created.

    [testbed]
    kind = "mesh"
    sites = 4                    # N >= 3 sites s1..sN: namespaces here on one underlay bridge
                                 # (or [sites] s1 = "root@h1", ..., sN: one host each over SSH;
                                 # one of them may be "local": this host's own network stack)
    pairs = "all"                # N(N-1)/2 pairs, or a list like ["s1-s2", "s2-s3"]
    directions = "one"           # "both": each pair measured s1 -> s2 and s2 -> s1
    parallel = false             # true, sites on hosts only: a colour's pairs at once

The schedule is computed up front: an edge colouring of the pair graph (every pair: the
round-robin's N-1 or N colours; a list: Misra and Gries, at most max degree + 1 colours),
each colour a set of disjoint pairs, so a site takes part in at most one measurement at a time.
With every site on this host (namespaces), or `parallel = false`, the colours and the pairs
within them run one after another. With the sites on hosts and `parallel = true`, the pairs of
one colour run at the same time (each pair's cases in their usual order, native first; one
pair per host, since no two sites may share a host target) and the next colour starts when
every pair of this one has finished (runner._run_lanes). Refused, one line each: parallel on
this host's namespaces (one host: the pairs would contend for its CPUs), and parallel with two
sites on one host target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .topology import SiteSpec, parse_host_sites

KEYS = ("kind", "sites", "pairs", "directions", "parallel")
FLAGS = {"kind": "--testbed", "sites": "--sites"}
MAX_SITES = 32          # underlay 198.18.0.0/24, one /32 per site; N(N-1)/2 pairs
DIRECTIONS = ("one", "both")
SITE_RE = re.compile(r"s([1-9][0-9]?)")

Pair = tuple[str, str]


@dataclass(frozen=True)
class MeshSpec:
    sites: int
    pairs: tuple[Pair, ...]          # undirected, (lower, higher) site, in the order given
    directions: str = "one"
    explicit: bool = False           # pairs given as a list (else "all")
    parallel: bool = False           # a colour's pairs at once (sites on hosts only)

    def site_names(self) -> tuple[str, ...]:
        return tuple(f"s{i}" for i in range(1, self.sites + 1))

    def colours(self) -> list[list[Pair]]:
        if not self.explicit:   # every pair: the round-robin's N-1 (N even) or N colours
            return round_robin(self.site_names())
        return colour_edges(list(self.pairs))

    def schedule(self) -> list[dict[str, Any]]:
        """The measurement slots in the order they run: each a colour and the (directed)
        pairs measured in it; `parallel`: its pairs run at the same time (two or more
        disjoint pairs and `parallel = true`), else one after another. With directions =
        "both" a pair's two directions share its sites, so they stay one after another
        within the pair's own turn."""
        out = []
        for c, pairs in enumerate(self.colours()):
            directed: list[Pair] = []
            for a, b in pairs:
                directed.append((a, b))
                if self.directions == "both":
                    directed.append((b, a))
            out.append({"colour": c, "pairs": [list(p) for p in directed],
                        "parallel": self.parallel and len(pairs) > 1})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "mesh", "sites": self.sites,
                "pairs": [f"{a}-{b}" for a, b in self.pairs] if self.explicit else "all",
                "directions": self.directions, **({"parallel": True} if self.parallel else {})}


def is_mesh(raw: Any) -> bool:
    return isinstance(raw, dict) and raw.get("kind") == "mesh"


def _index(name: str) -> int:
    return int(name[1:])


def parse_sites(raw: Any, where: str, problems: list[str]) -> dict[str, SiteSpec]:
    """`[sites]` of a mesh on hosts: s1..sN, each a host of its own over SSH (targets and
    tables as docs/remote.md; IPv4 underlay), at most one of them 'local': this host's own
    network stack, as a pair's `a = "local"`. Empty when none is given or when refused."""
    out = parse_host_sites(raw, where, problems, testbed="mesh",
                           example='{ s1 = "root@h1", s2 = "root@h2", s3 = "root@h3" }',
                           named=lambda n: SITE_RE.fullmatch(n) is not None,
                           naming="name them s1..sN, one host each: --site s1=USER@HOST "
                                  "--site s2=USER@HOST ...",
                           order=_index, cpus=False, local=True)
    if not out:
        return {}
    if all(s.local for s in out.values()):   # one site here, the others namespaces here?
        name = next(iter(out))
        problems.append(f"{where}: sites.{name} is 'local' but no site is on a host: a "
                        "mesh's site 'local' is this host's own network stack beside sites "
                        "on hosts (give the other sites hosts of their own: --site "
                        "s2=USER@HOST ...), or leave [sites] / --site out for the mesh on "
                        "this host's namespaces")
        return {}
    indexes = sorted(_index(n) for n in out)
    if indexes != list(range(1, len(indexes) + 1)):
        gap = min(set(range(1, indexes[-1] + 1)) - set(indexes))
        problems.append(f"{where}: mesh sites must be s1..sN without gaps: s{gap} is missing "
                        f"(given: {', '.join(f's{i}' for i in indexes)})")
        return {}
    return out


def collect(raw: dict[str, Any], where: str, problems: list[str],
            flags: frozenset[str] = frozenset(), hosts: int = 0,
            hosts_refused: bool = False,
            targets: dict[str, str] | None = None) -> MeshSpec | None:
    """The `[testbed]` table of a mesh (is_mesh(raw)); None (and problems) when it is bad.
    `flags`: the keys set by command-line flags, named as those flags; `hosts`: the number
    of sites given on hosts ([sites] s1..sN), which `sites` then defaults to and must be;
    `hosts_refused`: [sites] was given but refused (its problem named: no second one here);
    `targets`: each site's SSH target (parallel refuses two sites on one)."""
    def spot(key: str) -> str:
        return FLAGS[key] if key in flags else f"{where}: testbed.{key}"

    count = len(problems)
    for key in sorted(set(raw) - set(KEYS)):
        hint = " (--spokes is the hub's; a mesh has --sites N)" if key == "spokes" else ""
        problems.append(f"{where}: unknown field testbed.{key} for a mesh (known: "
                        f"{', '.join(KEYS)}){hint}")
    n = raw.get("sites", hosts or None)
    if hosts and n != hosts and not isinstance(n, bool) and isinstance(n, int):
        problems.append(f"{spot('sites')} is {n} but [sites] gives {hosts} host(s) "
                        f"(s1..s{hosts}): give one host per site, or leave testbed.sites out")
        return None
    if n is None and hosts_refused:
        return None
    if n is None:
        problems.append(f"{spot('sites')} is missing: a mesh needs its number of sites "
                        "(--sites N or [testbed] sites = N, N >= 3)")
        return None
    if isinstance(n, bool) or not isinstance(n, int) or not 3 <= n <= MAX_SITES:
        problems.append(f"{spot('sites')} must be an integer from 3 to {MAX_SITES}, got "
                        f"{n!r} (a mesh of 2 sites is the pair testbed: leave --testbed out)")
        return None
    parallel = raw.get("parallel", False)
    if not isinstance(parallel, bool):
        problems.append(f"{spot('parallel')} must be true or false, got {parallel!r}")
    elif parallel:
        problems += parallel_problems(spot("parallel"), hosts, hosts_refused, targets or {})
    directions = raw.get("directions", "one")
    if directions not in DIRECTIONS:
        problems.append(f"{spot('directions')} must be \"one\" or \"both\", got "
                        f"{directions!r}")
    names = [f"s{i}" for i in range(1, n + 1)]
    given = raw.get("pairs", "all")
    pairs: list[Pair] = []
    if given == "all":
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    elif isinstance(given, list) and given:
        seen: dict[Pair, str] = {}
        for item in given:
            m = re.fullmatch(r"\s*(\w+)\s*-\s*(\w+)\s*", item) if isinstance(item, str) else None
            if m is None:
                problems.append(f"{spot('pairs')}: {item!r} is not a pair like \"s1-s2\"")
                continue
            a, b = m.group(1), m.group(2)
            bad = [x for x in (a, b) if x not in names]
            if bad:
                problems.append(f"{spot('pairs')}: {item!r} names unknown site(s) "
                                f"{', '.join(bad)} (this mesh has s1..s{n}: raise --sites or "
                                "fix the pair)")
                continue
            if a == b:
                problems.append(f"{spot('pairs')}: {item!r} pairs a site with itself (name "
                                "two different sites)")
                continue
            pair = (a, b) if _index(a) < _index(b) else (b, a)
            if pair in seen:
                problems.append(f"{spot('pairs')}: {item!r} is the same pair as "
                                f"{seen[pair]!r} (list each pair once; directions = \"both\" "
                                "measures both ways)")
                continue
            seen[pair] = item
            pairs.append(pair)
    else:
        problems.append(f"{spot('pairs')} must be \"all\" or a non-empty list like "
                        f"[\"s1-s2\", \"s2-s3\"], got {given!r}")
    if len(problems) > count:
        return None
    return MeshSpec(n, tuple(pairs), str(directions), explicit=given != "all",
                    parallel=parallel is True)


def parallel_problems(spot: str, hosts: int, hosts_refused: bool,
                      targets: dict[str, str]) -> list[str]:
    """Why `parallel = true` cannot be kept, one line each (none: it can): the sites must be
    on hosts, each on a host target of its own (one host running two of a colour's pairs
    would put a site's machine in two measurements at once)."""
    if hosts_refused:
        return []   # [sites] refused: its problem is named already
    if not hosts:
        return [f"{spot} = true needs the sites on hosts: on this host's namespaces every "
                "pair shares one host's CPUs, so pairs run one after another (leave parallel "
                "out, or give [sites] s1..sN / --site s1=USER@HOST ... one host each)"]
    seen: dict[str, str] = {}
    for name, target in targets.items():
        key = target.strip().lower()
        if key in seen:
            return [f"{spot} = true: sites {seen[key]} and {name} are both on {target}, so "
                    "two pairs of one colour would run on one host at once (give each site a "
                    "host of its own, or leave parallel out)"]
        seen[key] = name
    return []


def conflicts(where: str, *, kinds: list[str], mesh_kinds: tuple[str, ...],
              mtus: list[int], shaped: bool, chain: bool, offloads: list[str]) -> list[str]:
    """What a mesh cannot run, one line each. `mesh_kinds`: the kinds whose drivers declare
    `mesh_capable` (tunnels.mesh_kinds(); on hosts without those that cannot run there)."""
    out = []
    bad = [k for k in kinds if k not in mesh_kinds]
    if bad:
        out.append(f"{where}: tunnel kind(s) {', '.join(bad)} are not mesh-capable (the mesh "
                   f"runs {', '.join(mesh_kinds)}; leave the others out or use the pair "
                   "testbed)")
    if any(m != 1500 for m in mtus):
        out.append(f"{where}: the mesh's underlay MTU is 1500 (leave --mtu / "
                   "experiment.mtus out)")
    if shaped:
        out.append(f"{where}: the mesh has no shaping or WAN emulation (leave --rate, "
                   "--delay, --jitter, --loss, --netem-rate out)")
    if chain:
        out.append(f"{where}: the mesh has no [chain] (leave it out)")
    if any(o != "default" for o in offloads):
        out.append(f"{where}: the mesh runs the default offloads only (leave --offloads / "
                   "[[offloads]] out)")
    return out


def round_robin(sites: tuple[str, ...]) -> list[list[Pair]]:
    """Every pair of `sites` in rounds of disjoint pairs (the circle method): N-1 colours for
    N even, N for N odd (a site sits each round out), the fewest possible for a complete
    graph. Each pair as (lower, higher) site."""
    ring: list[str | None] = [*sites, None] if len(sites) % 2 else list(sites)
    n = len(ring)
    out: list[list[Pair]] = []
    for _ in range(n - 1):
        group = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is not None and b is not None:
                group.append((a, b) if _index(a) < _index(b) else (b, a))
        out.append(sorted(group, key=lambda p: (_index(p[0]), _index(p[1]))))
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def colour_edges(edges: list[Pair]) -> list[list[Pair]]:
    """A proper edge colouring of the simple graph `edges` with at most max degree + 1
    colours (Misra and Gries, 1992): each colour a matching (no site twice), every edge in
    exactly one. Returned as the edges of each colour, colour 0 first, each in the order the
    edges were given."""
    nbrs: dict[str, set[str]] = {}
    for a, b in edges:
        nbrs.setdefault(a, set()).add(b)
        nbrs.setdefault(b, set()).add(a)
    if not edges:
        return []
    palette = range(max(len(v) for v in nbrs.values()) + 1)
    col: dict[frozenset[str], int] = {}

    def colour(u: str, v: str) -> int | None:
        return col.get(frozenset((u, v)))

    def free(x: str, c: int) -> bool:
        return all(colour(x, y) != c for y in nbrs[x])

    def a_free(x: str) -> int:
        return next(c for c in palette if free(x, c))

    for u, v in edges:
        fan = [v]
        while True:
            last = fan[-1]
            nxt = next((x for x in sorted(nbrs[u]) if x not in fan
                        and (cx := colour(u, x)) is not None and free(last, cx)), None)
            if nxt is None:
                break
            fan.append(nxt)
        c, d = a_free(u), a_free(fan[-1])
        # invert the cd-path from u (c is free on u, so it starts with a d edge)
        path: list[Pair] = []
        x, want = u, d
        while True:
            y = next((y for y in nbrs[x] if colour(x, y) == want
                      and frozenset((x, y)) not in {frozenset(e) for e in path}), None)
            if y is None:
                break
            path.append((x, y))
            x, want = y, (c if want == d else d)
        for e in path:
            col[frozenset(e)] = c if col[frozenset(e)] == d else d
        # the first prefix of the fan that is still a fan and ends where d is free
        w = len(fan) - 1
        for j in range(len(fan)):
            still = all((cj := colour(u, fan[i])) is not None and free(fan[i - 1], cj)
                        for i in range(1, j + 1))
            if not still:
                break
            if free(fan[j], d):
                w = j
                break
        for i in range(w):      # rotate: (u, fan[i]) takes the colour of (u, fan[i+1])
            nxt_c = colour(u, fan[i + 1])
            assert nxt_c is not None
            col[frozenset((u, fan[i]))] = nxt_c
        col[frozenset((u, fan[w]))] = d
    out: list[list[Pair]] = [[] for _ in palette]
    for a, b in edges:
        out[col[frozenset((a, b))]].append((a, b))
    return [group for group in out if group]
