"""The tunnel driver contract. One module per kind under tunnels/, each exporting DRIVER.

A driver is generic over its parameters class (`class Vxlan(TunnelDriver[VxlanParams])`), so
every method receives its own typed params and mypy checks it. It declares:
- `kind` and a one-line `summary`;
- `Params`: a frozen dataclass of its parameters with defaults, each field with
  `metadata={"help": "one line"}`; `validate()` returns problems;
- `encrypts`: whether its datapath encrypts (the report labels it from the recorded flag);
- `carries`: what inner traffic it carries between the sites: "tcp" and "udp" for an IP packet
  tunnel (any IP protocol), plus "l2" for one that carries Ethernet frames (a bridgeable
  device); a stream relay (ssh-forward) carries "tcp" only and has no packet MTU;
- `userspace`: the implementations whose datapath is a userspace process ("" = every one);
  the others run in the kernel (eBPF included). `tunbench advise --kernel-only` and
  `--carries` read these two, never a list kept in report/;
- `impl_param`: the name of a Literal-typed field choosing between implementations (wireguard
  kernel|go, ipsec libipsec|kernel|xfrm, ovs-* netdev|system), and `resolve_impl(params)`:
  which one runs on this host;
- `needs`: per implementation ("" = all of them) the tools (with their Debian package and
  version argv) and kernel options (with their module) it uses. Install hints, tool-version
  capture, doctor's tools and kernel options and the VM lab's modules and guest packages are
  derived from these declarations (tunnels/__init__.py), never listed centrally;
- `requirements(params)`: what this host lacks to run it, with fixes (by default: the declared
  tools and kernel options of the resolved implementation);
- `overhead(params, family)`: bytes its encapsulation adds to an inner packet on an underlay
  of that IP family, so the tunnel MTU is computed, never hard-coded;
- `up(testbed, params)`: builds the tunnel between site a and site b, registering every object
  in the testbed's ledger, and returns the inner endpoints. Teardown is the ledger's job.
What a kind can do in each topology is declared here too, and the lists the topologies check
are computed from it (tunnels/__init__.py: hub_kinds, chain_site_kinds, chain_gateway_kinds):
- `hub_capable` with `hub_params`, `hub_ship`, `hub_up`, `hub_counters`: the kind has a hub
  variant (one hub, N spokes running kernel VXLAN: hubcase.py, testbed/hub.py);
- `chain_site_capable`: it runs at the sites of a chain between hosts (chain/hosts.py);
- `chain_gateway`: how a pair of chain gateways terminates it ("device": the driver's own
  `up` between the gateways; "seg6": SRv6 routes, no device; chain/gateway.py), or None;
- `fingerprint_tools`: the tools whose version shapes its figures (results/fingerprint.py:
  campaigns compare only when these agree).
A kind with several implementations (kernel vs userspace) is one driver with an `impl` param.
"""

from __future__ import annotations

import dataclasses
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ..capabilities import Missing, kernel_missing, tool_missing
from ..errors import SpecError
from ..params import coerce_fields
from ..testbed.base import Site, Testbed

if TYPE_CHECKING:
    from ..testbed.hub import Hub

# what a tunnel may carry (TunnelDriver.carries): TCP, UDP (any IP protocol), Ethernet frames
CARRIES = ("tcp", "udp", "l2")

IPV4_HEADER = 20
IPV6_HEADER = 40
UDP_HEADER = 8
ETH_HEADER = 14

# Inner (overlay) addresses: 198.19.<index>.0/24 and 2001:2:0:<index+1>::/64.
INNER4 = "198.19.{i}.{host}"
INNER6 = "2001:2:0:{j:x}::{host}"


def inner_addrs(index: int = 0) -> tuple[str, str, str, str]:
    """(a4, b4, a6, b6) inner addresses of tunnel number `index`."""
    return (INNER4.format(i=index, host=1), INNER4.format(i=index, host=2),
            INNER6.format(j=index + 1, host=1), INNER6.format(j=index + 1, host=2))


