"""The topology contract: the shape of the testbed a case runs on (two sites, a hub and its
spokes, a chain of functions between two sites), one module per topology under topologies/,
each exporting TOPOLOGY; `tunbench list --topologies` shows them.

A topology declares:
- `name` and a one-line `summary`; `chosen_by`: how an experiment picks it, in the words of its
  file and flags;
- `params`: where an experiment sets it up ([testbed], [sites], [chain] keys and their flags),
  each with its default and a one-line help;
- `needs`: the tools it runs itself (the tunnel kinds and workloads declare their own), whether
  it needs root here, and the hosts it takes;
- `tunnel_kinds(on_hosts)`: the tunnel kinds it runs, here and between hosts, computed from the
  drivers' declarations (hub_capable, chain_site_capable, not_on_hosts; tunnels/base.py), never
  listed here; `workloads()`: the workloads it runs (None: every one);
- `chosen(exp, through_chain)`: whether a case of experiment `exp` runs on it (a chain
  campaign with `direct = true` runs some cases on the pair): exactly one topology says yes;
- `resume_reruns_failed`: whether `--resume` runs its failed cases again (the mesh) or keeps
  them as recorded (the others).

And it builds (runner.run_case asks `topologies.of(...)` once and goes through these):
- `check(exp, case, hosts)`: refuses, in one line (SpecError), what it cannot build, before
  anything is made; `build` calls it first;
- `build(exp, case, run_id, ledger, hosts)`: the case's testbed, every object in `ledger` the
  moment it exists, so `ledger.close()` undoes it all (`hosts`: the sites opened over SSH,
  runner.open_topology, or None for namespaces here). A two-site topology returns a Testbed
  (testbed/base.py) whose sites a and b the runner's own flow measures: the tunnel driver's
  `up` between them, then the workload. One that `measures_itself` (the hub) returns what its
  `measure` and `record` take;
- `sections(exp, case)`: what a two-site topology adds to the case document (the mesh: its
  pair and slot); `setup_text(exp, case, hosts)`: what the set-up phase says;
  `measurements(exp)`: how many times a case runs its workload (the estimate);
  `log_tails(built, hosts)`: the process logs of a failed case, read before the teardown
  removes them;
- with `measures_itself`: `measure(exp, case, built, progress)` and `record(exp, case,
  built)`, the case document's testbed, tunnel, metrics, ... and its own sections.

And it owns the campaign's shape around the cases (the experiment's topology,
`topologies.of(exp)`, answers for the whole campaign; a chain with `direct = true` too, though
its direct cases build on the pair):
- `requirements(exp)`: what it needs of this host for a campaign here, one line each
  (runner.preflight; on hosts each host is asked once connected, in `open`);
- `open(exp, ssh)`: connect to the experiment's sites over SSH and check them, before
  anything is changed on any host; what `build` then takes as `hosts` (runner.open_topology);
- `slots(exp)`: the parts of a round (plan.py), each a `Slot`: every case of the round runs
  once in each, slot after slot (the chain's direct and through-chain halves, the mesh's
  pairs in the order of its schedule);
- `steps(exp, cases)`: how the runner runs the planned cases: steps one after another, each
  a list of lanes run at the same time, one thread each (lanes.py), each lane its cases in
  order; the default one case per step (the mesh on hosts with `parallel = true`: a colour's
  pairs as the lanes of one step);
- `plan_text(exp)`: what `--dry-run` prints about it before the cases (the mesh's schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import SpecError
from ..progress import ProgressSink
from ..remote.transport import SshOptions
from ..testbed import local
from ..testbed.base import Testbed
from ..testbed.ledger import Ledger

MTU_RANGE = (1280, 65535)   # as the experiment parser takes them (spec._mtus)


@dataclass(frozen=True)
class TopoParam:
    """One setting of a topology: its key in an experiment file, its flag (None: file only),
    its default as shown, and its help."""

    key: str
    flag: str | None
    default: str
    help: str

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "flag": self.flag, "default": self.default, "help": self.help}


@dataclass(frozen=True)
class Slot:
    """One part of a round (plan.py): every (tunnel, workload, MTU, offloads, cores) case of
    the round is planned once in each slot, slot after slot.

    `topology`: Case.topology, "direct" or "chain" when a chain campaign measures both ("" else;
    it also ends the case id); `pair` and `colour`: a mesh case's sites (sender, receiver), which
    begin the case id, and its colour of the schedule; `label_suffix`: added to the tunnel's
    label (" via chain")."""

    topology: str = ""
    pair: tuple[str, str] | None = None
    colour: int = -1
    label_suffix: str = ""


@dataclass(frozen=True)
class TopoNeeds:
    """What a topology itself needs: tools, kernel options, root here, hosts (in words)."""

    tools: tuple[str, ...] = ()
    kernel: tuple[str, ...] = ()
    root: bool = True
    hosts: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"tools": list(self.tools), "kernel": list(self.kernel), "root": self.root,
                "hosts": self.hosts}


class Topology:
    name: ClassVar[str]
    summary: ClassVar[str]
    chosen_by: ClassVar[str]
    params: ClassVar[tuple[TopoParam, ...]] = ()
    # False: `build` returns a two-site Testbed and the runner measures it (tunnel up between
    # a and b, the workload); True: the topology's own `measure` and `record` (the hub)
    measures_itself: ClassVar[bool] = False
    # True: `--resume` runs its failed cases again with the missing ones (the mesh: a failed
    # pair is a hole in its grid, usually a site that was down); False: a recorded failure
    # is kept as it is (runner.resume_done)
    resume_reruns_failed: ClassVar[bool] = False

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds()

    @classmethod
    def native_beside(cls, exp: Any) -> bool:
        """Whether its cases of `exp` may measure native beside the method (runner.native_beside:
        two sites whose share of native means what a round's does); False but for a pair."""
        return False

    @classmethod
    def tunnel_kinds(cls, on_hosts: bool = False) -> tuple[str, ...]:
        """The tunnel kinds it runs (here, or with its sites on hosts), in registry order."""
        raise NotImplementedError

    @classmethod
    def workloads(cls) -> tuple[str, ...] | None:
        """The workloads it runs; None: every one."""
        return None

    @classmethod
    def chosen(cls, exp: Any, through_chain: bool = True) -> bool:
        """Whether a case of `exp` (spec.Experiment) runs on this topology."""
        raise NotImplementedError

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Everything it declares, for `tunbench list --topologies --json`."""
        wl = cls.workloads()
        return {"summary": cls.summary, "chosen_by": cls.chosen_by,
                "params": [p.to_dict() for p in cls.params], "needs": cls.needs().to_dict(),
                "tunnel_kinds": {"here": list(cls.tunnel_kinds(False)),
                                 "on_hosts": list(cls.tunnel_kinds(True))},
                "workloads": None if wl is None else list(wl)}

    # ---- the campaign around the cases (preflight, open, plan, dry run) -----------------------
    @classmethod
    def requirements(cls, exp: Any) -> list[str]:
        """What this topology needs of this host for a campaign with its sites here, one line
        each (runner.preflight adds them to the tunnels' and workloads'). The default: nothing
        beyond what the runner checks for every campaign."""
        return []

    @classmethod
    def open(cls, exp: Any, ssh: SshOptions) -> Any:
        """Connect to the experiment's sites (`exp.sites`) over SSH and check them, before
        anything is changed on any host; `build` takes what it returns as `hosts`. The default:
        this topology is not built on hosts."""
        raise SpecError(f"the {cls.name} topology runs on this host's namespaces only so far",
                        "leave [sites] / --site out")

    @classmethod
    def slots(cls, exp: Any) -> tuple[Slot, ...]:
        """The parts of a round, in order (plan.py). The default: one, the round itself."""
        return (Slot(),)

    @classmethod
    def steps(cls, exp: Any, cases: list[Any]) -> list[list[list[Any]]]:
        """`cases` (in plan order) as the runner runs them: steps one after another, each a
        list of lanes that run at the same time, each lane's cases in order. The default:
        every case a step of its own, one after another."""
        return [[[c]] for c in cases]

    @classmethod
    def plan_text(cls, exp: Any) -> list[str]:
        """Lines `tunbench run --dry-run` prints about this topology before the cases."""
        return []

    # ---- building and undoing (runner.run_case) -------------------------------------------
    @classmethod
    def check(cls, exp: Any, case: Any, hosts: Any = None) -> None:
        """Refuse what this topology cannot build, one line, before anything is made. The
        default: the case's underlay MTU is one the experiment parser takes."""
        check_mtu(case.mtu)

    @classmethod
    def build(cls, exp: Any, case: Any, run_id: str, ledger: Ledger, hosts: Any = None) -> Any:
        """The case's testbed, every object in `ledger` as it is made (`check` first)."""
        raise NotImplementedError

    @classmethod
    def setup_text(cls, exp: Any, case: Any, hosts: Any = None) -> str:
        """What the set-up phase says while `build` (and the tunnel's bring-up) runs."""
        return f"testbed and {case.tunnel.kind} tunnel"

    @classmethod
    def measurements(cls, exp: Any) -> int:
        """How many times a case runs its workload (what the time estimate starts from)."""
        return 1

    @classmethod
    def log_tails(cls, built: Any, hosts: Any = None, lines: int = 20) -> str | None:
        """The last lines of every process log of a failed case (None: none), before the
        teardown removes them: on hosts each site's (through its agent), and the case
        directory here."""
        if not isinstance(built, Testbed) or not built.workdir.exists():
            return None
        parts = hosts.log_tails(built, lines) if hosts is not None else []
        parts += local.workdir_log_tails(built.workdir, lines)
        return "\n".join(parts) or None

    @classmethod
    def sections(cls, exp: Any, case: Any) -> dict[str, Any]:
        """A two-site topology's own top-level sections of the case document (additive:
        readers that do not know them ignore them); the mesh's `mesh`."""
        return {}

    @classmethod
    def measure(cls, exp: Any, case: Any, built: Any, progress: ProgressSink) -> None:
        """A topology that `measures_itself`: bring the tunnel up and measure on `built`,
        keeping what it measured in `built` as it goes (a failure keeps what was there)."""
        raise NotImplementedError(f"{cls.name} is measured by the runner's two-site flow")

    @classmethod
    def record(cls, exp: Any, case: Any, built: Any) -> dict[str, Any]:
        """A topology that `measures_itself`: the case document's testbed, tunnel, metrics,
        series, cpu, counters, raw and offloads (results.model.case_document's keywords) and
        under `sections` its own top-level sections; `built` is None when `build` failed."""
        raise NotImplementedError(f"{cls.name} is recorded by the runner's two-site flow")


def check_mtu(mtu: int) -> None:
    lo, hi = MTU_RANGE
    if not lo <= mtu <= hi:
        raise SpecError(f"underlay MTU {mtu} is not an MTU from {lo} to {hi}",
                        "give --mtu / experiment.mtus within that range")
