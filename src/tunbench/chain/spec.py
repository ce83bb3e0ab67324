"""`[chain]` of an experiment file -> a validated ChainSpec, every problem one line, before
anything is created.

    [chain]
    path = ["router", "fw", "wan", "router"]   # from site a to site b
    [chain.fw]                                 # a named function: its kind and parameters
    kind = "firewall"
    rules = 1000
    [chain.wan]
    kind = "wan"
    rate = "200mbit"

A path entry names a table of [chain] when there is one, else it is a kind with its defaults
(named kind + position: router1, router4). Each function is one namespace, crossed once: a
name twice in the path is a loop and refused. At most one wan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import tunnels
from ..errors import SpecError
from . import REGISTRY, gateway, get, srv6
from .base import Hop

NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
RESERVED = ("a", "b", "c", "path", "direct")
MAX_HOPS = 16


@dataclass(frozen=True)
class ChainSpec:
    hops: tuple[Hop, ...]
    # also measure every case direct (the plain two-site testbed, no function) in the same
    # run, so the report sets the chain against it (`direct = true`; the sdwan preset)
    direct: bool = False

    @property
    def routed_hops(self) -> int:
        """How many hops decrement the TTL of site a's packets on their way to site b: what
        lies between two gateways forwards the tunnel's outer packets, not them."""
        gw = [i for i, h in enumerate(self.hops) if h.kind == "gateway"]
        inside = set(range(gw[0] + 1, gw[1])) if len(gw) == 2 else set()
        # a pair whose first gateway encapsulates on input (srv6: a seg6 route) forwards the
        # sites' packets once: only the second forwards the decapsulated packet (measured:
        # tests/netns/test_chain_srv6_live.py)
        once = int(len(gw) == 2
                   and gateway.style_of(self.hops[gw[0]].params).encapsulates_on_input)
        return sum(1 for i, h in enumerate(self.hops) if get(h.kind).routed
                   and i not in inside) - once

    def gateways(self) -> list[int]:
        """Positions (site a = 0) of the gateway pair; [] when there is none."""
        return [i for i, h in enumerate(self.hops, 1) if h.kind == "gateway"]

    def to_dict(self) -> dict[str, Any]:
        return {"path": [h.name for h in self.hops],
                "functions": {h.name: {"kind": h.kind, **h.params} for h in self.hops},
                **({"direct": True} if self.direct else {})}

    def arrow(self) -> str:
        return " -> ".join(["a", *[h.name for h in self.hops], "b"])


def collect(raw: Any, where: str, problems: list[str], here: bool = True
            ) -> ChainSpec | None:
    """The chain of an experiment (None: no [chain], the plain two-site testbed); problems
    appended one line each (spec.build reports them with the experiment's own). `here`:
    the functions run on this host, so what it lacks (netem, a gateway's kernel ESP) is
    judged here; a chain between hosts has it judged on the hosts (chain/hosts.py)."""
    if raw is None:
        return None
    return _parse(raw, f"{where}: chain", problems, here)


def parse(raw: Any, where: str = "experiment") -> ChainSpec | None:
    """`collect`, raising one SpecError with every problem, one line each."""
    problems: list[str] = []
    chain = collect(raw, where, problems)
    if problems:
        uniq = list(dict.fromkeys(problems))
        raise SpecError(uniq[0] if len(uniq) == 1 else "bad chain:\n  " + "\n  ".join(uniq),
                        "nothing was created; see docs/chains.md")
    return chain


def _parse(raw: Any, where: str, problems: list[str], here: bool = True) -> ChainSpec | None:
    if not isinstance(raw, dict):
        problems.append(f"{where} must be a table with a path (see docs/chains.md)")
        return None
    path = raw.get("path")
    if not isinstance(path, list) or not all(isinstance(x, str) for x in path):
        problems.append(f'{where}.path must be a list of function names or kinds, e.g. '
                        'path = ["router", "firewall", "wan", "router"]')
        return None
    if len(path) > MAX_HOPS:
        problems.append(f"{where}.path has {len(path)} functions (at most {MAX_HOPS})")
        return None
    direct = raw.get("direct", False)
    if not isinstance(direct, bool):
        problems.append(f"{where}.direct {direct!r} must be true or false (true: measure "
                        "every case direct too, without the chain, in the same run)")
        direct = False
    tables = {k: v for k, v in raw.items() if k not in ("path", "direct")}
    for name in sorted(tables):
        if not isinstance(tables[name], dict):
            problems.append(f"{where}.{name} must be a table with a kind")
        elif name not in path:
            problems.append(f"{where}.{name} is defined but not in the path "
                            f"({' -> '.join(['a', *path, 'b'])})")
    seen: dict[str, int] = {}
    refused: set[str] = set()   # gateway tunnels refused: said once for the pair
    hops: list[Hop] = []
    for i, entry in enumerate(path, 1):
        hop = _hop(entry, i, tables, where, problems, refused, here)
        if hop is None:
            continue
        if entry in tables and entry in seen:
            problems.append(f"{where}.path is a loop: {entry!r} appears at positions "
                            f"{seen[entry]} and {i} ({' -> '.join(['a', *path, 'b'])}); each "
                            "function is one namespace crossed once: define a second one "
                            f"(e.g. [chain.{entry}2]) instead")
            continue
        seen[entry] = i
        hops.append(hop)
    names = [h.name for h in hops]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{where}: two functions are named {name!r} (rename one table)")
    _pairs(hops, where, problems, here)
    problems.extend(f"{where}: {p}" for p in srv6.problems(hops))
    wans = [h.name for h in hops if h.kind == "wan"]
    if len(wans) > 1:
        problems.append(f"{where}.path has {len(wans)} WANs ({', '.join(wans)}): a chain is "
                        "site a -> functions -> wan -> functions -> site b, with one WAN")
    return ChainSpec(tuple(hops), direct=bool(direct))