@dataclass(frozen=True)
class TunnelParams:
    """Base of every driver's parameters. Subclasses add fields with defaults."""

    def validate(self) -> list[str]:
        return []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Endpoints:
    """What `up` returns: where inner traffic goes and what carries it."""

    a4: str                          # inner IPv4 of site a
    b4: str                          # inner IPv4 of site b
    mtu: int                         # MTU of the inner path (tunnel interface MTU)
    overhead: int                    # header bytes added per packet
    a6: str | None = None
    b6: str | None = None
    a_ifname: str | None = None      # device carrying inner traffic in site a (counters, ethtool)
    b_ifname: str | None = None
    # devices in site b on which decapsulated inner packets are *received* (a capture receiver
    # counts there, a tc filter drops there); empty when inner packets reach the stack without
    # a device receive (SRv6 End.DX4/DT6, transport-mode ESP): loss-search then uses sockets
    rx_ifnames: tuple[str, ...] = ()
    relay: bool = False              # a stream relay (e.g. SSH -L), not a packet tunnel
    relay_ports: tuple[int, ...] = ()  # TCP ports a relay carries (only with relay=True)
    datapath_pids: dict[str, list[int]] = field(default_factory=dict)  # site -> daemon PIDs
    info: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


P = TypeVar("P", bound=TunnelParams)
# values of an implementation field that mean "choose automatically"
AUTO_IMPLS = ("", "auto", None)


@dataclass(frozen=True)
class Tool:
    """A program a driver runs, the Debian package that provides it, and how it tells its
    version (recorded with every campaign's environment)."""

    name: str
    package: str
    why: str = ""
    version_argv: tuple[str, ...] = ("--version",)


@dataclass(frozen=True)
class KernelOption:
    """A kernel configuration option a driver needs, and the module providing it when it is
    built as one (the VM lab loads these; None: no module of its own)."""

    option: str
    module: str | None = None
    why: str = ""


@dataclass(frozen=True)
class Needs:
    """What one implementation of a kind uses: tools, kernel options, and further Debian
    packages that are no tool (plugins, schemas)."""

    tools: tuple[Tool, ...] = ()
    kernel: tuple[KernelOption, ...] = ()
    packages: tuple[str, ...] = ()

    def __add__(self, other: Needs) -> Needs:
        return Needs(tuple(dict.fromkeys(self.tools + other.tools)),
                     tuple(dict.fromkeys(self.kernel + other.kernel)),
                     tuple(dict.fromkeys(self.packages + other.packages)))

    def debian_packages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([t.package for t in self.tools] + list(self.packages)))


