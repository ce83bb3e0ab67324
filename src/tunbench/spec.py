"""Experiment specs: a TOML file and/or CLI flags -> one validated, immutable Experiment.

Validation collects every problem (naming the file, the field and what is wrong) and raises
them together before anything runs. The same dict shape is used for TOML files and flags:

    [experiment]                  # all optional
    repeats = 3                   # fixed rounds; absent: the sequential design (sequential.py)
    budget = "15m"                # sequential only: measurement wall time (s, m, h; a number: s)
    max_rounds = 20               # sequential only
    duration = 10                 # seconds per measurement
    warmup = 1                    # seconds excluded at the start (iperf3 -O)
    mtus = [1500, 9000]           # underlay MTUs; tunnel MTU = underlay MTU - overhead
    cpus_per_site = [1, 2]        # site size in cores: each value a scenario (sitecores.py)
    rtt = ["0ms", "20ms", "80ms"] # RTT axis: netem delay of half of each on both ends (wanaxis.py)
    # loss = ["0%", "0.1%"]       # loss axis (a list; a string is one loss for every case)
    rate = "500mbit"              # shape the underlay with tbf
    # rate = ["100mbit", "1gbit"] # rate axis (a list; tbf per case, wanaxis.py)
    delay = "25ms"                # netem on both underlay ends: delay, jitter, loss, rate
    jitter = "5ms"
    loss = "0.1%"
    netem_rate = "100mbit"
    order = "listed"              # or "shuffled" (with seed)
    seed = 1
    natives = 3                   # native runs per round, spread through it (default: from
                                  # the number of methods, plan.py natives_for)

    [[tunnel]]
    kind = "vxlan"
    label = "vxlan-v6"            # optional, defaults to the kind
    underlay = 6                  # any other key is a parameter of the kind

    [[workload]]
    name = "stream"
    streams = 1
    mtus = [1500, 9000]           # optional: underlay MTUs for this workload only
    label = "stream-p1"           # optional; defaults to the name

    [[workload]]
    name = "parallel-streams"
    streams = [1, 8, 64, 512]     # a list for the workload's sweep parameter: one case each

    [[offloads]]                  # optional variants; each is applied with ethtool -K
    name = "no-gro"
    gro = "off"

    [sites]                       # optional: run between real hosts over SSH (docs/remote.md)
    ssh_config = "~/.ssh/config"  # optional: ssh -F
    heartbeat = 30                # optional: s; agents end this long after the controller died
    a = "root@gw1"                # or "local" for this host
    b = { target = "root@gw2", underlay_if = "eth1", underlay4 = "10.0.0.2" }

    [chain]                       # optional: network functions between the sites (docs/chains.md)
    path = ["router", "fw", "wan", "router"]
    fw = { kind = "firewall", rules = 1000 }
    wan = { kind = "wan", rate = "200mbit" }

    [testbed]                     # optional: "pair" (default) or a hub with N spokes
    kind = "hub"                  # (stream; native, vxlan, ebpf-vxlan; docs/tbtun.md)
    spokes = 10                   # on hosts: [sites] hub = "root@h", s1 = ..., sN = ...
    # or a mesh (testbed/meshspec.py): kind = "mesh", sites = N (>= 3), pairs = "all" or
    # ["s1-s2", ...], directions = "one" | "both"
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import inputs, tunnels, workloads
from .chain import spec as chain_spec
from .errors import SpecError
from .testbed import hubspec, meshspec, wanaxis
from .testbed.netem import Netem
from .testbed.topology import SiteSpec, parse_sites
from .tunnels.base import TunnelParams
from .workloads.base import WorkloadParams

DEFAULT_TUNNELS = ("native", "vxlan")
# Native runs per round chosen for k methods: about sqrt(k) (Dunnett's allocation for k
# comparisons with one control), at most MAX_AUTO_NATIVES. On this 2-core host native's own
# run-to-run noise dominated every share: three natives spread through a round, each method
# paired with their geometric mean, halved the sd of the per-round log share (vxlan 0.141 ->
# 0.066, ovs-vxlan 0.186 -> 0.127; docs/methodology.md, "Several natives per round").
MAX_AUTO_NATIVES = 3
MAX_NATIVES = 9


def natives_for(methods: int) -> int:
    """Native runs per round for `methods` methods besides native: round(sqrt(k)) within
    1..MAX_AUTO_NATIVES (1 or 2 methods: 1; 3-6: 2; 7 and more: 3)."""
    return max(1, min(MAX_AUTO_NATIVES, round(math.sqrt(methods))))

DEFAULT_WORKLOADS = ("stream",)
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}$")
NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,80}$")
OFFLOAD_FEATURES = ("tso", "gso", "gro", "lro", "rx", "tx", "sg", "tx-udp_tnl-segmentation",
                    "tx-udp_tnl-csum-segmentation", "rx-gro-hw", "rx-udp-gro-forwarding")
EXPERIMENT_KEYS = {"repeats", "budget", "max_rounds", "duration", "warmup", "mtus", "rate",
                   "order", "seed", "family",
                   "name", "cpu_interval", "noisy_cv", "delay", "jitter", "loss", "netem_rate",
                   "placement", "cpus_per_site", "rtt", "natives"}
NETEM_KEYS = ("delay", "jitter", "loss", "netem_rate")
WORKLOAD_SPEC_KEYS = ("name", "label", "mtus")   # keys of a [[workload]] table that are not params

# ethtool -K names -> the long names `ethtool -k` prints
OFFLOAD_LONG_NAMES = {"tso": "tcp-segmentation-offload", "gso": "generic-segmentation-offload",
                      "gro": "generic-receive-offload", "lro": "large-receive-offload",
                      "rx": "rx-checksumming", "tx": "tx-checksumming", "sg": "scatter-gather"}
# Named offload variants for --offloads (a [[offloads]] table may use any name).
OFFLOAD_PRESETS: dict[str, dict[str, str]] = {
    "default": {},
    "no-tso-gro": {"tso": "off", "gro": "off"},
    "no-gso-gro": {"tso": "off", "gso": "off", "gro": "off"},
    "no-tnl-seg": {"tx-udp_tnl-segmentation": "off", "tx-udp_tnl-csum-segmentation": "off"},
    "gro-on": {"gro": "on", "rx-udp-gro-forwarding": "on"},
    "all-off": {"tso": "off", "gso": "off", "gro": "off", "tx-udp_tnl-segmentation": "off",
                "tx-udp_tnl-csum-segmentation": "off", "rx-gro-hw": "off"},
}


@dataclass(frozen=True)
class TunnelSpec:
    kind: str
    label: str
    params: TunnelParams
    base: str = ""          # a swept tunnel: the label given in the experiment
    sweep: tuple[tuple[str, int], ...] = ()   # and its point, e.g. (("tunnels", 2),)

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "label": self.label, "params": self.params.to_dict()}
        if self.sweep:   # recorded so the report draws the sweep without asking a registry
            out.update(base=self.base, sweep=dict(self.sweep))
        return out


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    params: WorkloadParams
    label: str = ""                     # unique per experiment; defaults to the name
    mtus: tuple[int, ...] | None = None  # underlay MTUs for this workload (None: experiment's)

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "params": self.params.to_dict(),
                "mtus": list(self.mtus) if self.mtus else None}


@dataclass(frozen=True)
class OffloadVariant:
    name: str
    settings: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "settings": dict(self.settings)}


@dataclass(frozen=True)
class Experiment:
    tunnels: tuple[TunnelSpec, ...]
    workloads: tuple[WorkloadSpec, ...]
    mtus: tuple[int, ...] = (1500,)
    offloads: tuple[OffloadVariant, ...] = (OffloadVariant("default"),)
    repeats: int | None = 3           # None: the sequential design (rounds until decided)
    duration: float = 10.0
    warmup: float = 1.0
    rate: str | None = None
    order: str = "listed"
    seed: int = 1
    family: int = 4
    cpu_interval: float = 1.0
    noisy_cv: float = 0.10
    name: str = "campaign"
    source: str = "command line"
    extra: dict[str, Any] = field(default_factory=dict)
    netem: Netem | None = None        # WAN emulation on the underlay (None: none)
    # sites on real hosts (testbed/topology.py); empty: the local two-namespace testbed
    sites: dict[str, SiteSpec] = field(default_factory=dict)
    ssh_config: str | None = None     # ssh -F FILE for the sites (None: ~/.ssh/config)
    heartbeat: float = 30.0           # s without a heartbeat after which agents end (0: off)
    chain: chain_spec.ChainSpec | None = None   # functions between the sites (chain/)
    hub: hubspec.HubSpec | None = None   # a hub and N spokes instead of two sites (hubcase)
    mesh: meshspec.MeshSpec | None = None   # N sites, every listed pair measured (mesh.py)
    placement: str = "processes"      # per-site CPU placement: "processes", "sites" or "off" (placement.py)
    # site size in cores: each value a scenario, every method measured at each in the same
    # round (testbed/sitecores.py); () when not on this axis
    cpus_per_site: tuple[int, ...] = ()
    # RTT and loss axes: each value (each pair with both) a scenario, set by netem per case
    # (testbed/wanaxis.py); () when not on that axis
    rtts: tuple[str, ...] = ()
    losses: tuple[str, ...] = ()
    # the underlay rate as an axis: each value a scenario, tbf per case (wanaxis.py); `rate`
    # is then None
    rates: tuple[str, ...] = ()
    budget: float = 900.0             # sequential: seconds of measurement at most
    max_rounds: int = 20              # sequential: rounds at most
    # native runs per round, spread through it, each method paired with their geometric mean
    # (plan.py); 0: chosen from the number of methods (natives_for)
    natives: int = 0

    @property
    def sequential(self) -> bool:
        return self.repeats is None

    @property
    def planned_rounds(self) -> int:
        """Rounds of every case planned up front: the fixed repeats, or the sequential
        design's minimum (more are added while pairs are open: runner, sequential.py)."""
        from .sequential import MIN_ROUNDS
        return self.repeats if self.repeats is not None else min(MIN_ROUNDS, self.max_rounds)

    @property
    def natives_per_round(self) -> int:
        """Native runs in each round: the experiment's `natives`, else about the square root
        of the number of methods (at most MAX_AUTO_NATIVES); 1 on a hub, with a chain or on
        an axis (cpus_per_site, RTT, loss, rate: their reports pair one native), on a
        shaped underlay (rate, netem), where native runs at the shaper's rate, not at the
        host's whim, and with a loss search, whose native takes minutes."""
        if self.natives:
            return self.natives
        if (self.hub is not None or self.chain is not None or self.shaped
                or self.cpus_per_site or any(w.name == "loss-search" for w in self.workloads)):
            return 1
        return natives_for(sum(1 for t in self.tunnels if t.kind != "native"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source,
            "tunnels": [t.to_dict() for t in self.tunnels],
            "workloads": [w.to_dict() for w in self.workloads],
            "mtus": list(self.mtus), "offloads": [o.to_dict() for o in self.offloads],
            "repeats": self.repeats, "duration": self.duration, "warmup": self.warmup,
            # a list: the rate axis (as in the file)
            "rate": list(self.rates) if self.rates else self.rate, "order": self.order, "seed": self.seed, "family": self.family,
            "cpu_interval": self.cpu_interval, "noisy_cv": self.noisy_cv,
            **({"budget": self.budget, "max_rounds": self.max_rounds} if self.sequential
               else {}),
            **({"delay": self.netem.delay, "jitter": self.netem.jitter, "loss": self.netem.loss,
                "netem_rate": self.netem.rate} if self.netem else {}),
            **({"sites": {n: sp.to_dict() for n, sp in self.sites.items()},
                "ssh_config": self.ssh_config, "heartbeat": self.heartbeat}
               if self.sites else {}),
            **({"chain": self.chain.to_dict()} if self.chain else {}),
            **({"testbed": self.hub.to_dict()} if self.hub else {}),
            **({"testbed": self.mesh.to_dict()} if self.mesh else {}),
            # always written: a campaign recorded before placement existed has none (read as
            # "off"), and --resume must rebuild an explicit "off" as off, not as the default
            "placement": self.placement,
            # always written, resolved: --resume must plan the same rounds (a campaign
            # recorded before it existed had one native per round)
            "natives": self.natives_per_round,
            **({"cpus_per_site": list(self.cpus_per_site)} if self.cpus_per_site else {}),
            # the axes (a list under "loss" is the loss axis, as in the file)
            **({"rtt": list(self.rtts)} if self.rtts else {}),
            **({"loss": list(self.losses)} if self.losses else {}),
        }

    def case_netem(self, rtt: str = "", loss: str = "") -> Netem | None:
        """The netem of a case at this RTT and loss of the axes (wanaxis.py): the campaign's
        own with the case's values; the campaign's own for a case off the axes."""
        return wanaxis.case_netem(self.netem, rtt, loss)

    def case_rate(self, rate: str = "") -> str | None:
        """The tbf rate of a case: its value of the rate axis, else the campaign's own."""
        return rate or self.rate

    @property
    def shaped(self) -> bool:
        """Whether the underlay gets a qdisc (tbf, netem, or the qdisc of an axis)."""
        return bool(self.rate or self.netem or self.rtts or self.losses or self.rates)

    def all_mtus(self) -> tuple[int, ...]:
        """Every underlay MTU some workload runs at, in first-seen order."""
        seen = list(self.mtus)
        for w in self.workloads:
            seen += list(w.mtus or ())
        return tuple(dict.fromkeys(seen))


def load_toml(path: Path) -> dict[str, Any]:
    """An experiment file as a dict, or one SpecError naming it (see tunbench.inputs)."""
    return inputs.load_toml(path, "experiment file")


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """CLI flags override file values: experiment keys one by one, lists of tables whole."""
    out = {k: v for k, v in base.items()}
    exp = dict(out.get("experiment", {}))
    exp.update(overrides.get("experiment", {}))
    out["experiment"] = exp
    for key in ("tunnel", "workload", "offloads", "sites", "chain"):
        if key in overrides:
            out[key] = overrides[key]
    if "testbed" in overrides:   # --testbed / --spokes: key by key over the file's table
        base_tb = out.get("testbed")
        out["testbed"] = {**(base_tb if isinstance(base_tb, dict) else {}),
                          **overrides["testbed"]}
    return out


# experiment key -> the run flag that sets it, so a bad flag value is named as the flag
FLAG_NAMES = {"repeats": "--repeats", "budget": "--budget", "max_rounds": "--max-rounds",
              "duration": "--duration", "warmup": "--warmup",
              "mtus": "--mtu", "rate": "--rate", "seed": "--seed", "noisy_cv": "--noisy-cv",
              "order": "--shuffle", "delay": "--delay", "jitter": "--jitter", "loss": "--loss",
              "netem_rate": "--netem-rate", "tunnel": "--tunnels", "workload": "--workloads",
              "offloads": "--offloads", "testbed": "--testbed", "placement": "--placement",
              "cpus_per_site": "--cpus-per-site", "rtt": "--rtts", "natives": "--natives"}


# each testbed kind's [testbed] keys -> the run flags that set them (testbed/hubspec.py,
# testbed/meshspec.py), so a kind's flag given without that kind is named as needing it
TESTBED_FLAGS = {"hub": hubspec.FLAGS, "mesh": meshspec.FLAGS}


def _num(problems: list[str], spot: str, val: Any, lo: float, hi: float,
         integer: bool = False) -> bool:
    """A finite number (an integer where asked) from lo to hi; False (and a problem) if not."""
    kind = int if integer else (int, float)
    if (isinstance(val, bool) or not isinstance(val, kind) or not math.isfinite(val)
            or not lo <= val <= hi):
        problems.append(f"{spot} must be {'an integer' if integer else 'a number'}"
                        f" from {lo:g} to {hi:g}, got {val!r}")
        return False
    return True


def build(data: dict[str, Any], source: str = "command line",
          available: set[str] | None = None, flags: set[str] | frozenset[str] = frozenset(),
          ) -> Experiment:
    """Validate a spec dict into an Experiment; every problem is reported at once.

    `available` is the set of tunnel kinds that can run here, used to expand "all".
    `flags`: experiment keys and sections set by command-line flags, named as those flags.
    """
    problems: list[str] = []
    where = source
    unknown_top = set(data) - {"experiment", "tunnel", "workload", "offloads", "sites", "chain",
                              "testbed"}
    for key in sorted(unknown_top):
        problems.append(f"{where}: unknown section {key!r} (known: experiment, tunnel, workload, "
                        "offloads, sites, chain, testbed)")
    raw_sites = dict(data.get("sites") or {}) if isinstance(data.get("sites"), dict) \
        else data.get("sites")
    ssh_config = raw_sites.pop("ssh_config", None) if isinstance(raw_sites, dict) else None
    heartbeat = raw_sites.pop("heartbeat", 30.0) if isinstance(raw_sites, dict) else 30.0
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, int | float) or \
            not (heartbeat == 0 or 2 <= heartbeat <= 3600):
        problems.append(f"{where}: sites.heartbeat {heartbeat!r} must be seconds between 2 and "
                        "3600, or 0 to turn it off")
        heartbeat = 30.0
    testbed_raw = data.get("testbed")
    if isinstance(testbed_raw, dict) and hubspec.is_hub(testbed_raw):
        # the hub's sites: hub, s1..sN (testbed/hubspec.py)
        sites = hubspec.parse_sites(raw_sites, where, problems, testbed_raw.get("spokes"),
                                    "spokes" in flags)
    elif isinstance(testbed_raw, dict) and meshspec.is_mesh(testbed_raw):
        sites = meshspec.parse_sites(raw_sites, where, problems)   # s1..sN on hosts
    else:
        sites = parse_sites(raw_sites, where, problems)
    chain = chain_spec.collect(data.get("chain"), where, problems, here=not sites)
    exp = data.get("experiment", {})
    if not isinstance(exp, dict):
        problems.append(f"{where}: [experiment] must be a table")
        exp = {}
    for key in sorted(set(exp) - EXPERIMENT_KEYS):
        problems.append(f"{where}: unknown field experiment.{key} (known: "
                        f"{', '.join(sorted(EXPERIMENT_KEYS))})")

    def spot(key: str) -> str:
        return FLAG_NAMES[key] if key in flags else f"{where}: experiment.{key}"

    def num(key: str, default: float, lo: float, hi: float, integer: bool = False) -> Any:
        val = exp.get(key, default)
        return val if _num(problems, spot(key), val, lo, hi, integer) else default

    repeats = num("repeats", 3, 1, 1000, integer=True) if "repeats" in exp else None
    budget, max_rounds = _sequential_keys(exp, spot, problems, fixed=repeats is not None)
    duration = num("duration", 10.0, 1, 86400)
    warmup = num("warmup", 1.0, 0, 600)
    seed = num("seed", 1, 0, 2**32, integer=True)
    family = num("family", 4, 4, 6, integer=True)
    cpu_interval = num("cpu_interval", 1.0, 0.1, 60)
    noisy_cv = num("noisy_cv", 0.10, 0, 10)
    if family not in (4, 6):
        problems.append(f"{spot('family')} must be 4 or 6, got {family}")
    if warmup >= duration and "warmup" in exp:
        problems.append(f"{spot('warmup')} {warmup:g} s must be shorter than the duration "
                        f"({duration:g} s): it is excluded from the measurement")
    mtus = _mtus(exp.get("mtus", [1500]), spot("mtus"), problems)
    rate = None if wanaxis.is_axis(exp.get("rate")) else exp.get("rate")   # a list: the axis
    if rate is not None and not wanaxis.rate_ok(rate):
        problems.append(f"{spot('rate')} {rate!r} is not a rate above 0 like 500mbit or 1gbit")
    order = exp.get("order", "listed")
    if order not in ("listed", "shuffled"):
        problems.append(f"{spot('order')} must be 'listed' or 'shuffled', got {order!r}")
    placement_mode = _placement(exp, sites, spot, problems)
    natives = 0
    if "natives" in exp and _num(problems, spot("natives"), exp["natives"], 1, MAX_NATIVES,
                                 integer=True):
        natives = int(exp["natives"])
    name = exp.get("name", "campaign")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append(f"{spot('name')} must be 1-80 printable characters, got {name!r}")
        name = "campaign"
    fixed_loss = None if wanaxis.is_axis(exp.get("loss")) else exp.get("loss")
    netem = Netem(exp.get("delay"), exp.get("jitter"), fixed_loss, exp.get("netem_rate"))
    problems += netem.validate(names={k: spot(k) for k in NETEM_KEYS})

    def section(key: str) -> str:
        return FLAG_NAMES[key] if key in flags else where

    mesh = None
    if isinstance(testbed_raw, dict) and meshspec.is_mesh(testbed_raw):   # N sites and their pairs (testbed/meshspec.py)
        mesh = meshspec.collect(testbed_raw, where, problems,
                                frozenset(flags & {"kind", "sites"}), hosts=len(sites),
                                hosts_refused=bool(raw_sites) and not sites,
                                targets={n: s.target for n, s in sites.items()})
        if available is not None:   # "all": every mesh-capable kind
            available = available & set(tunnels.mesh_kinds(on_hosts=bool(sites)))
        hub = None
    else:
        hub = hubspec.collect(testbed_raw, where, problems,
                              frozenset(flags & {k for f in TESTBED_FLAGS.values() for k in f}),
                              default=sum(1 for n in sites if n != "hub") or
                              hubspec.DEFAULT_SPOKES,
                              others={k: f for k, f in TESTBED_FLAGS.items() if k != "hub"})
    if hub is not None and available is not None:   # "all": every kind with a hub variant
        available = available & set(tunnels.hub_kinds())
    tunnel_specs = _tunnels(data.get("tunnel", [{"kind": k} for k in DEFAULT_TUNNELS]),
                            section("tunnel"), available, problems)
    workload_specs = _workloads(data.get("workload", [{"name": w} for w in DEFAULT_WORKLOADS]),
                                section("workload"), problems)
    offloads = _offloads(data.get("offloads"), section("offloads"), problems)
    if chain is not None and sites and hub is None:   # a chain between hosts (chain/hosts.py)
        from .chain import hosts as chain_hosts
        problems += [f"{where}: {p}" for p in chain_hosts.problems(
            chain, [t.kind for t in tunnel_specs],
            shaped=rate is not None or netem.active or wanaxis.asked(exp),
            local_sites=[n for n, s in sites.items() if s.local])]
    if hub is not None:
        problems += hubspec.conflicts(
            section("testbed"), kinds=[t.kind for t in tunnel_specs],
            hub_kinds=tunnels.hub_kinds(),
            workloads=[w.name for w in workload_specs],
            mtus=list(mtus) + [m for w in workload_specs for m in (w.mtus or ())],
            shaped=rate is not None or netem.active, chain=chain is not None,
            offloads=[o.name for o in offloads], hosts=bool(sites),
            params={t.label: hubspec.ignored_params(
                tunnels.get(t.kind).hub_params, t.params.to_dict(),
                tunnels.get(t.kind).default_params().to_dict())
                for t in tunnel_specs if tunnels.get(t.kind).hub_capable})
    if mesh is not None:
        problems += meshspec.conflicts(
            section("testbed"), kinds=[t.kind for t in tunnel_specs],
            mesh_kinds=tunnels.mesh_kinds(on_hosts=bool(sites)),
            mtus=list(mtus) + [m for w in workload_specs for m in (w.mtus or ())],
            shaped=rate is not None or netem.active, chain=chain is not None,
            offloads=[o.name for o in offloads])
    for w in workload_specs:
        problems += [f"{section('workload')}: workload {w.label}: {p}"
                     for p in w.params.family_problems(family)]
    if "placement" not in exp and placement_mode == "processes" and any(
            getattr(w.params, "affinity", "") for w in workload_specs):
        placement_mode = "off"   # a workload pins iperf3 itself (affinity): it chooses the CPUs
    cores: tuple[int, ...] = ()
    if "cpus_per_site" in exp:
        cores = _cores(exp, spot, problems, sites=bool(sites), hub=hub is not None,
                       mesh=mesh is not None, chain=chain is not None,
                       sequential=repeats is None, workloads=workload_specs)
        if cores and "placement" not in exp:   # the axis steers each site's receive work too
            placement_mode = "sites"
    axes = wanaxis.parse(exp, spot, problems, hub=hub is not None,
                                 mesh=mesh is not None, cores="cpus_per_site" in exp,
                                 sequential=repeats is None,
                                 local=not sites or any(s.local for s in sites.values()))
    if natives > 1:
        not_here = ("a hub" if hub is not None else "a chain" if chain is not None else
                    "the cpus_per_site axis" if "cpus_per_site" in exp else
                    "an RTT, loss or rate axis" if wanaxis.asked(exp) else None)
        if not_here:
            problems.append(f"{spot('natives')} {natives}: several natives per round need a "
                            f"pair or a mesh testbed without an axis, not {not_here} (leave "
                            "natives out)")
    problems = list(dict.fromkeys(problems))   # a swept workload repeats its table's problem
    if problems:
        raise SpecError("\n".join(problems) if len(problems) > 1 else problems[0],
                        "fix the values named above; nothing was changed")
    return Experiment(tuple(tunnel_specs), tuple(workload_specs), tuple(mtus), tuple(offloads),
                      repeats, float(duration), float(warmup), rate, order, seed, family,
                      float(cpu_interval), float(noisy_cv), name, source,
                      netem=netem if netem.active else None, sites=sites,
                      ssh_config=str(ssh_config) if ssh_config else None,
                      heartbeat=float(heartbeat), chain=chain, hub=hub, mesh=mesh,
                      placement=placement_mode, budget=budget, max_rounds=max_rounds,
                      natives=natives,
                      cpus_per_site=cores, rtts=axes.rtts, losses=axes.losses,
                      rates=axes.rates)