def _hop(entry: str, pos: int, tables: dict[str, Any], where: str,
         problems: list[str], refused: set[str], here: bool = True) -> Hop | None:
    if entry in tables:
        table = tables[entry]
        if not isinstance(table, dict):
            return None
        if not NAME_RE.match(entry) or entry in RESERVED:
            problems.append(f"{where}.path: function name {entry!r} must be 1-8 lowercase letters "
                            "or digits, starting with a letter, and not a, b, c, path or direct")
            return None
        kind, params, name = table.get("kind"), {k: v for k, v in table.items()
                                                 if k != "kind"}, entry
        spot = f"{where}.{entry}"
    else:
        kind, params, name, spot = entry, {}, f"{entry[:6]}{pos}", f"{where}.path[{pos}]"
    if not isinstance(kind, str) or not kind:
        problems.append(f"{spot} has no kind (kind = one of "
                        f"{', '.join(sorted(REGISTRY))})")
        return None
    if kind == "gateway" and not _gateway(params, spot, problems, refused):
        return None
    if kind not in REGISTRY:
        problems.append(f"{spot}: unknown function kind {kind!r} (kinds: "
                        f"{', '.join(sorted(REGISTRY))}; or define [chain.{entry}] with a "
                        "kind)")
        return None
    fn = REGISTRY[kind]
    parsed = fn.parse(params, spot, problems)
    if here:
        problems.extend(f"{spot}: {p}" for p in fn.host_problems(parsed))
    return Hop(name, kind, parsed)


def _gateway(params: dict[str, Any], spot: str, problems: list[str],
             refused: set[str]) -> bool:
    """A gateway names the tunnel kind it terminates: one that cannot be a gateway (a relay,
    a kind without a routed device between two namespaces) is refused as such. True when it
    is fine (its implementation and what the host lacks for it: Gateway.check and
    host_problems)."""
    tunnel = params.get("tunnel", "vxlan")
    known = set(tunnels.registry())
    built = gateway.built()
    if not isinstance(tunnel, str) or tunnel not in built:
        what = ("a tunnel kind that cannot be a gateway" if tunnel in known
                else "not a tunnel kind")
        if repr(tunnel) in refused:   # the pair's other gateway: one line for both
            return False
        refused.add(repr(tunnel))
        problems.append(f"{spot}: tunnel {tunnel!r} is {what} (gateways terminate "
                        f"{', '.join(built)})")
        return False
    return True


def _pairs(hops: list[Hop], where: str, problems: list[str], here: bool = True) -> None:
    """Gateways come in pairs of one tunnel kind, the WAN (if any) between them."""
    gw = [i for i, h in enumerate(hops) if h.kind == "gateway"]
    if not gw:
        return
    if len(gw) != 2:
        problems.append(f"{where}.path has {len(gw)} gateway(s): gateways come in pairs, one "
                        "on each side of the WAN")
        return
    a, b = hops[gw[0]], hops[gw[1]]
    if [a.params.get(k) for k in ("tunnel", "impl", "underlay")] != \
            [b.params.get(k) for k in ("tunnel", "impl", "underlay")]:
        problems.append(f"{where}: gateways {a.name} and {b.name} terminate different tunnels "
                        f"({_tun(a)}, {_tun(b)}): give both the same tunnel, impl and underlay")
    problems.extend(f"{where}: gateways {a.name} and {b.name}: {p}"
                    for p in gateway.pair_problems(a.params, here))
    wan = [i for i, h in enumerate(hops) if h.kind == "wan"]
    if wan and not gw[0] < wan[0] < gw[1]:
        problems.append(f"{where}.path: the WAN must lie between the gateways {a.name} and "
                        f"{b.name}")


def _tun(hop: Hop) -> str:
    impl, under = hop.params.get("impl"), hop.params.get("underlay")
    return f"{hop.params.get('tunnel')}" + (f" {impl}" if impl else "") + \
        (f" underlay {under}" if under else "")
