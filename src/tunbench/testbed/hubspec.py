"""`[testbed]` of an experiment (and `--testbed` / `--spokes`) -> a validated HubSpec, and
the hub's sites on real hosts (`[sites]` / `--site`), every problem one line, before anything
is created.

    [testbed]
    kind = "hub"      # "pair" (default): the two-namespace testbed; "hub": one hub, N spokes
    spokes = 10       # hub only: 1..1000 (namespaces here), or the number of spoke sites

    [sites]           # optional: the hub and each spoke on a host of its own, over SSH
    hub = "root@hub1"
    s1 = "root@edge1"
    s2 = { target = "root@edge2", underlay4 = "10.0.0.12" }

On hosts the sites are named by convention: `hub` and `s1`..`sN` without gaps, one host each
(`--site hub=root@hub1 --site s1=root@edge1 ...` on the command line); each entry is a target
or a table like a pair testbed's site (docs/remote.md). testbed.spokes, when given, must be N.

Why the checks are this strict: a hub case measures one thing, the hub's side of N tunnels
(setup time, kernel memory, TCP to one spoke and to all at once; hubcase.py), on a testbed
whose spokes run the kernel's VXLAN device (testbed/hub.py). Only the kinds with a hub
variant (drivers declaring `hub_capable`: tunnels.hub_kinds(), given to `conflicts` by spec.py),
the stream workload and the testbed's own 1500-byte underlay make sense
there; everything else would be silently ignored, so it is refused instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .hub import MAX_SPOKES
from .topology import SiteSpec, parse_host_sites

KINDS = ("pair", "hub", "mesh")   # mesh: testbed/meshspec.py
KEYS = ("kind", "spokes")
DEFAULT_SPOKES = 10
# The tunnel kinds with a hub variant and the parameters each honours are the drivers'
# declarations (hub_capable, hub_params; tunnels/base.py): spec.py passes them in, as this
# layer is below the drivers. The others are the hub's (VNI = spoke index, the IANA port, one
# rule per spoke), so a value given for them would be silently ignored.
HUB_WORKLOADS = ("stream",)
HUB_MTU = 1500
# spokes on hosts: one SSH connection and agent per host for the whole campaign, and the
# all-spokes measurement runs at most hubcase.ALL_MAX streams
MAX_HOST_SPOKES = 100
SPOKE_RE = re.compile(r"s([1-9][0-9]{0,2})")


@dataclass(frozen=True)
class HubSpec:
    spokes: int = DEFAULT_SPOKES

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "hub", "spokes": self.spokes}


FLAGS = {"kind": "--testbed", "spokes": "--spokes"}


def is_hub(raw: Any) -> bool:
    """Whether a `[testbed]` table asks for the hub (its sites are then named hub, s1..)."""
    return isinstance(raw, dict) and raw.get("kind") == "hub"


def parse_sites(raw: Any, where: str, problems: list[str],
                spokes: Any = None, spokes_flag: bool = False) -> dict[str, SiteSpec]:
    """`[sites]` of a hub testbed: `hub` and `s1`..`sN`, each on a host of its own (targets
    and tables as docs/remote.md; IPv4 underlay). `spokes`: testbed.spokes as given (None:
    left out), which must then be N (`spokes_flag`: it came from --spokes). Empty when
    nothing usable was given."""
    count = len(problems)
    out = parse_host_sites(raw, where, problems, testbed="hub testbed",
                           example='{ hub = "root@hub1", s1 = "root@edge1" }',
                           named=lambda n: n == "hub" or SPOKE_RE.fullmatch(n) is not None,
                           naming="name them hub and s1..sN, one host each: --site "
                                  "hub=USER@HOST --site s1=USER@HOST ...")
    if not out:
        return {}
    if "hub" not in out:
        problems.append(f"{where}: site hub is missing (give --site hub=USER@HOST, or hub = "
                        "\"USER@HOST\" in [sites])")
    indexes = sorted(int(n[1:]) for n in out if n != "hub")
    if not indexes:
        problems.append(f"{where}: no spoke sites (give s1=USER@HOST, s2=USER@HOST ... in "
                        "[sites] or --site s1=USER@HOST)")
    elif indexes != list(range(1, len(indexes) + 1)):
        gap = min(set(range(1, indexes[-1] + 1)) - set(indexes))
        problems.append(f"{where}: spoke sites must be s1..sN without gaps: s{gap} is missing "
                        f"(given: {', '.join(f's{i}' for i in indexes)})")
    elif len(indexes) > MAX_HOST_SPOKES:
        problems.append(f"{where}: {len(indexes)} spoke sites: at most {MAX_HOST_SPOKES} on "
                        "hosts (one SSH connection and agent per host)")
    seen: dict[str, str] = {}
    for name in ["hub", *(f"s{i}" for i in indexes)]:
        if name in out:
            other = seen.setdefault(out[name].target, name)
            if other != name:
                problems.append(f"{where}: sites.{name} and sites.{other} are the same host "
                                f"{out[name].target!r}: one site per host")
    if (len(problems) == count and isinstance(spokes, int) and not isinstance(spokes, bool)
            and 1 <= spokes <= MAX_SPOKES and spokes != len(indexes)):
        given = ", ".join(f"s{i}" for i in indexes)
        key = "--spokes" if spokes_flag else f"{where}: testbed.spokes"
        problems.append(f"{key} is {spokes} but {len(indexes)} spoke site(s) are given "
                        f"({given}): one host per spoke (name s1..s{spokes}, or leave "
                        f"{key.split(': ')[-1]} out)")
    return out if len(problems) == count else {}


def collect(raw: Any, where: str, problems: list[str],
            flags: frozenset[str] = frozenset(), default: int = DEFAULT_SPOKES,
            others: dict[str, dict[str, str]] | None = None) -> HubSpec | None:
    """The `[testbed]` table (None: the default pair testbed). `flags`: the keys set by
    command-line flags, named as those flags; `others`: the other testbed kinds' keys and
    their flags (spec.TESTBED_FLAGS), so such a flag without its kind is named as needing it."""
    def spot(key: str) -> str:
        return FLAGS[key] if key in flags else f"{where}: testbed.{key}"

    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.append(f"{where}: [testbed] must be a table like {{ kind = \"hub\", "
                        "spokes = 10 }")
        return None
    for key in sorted(set(raw) - set(KEYS)):
        owner = next((k for k, f in (others or {}).items() if key in f), None)
        if owner and key in flags:   # e.g. the mesh's --sites without --testbed mesh
            flag = (others or {})[owner][key]
            problems.append(f"{flag} needs the {owner} testbed (--testbed {owner} {flag} N)")
            continue
        problems.append(f"{where}: unknown field testbed.{key} (known: {', '.join(KEYS)})")
    kind = raw.get("kind", "pair")
    if kind not in KINDS:
        problems.append(f"{spot('kind')} {kind!r} is not one of {', '.join(KINDS)}")
        return None
    spokes = raw.get("spokes")
    if kind == "pair":
        if spokes is not None:
            problems.append(f"{spot('spokes')} needs the hub testbed (--testbed hub "
                            "--spokes N, or [testbed] kind = \"hub\")")
        return None
    if spokes is None:
        spokes = default
    if isinstance(spokes, bool) or not isinstance(spokes, int) or not 1 <= spokes <= MAX_SPOKES:
        problems.append(f"{spot('spokes')} must be an integer from 1 to {MAX_SPOKES}, "
                        f"got {spokes!r} (one hub and N spokes; the underlay /30s fit "
                        "198.18.0.0/16)")
        return None
    return HubSpec(spokes)


def ignored_params(honoured: tuple[str, ...], given: dict[str, Any],
                   defaults: dict[str, Any]) -> list[str]:
    """Parameters set away from their default that a hub variant does not use (`honoured`:
    the ones it does, its driver's hub_params)."""
    return [k for k, v in given.items() if k not in honoured and defaults.get(k) != v]


def conflicts(where: str, *, kinds: list[str], hub_kinds: tuple[str, ...],
              workloads: list[str], mtus: list[int], shaped: bool, chain: bool,
              offloads: list[str], hosts: bool = False,
              params: dict[str, list[str]] | None = None) -> list[str]:
    """What a hub testbed cannot run, one line each. `hub_kinds`: the kinds with a hub
    variant (tunnels.hub_kinds()). `params`: tunnel label -> parameters given that its hub
    variant would ignore (ignored_params). `hosts`: the hub's sites are on hosts (`[sites]`,
    parse_sites)."""
    out = []
    for label, keys in (params or {}).items():
        if keys:
            out.append(f"{where}: tunnel {label}: {', '.join(keys)} set by the hub testbed "
                       "(VNI = spoke index, the IANA port, one rule per spoke; only "
                       "ebpf-vxlan's decap is yours): leave it out")
    bad = [k for k in kinds if k not in hub_kinds]
    if bad:
        out.append(f"{where}: tunnel kind(s) {', '.join(bad)} have no hub variant (the hub "
                   f"testbed runs {', '.join(hub_kinds)}; use the pair testbed for the others)")
    bad = [w for w in workloads if w not in HUB_WORKLOADS]
    if bad:
        out.append(f"{where}: workload(s) {', '.join(bad)} do not run on the hub testbed (it "
                   "measures stream to one spoke and to all spokes at once)")
    if any(m != HUB_MTU for m in mtus):
        mtu = "the hosts' own (never changed)" if hosts else str(HUB_MTU)
        out.append(f"{where}: the hub testbed's underlay MTU is {mtu} (leave --mtu / "
                   "experiment.mtus out)")
    if shaped:
        out.append(f"{where}: the hub testbed has no shaping or WAN emulation (leave --rate, "
                   "--delay, --jitter, --loss, --netem-rate out)")
    if chain:
        out.append(f"{where}: the hub testbed has no [chain] (leave it out)")
    if any(o != "default" for o in offloads):
        out.append(f"{where}: the hub testbed runs the default offloads only (leave "
                   "--offloads / [[offloads]] out)")
    return out