class TunnelDriver(ABC, Generic[P]):
    kind: ClassVar[str]
    summary: ClassVar[str]
    # the concrete driver's params class (P); ClassVar cannot name a type variable
    Params: ClassVar[type[Any]] = TunnelParams
    underlay_family: ClassVar[int] = 4   # IP family the encapsulation runs over
    inner_families: ClassVar[tuple[int, ...]] = (4, 6)  # inner IP families it carries
    # a parameter an experiment may give as a list: one tunnel (and case) per value, like a
    # workload's sweep (wireguard and ipsec: `tunnels`, the number of ECMP-spread tunnels)
    sweep: ClassVar[str | None] = None
    encrypts: ClassVar[bool] = False     # the datapath encrypts (recorded in every case)
    # inner traffic it carries: IP packets ("tcp", "udp"), Ethernet frames ("l2"); a stream
    # relay carries "tcp" only (see CARRIES)
    carries: ClassVar[tuple[str, ...]] = ("tcp", "udp")
    # implementations whose datapath is a userspace process ("" = every one); else kernel
    userspace: ClassVar[tuple[str, ...]] = ()
    # an aggregating kind (several inner packets per outer one): the parameter holding its
    # flush timeout in µs (0 = no aggregation), and the kind of the same encapsulation
    # without aggregation its trade-off is measured against (report/tradeoff.py); recorded
    # in every case's tunnel record as `aggregation`
    aggregates: ClassVar[str | None] = None
    aggregation_baseline: ClassVar[str | None] = None
    # why the kind cannot run between sites on other hosts (None: it can); refused in one
    # line before anything is changed on any host
    not_on_hosts: ClassVar[str | None] = None
    # oldest kernel (major, minor) a site must run (None: any); checked on each remote host
    # by `doctor --site` and when the tunnel comes up there
    min_kernel: ClassVar[tuple[int, int] | None] = None
    impl_param: ClassVar[str | None] = None  # Literal field choosing the implementation
    # per implementation ("" = every one): tools, kernel options, packages it uses
    needs: ClassVar[dict[str, Needs]] = {}
    # tools whose version shapes its figures (the campaign fingerprint compares them)
    fingerprint_tools: ClassVar[tuple[str, ...]] = ()
    # topologies: a hub variant (and the parameters it honours; the hub sets the others),
    # at the sites of a chain between hosts, terminated by chain gateways (and how)
    hub_capable: ClassVar[bool] = False
    hub_params: ClassVar[tuple[str, ...]] = ()
    chain_site_capable: ClassVar[bool] = False
    # runs between two sites of a mesh (testbed/mesh.py): its pair bring-up (`up`) works
    # between two of N namespaces on one underlay bridge; set only where verified live
    mesh_capable: ClassVar[bool] = False
    chain_gateway: ClassVar[str | None] = None
    # native's traffic between the underlay addresses stays native while this kind is up (it
    # neither takes the underlay device nor matches traffic between those addresses), so a
    # case can measure native's bursts beside its own (workloads/stream.py); set only where
    # measured (bench/bench_interleave.py --survey, docs/methodology.md)
    native_beside: ClassVar[bool] = False

    # ---- declarations -------------------------------------------------------------------
    @classmethod
    def implementations(cls) -> tuple[str, ...]:
        """The values of the `impl_param` field's Literal type, automatic choice left out."""
        if not cls.impl_param:
            return ()
        want = typing.get_type_hints(cls.Params)[cls.impl_param]
        values: list[Any] = []
        for t in (want, *typing.get_args(want)):
            if typing.get_origin(t) is typing.Literal:
                values += list(typing.get_args(t))
        return tuple(str(v) for v in dict.fromkeys(values) if v not in AUTO_IMPLS)

    @classmethod
    def resolve_impl(cls, params: P) -> str | None:
        """The implementation these params run on this host (None: the kind has one). By
        default an automatic choice is the first implementation, in the Literal's order, whose
        declared needs this host meets (else the first); a driver may choose otherwise."""
        if not cls.impl_param:
            return None
        value = getattr(params, cls.impl_param)
        if value not in AUTO_IMPLS:
            return str(value)
        impls = cls.implementations()
        return next((i for i in impls if not cls.declared_missing(i)),
                    impls[0] if impls else None)

    @classmethod
    def display(cls, params: P, label: str | None = None) -> str:
        """The name a reader sees: 'wireguard (go)', 'ipsec (libipsec)', 'vxlan'."""
        impl = cls.resolve_impl(params)
        name = label or cls.kind
        return f"{name} ({impl})" if impl else name

    @classmethod
    def declared(cls, impl: str | None = None) -> Needs:
        """The needs of one implementation (with those common to all), or of every one."""
        keys = [k for k in cls.needs if k in ("", impl)] if impl else list(cls.needs)
        out = Needs()
        for k in keys:
            out = out + cls.needs[k]
        return out

    @classmethod
    def declared_missing(cls, impl: str | None) -> list[Missing]:
        """The declared tools and kernel options of `impl` this host lacks; the kernel
        options of one implementation fold into one record naming every absent one."""
        need = cls.declared(impl)
        missing = [m for m in (tool_missing(t.name, t.why) for t in need.tools) if m]
        absent = [m for m in (kernel_missing(k.option, k.why or f"{cls.kind} tunnels",
                                             k.module) for k in need.kernel) if m]
        if len(absent) > 1:
            names = ", ".join(m.what.removeprefix("kernel ") for m in absent)
            absent = [Missing(f"kernel {names}", absent[0].why, absent[0].fix)]
        return missing + absent

    @classmethod
    def kernel_datapath(cls, impl: str | None) -> bool:
        """Whether the datapath of `impl` (None: the kind's only one) runs in the kernel."""
        return "" not in cls.userspace and (impl or "") not in cls.userspace

    @classmethod
    def aggregation(cls) -> dict[str, str | None] | None:
        """{"param", "baseline"} of an aggregating kind, else None (the case's record)."""
        if not cls.aggregates:
            return None
        return {"param": cls.aggregates, "baseline": cls.aggregation_baseline}

    @classmethod
    def relay(cls) -> bool:
        """A stream relay, not a packet tunnel: carries TCP only, has no packet MTU."""
        return "udp" not in cls.carries

    # ---- parameters -------------------------------------------------------------------
    @classmethod
    def parse_params(cls, raw: dict[str, Any], where: str = "") -> P:
        """Build Params from a dict of user values; unknown keys and bad types are errors."""
        problems, values = coerce_fields(cls.Params, raw, f"{where}tunnel {cls.kind}")
        if problems:
            raise SpecError("; ".join(problems), "see `tunbench list --params`")
        params: P = cls.Params(**values)
        problems = [f"{where}tunnel {cls.kind}: {p}" for p in params.validate()]
        if problems:
            raise SpecError("; ".join(problems), "see `tunbench list --params`")
        return params

    @classmethod
    def default_params(cls) -> P:
        params: P = cls.Params()
        return params

    # ---- host capability -------------------------------------------------------------
    @classmethod
    def requirements(cls, params: P) -> list[Missing]:
        """What this host lacks for these params (empty list: it can run here). By default
        the declared needs of the resolved implementation; a driver with further conditions
        (plugins, devices, parameter-dependent options) overrides it."""
        return cls.declared_missing(cls.resolve_impl(params))

    @classmethod
    def orchestrator_requirements(cls, params: P) -> list[Missing]:
        """What the host running tunbench needs even when both sites are other hosts (a
        build it copies to them); the sites' own needs are checked on each of them."""
        return []

    @classmethod
    @abstractmethod
    def overhead(cls, params: P, family: int = 4) -> int:
        """Bytes added to each inner packet by the encapsulation over an underlay of `family`."""

    @classmethod
    def leaves_native(cls, params: P) -> bool:
        """Whether native's traffic between the underlay addresses stays native while this
        kind is up with `params` (`native_beside`; a kind whose parameters decide it, e.g.
        ESP in transport mode, which protects that traffic too, says so here)."""
        return cls.native_beside

    @classmethod
    def moves_underlay(cls, params: P) -> bool:
        """Whether `up` moves the underlay interface's addresses elsewhere (a remote site
        refuses that on the interface carrying its SSH session)."""
        return False

    @classmethod
    def family(cls, params: P) -> int:
        """Underlay IP family these params run over (a `underlay` param overrides the default)."""
        return int(getattr(params, "underlay", cls.underlay_family))

    @classmethod
    def tunnel_mtu(cls, params: P, underlay_mtu: int) -> int:
        return underlay_mtu - cls.overhead(params, cls.family(params))

    # ---- life cycle --------------------------------------------------------------------
    @abstractmethod
    def up(self, tb: Testbed, params: P) -> Endpoints:
        """Build the tunnel; register every created object in tb.ledger as soon as it exists."""

    # ---- the hub variant (hub_capable; hubcase.py) --------------------------------------
    @classmethod
    def hub_ship(cls, h: Hub) -> str | None:
        """What the hub's host needs before setup is timed (tbtun: its object), or None."""
        return None

    @classmethod
    def hub_up(cls, h: Hub, params: P, obj: str | None) -> dict[str, Any]:
        """The hub's side of this kind towards every spoke; what was made (the case's `hub`
        section). `obj`: what hub_ship put on the hub's host. The baseline: nothing."""
        return {"devices": 0}

    @classmethod
    def hub_counters(cls, section: dict[str, Any], h: Hub) -> dict[str, Any]:
        """The kind's own counters on the hub after the measurement (proof it carried it)."""
        return {}

    def wire_tx(self, tb: Testbed, ep: Endpoints) -> tuple[int, int] | None:
        """(packets, bytes incl. the Ethernet header) this tunnel has put on site a's underlay
        so far, for a kind whose underlay device counters cannot tell (a UDP GSO send crosses
        a veth as one frame); None: site a's underlay counters are right (the default)."""
        return None

    def counters(self, tb: Testbed, ep: Endpoints) -> dict[str, dict[str, int]]:
        """Counters that prove the datapath carried the traffic, per site."""
        out: dict[str, dict[str, int]] = {}
        for site, ifname in ((tb.a, ep.a_ifname), (tb.b, ep.b_ifname)):
            if ifname:
                out[site.name] = site.links.stats(ifname)
        return out

    @staticmethod
    def underlay_addr(site: Site, family: int) -> str:
        return site.underlay4 if family == 4 else site.underlay6
