"""`[testbed]` of an experiment (and `--testbed` / `--spokes`) -> a validated HubSpec, every
problem one line, before anything is created.

    [testbed]
    kind = "hub"      # "pair" (default): the two-namespace testbed; "hub": one hub, N spokes
    spokes = 10       # hub only: 1..1000

Why the checks are this strict: a hub case measures one thing, the hub's side of N tunnels
(setup time, kernel memory, TCP to one spoke and to all at once; hubcase.py), on a testbed
whose spokes run the kernel's VXLAN device (testbed/hub.py). Only the kinds with a hub
variant (HUB_KINDS), the stream workload and the testbed's own 1500-byte underlay make sense
there; everything else would be silently ignored, so it is refused instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .hub import MAX_SPOKES

KINDS = ("pair", "hub")
KEYS = ("kind", "spokes")
DEFAULT_SPOKES = 10
# tunnel kinds that have a hub variant (hubcase.py): the baseline, N kernel VXLAN devices on
# the hub, one tbtun attach point with N rules (spokes are kernel VXLAN either way)
HUB_KINDS = ("native", "vxlan", "ebpf-vxlan")
HUB_WORKLOADS = ("stream",)
# the parameters a hub variant honours; the others are the hub's (VNI = spoke index, the IANA
# port, one rule per spoke), so a value given for them would be silently ignored
HONOURED = {"ebpf-vxlan": ("decap",)}
HUB_MTU = 1500


@dataclass(frozen=True)
class HubSpec:
    spokes: int = DEFAULT_SPOKES

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "hub", "spokes": self.spokes}


FLAGS = {"kind": "--testbed", "spokes": "--spokes"}


def collect(raw: Any, where: str, problems: list[str],
            flags: frozenset[str] = frozenset()) -> HubSpec | None:
    """The `[testbed]` table (None: the default pair testbed). `flags`: the keys set by
    command-line flags, named as those flags."""
    def spot(key: str) -> str:
        return FLAGS[key] if key in flags else f"{where}: testbed.{key}"

    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.append(f"{where}: [testbed] must be a table like {{ kind = \"hub\", "
                        "spokes = 10 }")
        return None
    for key in sorted(set(raw) - set(KEYS)):
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
        spokes = DEFAULT_SPOKES
    if isinstance(spokes, bool) or not isinstance(spokes, int) or not 1 <= spokes <= MAX_SPOKES:
        problems.append(f"{spot('spokes')} must be an integer from 1 to {MAX_SPOKES}, "
                        f"got {spokes!r} (one hub and N spokes; the underlay /30s fit "
                        "198.18.0.0/16)")
        return None
    return HubSpec(spokes)


def ignored_params(kind: str, given: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """Parameters set away from their default that the hub variant of `kind` does not use."""
    keep = HONOURED.get(kind, ())
    return [k for k, v in given.items() if k not in keep and defaults.get(k) != v]


def conflicts(where: str, *, kinds: list[str], workloads: list[str], mtus: list[int],
              shaped: bool, sites: bool, chain: bool, offloads: list[str],
              params: dict[str, list[str]] | None = None) -> list[str]:
    """What a hub testbed cannot run, one line each. `params`: tunnel label -> parameters
    given that its hub variant would ignore (ignored_params)."""
    out = []
    for label, keys in (params or {}).items():
        if keys:
            out.append(f"{where}: tunnel {label}: {', '.join(keys)} set by the hub testbed "
                       "(VNI = spoke index, the IANA port, one rule per spoke; only "
                       "ebpf-vxlan's decap is yours): leave it out")
    bad = [k for k in kinds if k not in HUB_KINDS]
    if bad:
        out.append(f"{where}: tunnel kind(s) {', '.join(bad)} have no hub variant (the hub "
                   f"testbed runs {', '.join(HUB_KINDS)}; use the pair testbed for the others)")
    bad = [w for w in workloads if w not in HUB_WORKLOADS]
    if bad:
        out.append(f"{where}: workload(s) {', '.join(bad)} do not run on the hub testbed (it "
                   "measures stream to one spoke and to all spokes at once)")
    if any(m != HUB_MTU for m in mtus):
        out.append(f"{where}: the hub testbed's underlay MTU is {HUB_MTU} (leave --mtu / "
                   "experiment.mtus out)")
    if shaped:
        out.append(f"{where}: the hub testbed has no shaping or WAN emulation (leave --rate, "
                   "--delay, --jitter, --loss, --netem-rate out)")
    if sites or chain:
        out.append(f"{where}: the hub testbed runs on this host's namespaces only (leave "
                   "[sites] / --site and [chain] out)")
    if any(o != "default" for o in offloads):
        out.append(f"{where}: the hub testbed runs the default offloads only (leave "
                   "--offloads / [[offloads]] out)")
    return out