def _cores(exp: dict[str, Any], spot: Any, problems: list[str], *, sites: bool, hub: bool,
           mesh: bool, chain: bool, sequential: bool,
           workloads: list[WorkloadSpec]) -> tuple[int, ...]:
    """experiment.cpus_per_site: the core counts of the site-size axis (sitecores.py), and
    what it does not combine with, each refused naming the fix."""
    from .testbed import sitecores
    where = spot("cpus_per_site")
    before = len(problems)
    cores = sitecores.parse_axis(exp["cpus_per_site"], where, len(sitecores.host_cpus()),
                                 problems)
    if len(problems) > before:   # a bad value is named alone
        return ()
    shape = ("[sites] (hosts)" if sites else "a hub testbed" if hub else
             "a mesh testbed" if mesh else "a [chain]" if chain else "")
    if shape:
        problems.append(f"{where} runs on the local two-site testbed only, not with {shape}: "
                        "leave out one of them")
    if exp.get("placement") == "off":
        problems.append(f"{where} confines each site, but {spot('placement')} is 'off': "
                        "leave out placement (or give sites or processes)")
    if sequential:
        problems.append(f"{where} needs fixed rounds: add repeats (--repeats N)")
    for w in workloads:
        if getattr(w.params, "affinity", ""):
            problems.append(f"{where} and workload {w.label}'s affinity both choose iperf3's "
                            "CPUs: leave out the affinity")
    return cores if len(problems) == before else ()


