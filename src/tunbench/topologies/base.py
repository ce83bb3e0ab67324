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
  campaign with `direct = true` runs some cases on the pair): exactly one topology says yes.
This first slice of issue 31 declares; building and undoing still go through runner.py and
hubcase.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


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

    @classmethod
    def needs(cls) -> TopoNeeds:
        return TopoNeeds()

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