def _placement(exp: dict[str, Any], sites: dict[str, Any], spot: Any,
               problems: list[str]) -> str:
    """experiment.placement ("sites", "processes" or "off"; default processes). A site of
    [sites] that names its cpus asks for placement: "sites" then, unless placement was set to
    "off" (refused)."""
    from .testbed.placement import DEFAULT_MODE, MODES
    named = [n for n, s in sites.items() if getattr(s, "cpus", "")]
    mode = exp.get("placement", "sites" if named else DEFAULT_MODE)
    if mode not in MODES:
        problems.append(f"{spot('placement')} must be one of {', '.join(MODES)}, got {mode!r}")
        return DEFAULT_MODE
    if mode == "off" and named:
        problems.append(f"{spot('placement')} is 'off' but sites.{named[0]}.cpus is given: "
                        "drop one of them")
    return str(mode)


_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h)?$")
_SPAN_S = {None: 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_span(val: Any) -> float | None:
    """Seconds from '90s', '15m', '1.5h' or a number of seconds; None if it is none."""
    if isinstance(val, bool):
        return None
    if isinstance(val, int | float):
        return float(val) if math.isfinite(val) else None
    m = _SPAN.match(val.strip()) if isinstance(val, str) else None
    return float(m.group(1)) * _SPAN_S[m.group(2)] if m else None


def _sequential_keys(exp: dict[str, Any], spot: Any, problems: list[str],
                     fixed: bool) -> tuple[float, int]:
    """budget (seconds) and max_rounds of the sequential design; with fixed repeats they
    are a contradiction, named as such."""
    from .sequential import DEFAULT_BUDGET_S, DEFAULT_MAX_ROUNDS, MIN_ROUNDS
    budget, max_rounds = DEFAULT_BUDGET_S, DEFAULT_MAX_ROUNDS
    valid = []
    if "budget" in exp:
        got = parse_span(exp["budget"])
        if got is None or not 10 <= got <= 7 * 86400:
            problems.append(f"{spot('budget')} must be a duration from 10s to 7 days like "
                            f"90s, 15m or 1.5h (a number: seconds), got {exp['budget']!r}")
        else:
            budget = got
            valid.append("budget")
    if "max_rounds" in exp:
        val = exp["max_rounds"]
        if _num(problems, spot("max_rounds"), val, MIN_ROUNDS, 1000, integer=True):
            max_rounds = int(val)
            valid.append("max_rounds")
    for key in valid if fixed else ():   # a bad value is named first, alone
        problems.append(f"{spot(key)} applies to the sequential design only, but "
                        f"{spot('repeats').split(': ')[-1]} fixes the rounds: leave out one "
                        "of them")
    return budget, max_rounds


def _mtus(raw: Any, spot: str, problems: list[str]) -> list[int]:
    out: list[int] = []
    if not isinstance(raw, list) or not raw:
        problems.append(f"{spot} must be a non-empty list of integers")
        return out
    for m in raw:
        if isinstance(m, bool) or not isinstance(m, int) or not 1280 <= m <= 65535:
            problems.append(f"{spot}: {m!r} is not an MTU from 1280 to 65535")
        elif m in out:
            problems.append(f"{spot}: {m} is listed twice")
        else:
            out.append(m)
    return out


def _tables(raw: Any, what: str, where: str, problems: list[str]) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        problems.append(f"{where}: [[{what}]] must be a list of tables")
        return []
    return raw


def _tunnels(raw: Any, where: str, available: set[str] | None,
             problems: list[str]) -> list[TunnelSpec]:
    out: list[TunnelSpec] = []
    tables = _tables(raw, "tunnel", where, problems)
    expanded: list[dict[str, Any]] = []
    for t in tables:
        if t.get("kind") == "all":
            kinds = sorted(available if available is not None else tunnels.registry())
            expanded += [{"kind": k} for k in ["native"] + [k for k in kinds if k != "native"]]
        else:
            expanded.append(t)
    labels: set[str] = set()
    for i, t in enumerate(expanded):
        spot = f"{where}: tunnel[{i}]"
        kind = t.get("kind")
        if not isinstance(kind, str):
            problems.append(f"{spot}: missing 'kind' (one of {', '.join(sorted(tunnels.registry()))})")
            continue
        try:
            drv = tunnels.get(kind)
        except SpecError as exc:
            problems.append(f"{spot}: {exc.one_line()}")
            continue
        label = t.get("label", kind)
        if not isinstance(label, str) or not LABEL_RE.match(label):
            problems.append(f"{spot}: label {label!r} must be 1-40 letters, digits, . _ + -")
            label = kind
        params = {k: v for k, v in t.items() if k not in ("kind", "label")}
        for lab, p, point in _tunnel_variants(drv.sweep, label, params, spot, problems):
            if lab in labels:
                problems.append(f"{spot}: label {lab!r} is used twice; give each tunnel a "
                                "label")
            labels.add(lab)
            try:
                out.append(TunnelSpec(kind, lab, drv.parse_params(p, f"{spot}: "),
                                      label if point else "", point))
            except SpecError as exc:
                problems.append(exc.message)
    if tables and not expanded:
        problems.append(f"{where}: no tunnels to run")
    return out


def _tunnel_variants(sweep: str | None, label: str, params: dict[str, Any], spot: str,
                     problems: list[str]
                     ) -> list[tuple[str, dict[str, Any], tuple[tuple[str, int], ...]]]:
    """A list given for the kind's sweep parameter (`tunnels = [1, 2, 4]`) -> one tunnel per
    value, labelled LABEL-tN (wireguard-t2), each recording its point; else the one tunnel."""
    values = params.get(sweep) if sweep else None
    if sweep is None or not isinstance(values, list):
        return [(label, params, ())]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        problems.append(f"{spot}: {sweep} must be an integer or a non-empty list of integers "
                        f"(e.g. {sweep} = [1, 2, 4]), got {values!r}")
        return []
    if len(set(values)) != len(values):
        problems.append(f"{spot}: {sweep} lists a value twice: {values!r}")
        return []
    return [(f"{label}-{sweep[0]}{v}", {**params, sweep: v}, ((sweep, v),)) for v in values]


def _workloads(raw: Any, where: str, problems: list[str]) -> list[WorkloadSpec]:
    """[[workload]] tables -> specs. A list given for the workload's sweep parameter (e.g.
    parallel-streams' `streams`) expands into one spec per value, labelled NAME-VALUE; an
    absent sweep parameter takes the workload's default sweep."""
    out: list[WorkloadSpec] = []
    labels: set[str] = set()
    for i, w in enumerate(_tables(raw, "workload", where, problems)):
        spot = f"{where}: workload[{i}]"
        name = w.get("name")
        if not isinstance(name, str):
            problems.append(f"{spot}: missing 'name' (one of {', '.join(sorted(workloads.registry()))})")
            continue
        try:
            wl = workloads.get(name)
        except SpecError as exc:
            problems.append(f"{spot}: {exc.one_line()}")
            continue
        mtus = None
        if "mtus" in w:
            mtus = tuple(_mtus(w["mtus"], f"{spot}: mtus", problems))
        label = w.get("label", name)
        if not isinstance(label, str) or not LABEL_RE.match(label):
            problems.append(f"{spot}: label {label!r} must be 1-40 letters, digits, . _ + -")
            continue
        params = {k: v for k, v in w.items() if k not in WORKLOAD_SPEC_KEYS}
        variants: list[tuple[str, dict[str, Any]]] = [(label, params)]
        sweep = wl.sweep
        if sweep:
            values = params.get(sweep, list(wl.sweep_default) or None)
            if isinstance(values, list):
                if not values:
                    problems.append(f"{spot}: {sweep} must not be an empty list")
                    continue
                variants = [(f"{label}-{v}", {**params, sweep: v}) for v in values]
        for lab, p in variants:
            if lab in labels:
                problems.append(f"{spot}: workload label {lab!r} is used twice; give each "
                                "[[workload]] its own label")
                continue
            labels.add(lab)
            try:
                out.append(WorkloadSpec(name, wl.parse_params(p, f"{spot}: "), lab, mtus))
            except SpecError as exc:
                problems.append(exc.message)
    return out


def offload_tables(names_csv: str) -> list[dict[str, Any]]:
    """--offloads default,no-tso-gro -> [[offloads]] tables (SpecError names the presets)."""
    out = []
    for name in inputs.split_list("--offloads", names_csv):
        if name not in OFFLOAD_PRESETS:
            raise SpecError(f"--offloads: unknown offload variant {name!r}",
                            f"known: {', '.join(OFFLOAD_PRESETS)}; or define [[offloads]] in an "
                            "experiment file")
        out.append({"name": name, **OFFLOAD_PRESETS[name]})
    return out


def _offloads(raw: Any, where: str, problems: list[str]) -> list[OffloadVariant]:
    if raw is None:
        return [OffloadVariant("default")]
    out = []
    seen: set[str] = set()
    for i, o in enumerate(_tables(raw, "offloads", where, problems)):
        spot = f"{where}: offloads[{i}]"
        name = o.get("name")
        if not isinstance(name, str) or not LABEL_RE.match(name):
            problems.append(f"{spot}: needs a 'name' of letters, digits, . _ + -")
            continue
        if name in seen:
            problems.append(f"{spot}: offload variant name {name!r} is used twice")
            continue
        seen.add(name)
        settings = []
        for feat, val in o.items():
            if feat == "name":
                continue
            if feat not in OFFLOAD_FEATURES:
                problems.append(f"{spot}: unknown offload {feat!r} (known: {', '.join(OFFLOAD_FEATURES)})")
            elif val not in ("on", "off", True, False):
                problems.append(f"{spot}: offload {feat!r} must be \"on\" or \"off\", got {val!r}")
            else:
                settings.append((feat, "on" if val in ("on", True) else "off"))
        out.append(OffloadVariant(name, tuple(settings)))
    return out or [OffloadVariant("default")]
