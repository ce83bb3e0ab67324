"""Experiment -> ordered list of cases (tunnel x MTU x offloads x workload x cores x repeat).

A workload with its own `mtus` runs only at those underlay MTUs; the others at the
experiment's. A swept workload (parallel-streams with a list of stream counts) is already one
spec per value here, each with its own label.

Repeats are the outer loop, so every tunnel is measured once per round and slow drift of the
host affects all tunnels alike; within a round the native baseline comes first. With
order = "shuffled" each round is shuffled with the seed (native still first).

The experiment's topology divides each round into its slots (topologies/base.py `slots`),
planned one after another, every case of the round in each: one for a pair or a hub; a chain
with `direct = true` (the sdwan preset) runs every case twice per round, first direct (topology
"direct": the plain two-site testbed, tunnels under their own labels, native the baseline),
then through the chain (topology "chain", tunnel labels "<label> via chain"), so every table
shows the chain as a share of direct measured in the same round; a mesh
(testbed/meshspec.py) runs each round pair by pair in the order of its schedule (the colours
of its edge colouring, one after another): every case of a pair, native first, before the next
pair, so each pair's share of native is measured in the same round. The plan itself tests no
topology.

The sequential design (no fixed repeats) plans its minimum rounds here; the runner adds each
further round with `next_round`, only the cases the stopping rule keeps (sequential.py), in
the same order as a full round (native first), numbered on from the cases before it.

With several natives per round (Experiment.natives_per_round) each round measures native
that many times, the further runs spread through the round (`spread_natives`), so a method's
share is taken against the geometric mean of the natives around it (docs/methodology.md,
"Several natives per round").

With `cpus_per_site` (site size in cores, testbed/sitecores.py) each round measures every
case at each core count in turn (native first at each), so a method at 1 core meets native at
1 core of the same round. The RTT, loss and rate axes (testbed/wanaxis.py) the same way: every
case at each (RTT, loss) scenario or rate in turn, native first at each; the case carries its
values (`rtt`, `loss`, `rate`) and the topology sets the netem / tbf of each case's underlay
from them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from . import topologies
from .spec import Experiment, OffloadVariant, TunnelSpec, WorkloadSpec
from .testbed import wanaxis


@dataclass(frozen=True)
class Case:
    index: int
    case_id: str
    tunnel: TunnelSpec
    workload: WorkloadSpec
    mtu: int
    offloads: OffloadVariant
    repeat: int
    # "direct" or "chain" when the experiment measures both (chain direct = true); "" else
    topology: str = ""
    # a mesh case: the (sender, receiver) sites it measures and the colour of the schedule
    # it runs in (testbed/meshspec.py); None / -1 otherwise
    pair: tuple[str, str] | None = None
    colour: int = -1
    # site size in cores (testbed/sitecores.py): the CPUs each site may use; 0 when the
    # experiment has no cpus_per_site axis
    cpus: int = 0
    # the RTT and loss axes (testbed/wanaxis.py): this case's values as given ('20ms',
    # '0.1%'); '' when the experiment has no such axis
    rtt: str = ""
    loss: str = ""
    # the rate axis (testbed/wanaxis.py): this case's tbf rate as given ('100mbit'); '' else
    rate: str = ""
    # which of the round's native runs this is (1..Experiment.natives_per_round,
    # spread_natives); 1 for every other case
    native_run: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.case_id, "tunnel": self.tunnel.to_dict(),
                "workload": self.workload.to_dict(), "mtu": self.mtu,
                "offloads": self.offloads.to_dict(), "repeat": self.repeat,
                **({"topology": self.topology} if self.topology else {}),
                **({"pair": list(self.pair), "colour": self.colour} if self.pair else {}),
                **({"cpus_per_site": self.cpus} if self.cpus else {}),
                **({"rtt": self.rtt} if self.rtt else {}),
                **({"loss": self.loss} if self.loss else {}),
                **({"rate": self.rate} if self.rate else {}),
                **({"native_run": self.native_run} if self.native_run > 1 else {})}

    @property
    def through_chain(self) -> bool:
        """Whether this case runs on the experiment's chain (when it has one)."""
        return self.topology != "direct"


def plan(exp: Experiment) -> list[Case]:
    rng = random.Random(exp.seed)
    cases: list[Case] = []
    for rep in range(exp.planned_rounds):
        cases += _round(exp, rep + 1, len(cases), rng)
    return cases


def next_round(exp: Experiment, rep: int, start: int,
               keep: Callable[[Case], bool]) -> list[Case]:
    """Round `rep` of a sequential campaign: the cases `keep` accepts, indexed from `start`
    (the cases already in the campaign), shuffled with a seed of its own under --shuffle."""
    return _round(exp, rep, start, random.Random(f"{exp.seed}-{rep}"), keep)


Entry = tuple[TunnelSpec, WorkloadSpec, int, OffloadVariant, int]


def _round(exp: Experiment, rep: int, start: int, rng: random.Random,
           keep: Callable[[Case], bool] | None = None) -> list[Case]:
    round_: list[Entry] = [
        (t, w, m, o, 1) for m in exp.all_mtus() for o in exp.offloads for t in exp.tunnels
        for w in exp.workloads if m in (w.mtus or exp.mtus)]
    if exp.order == "shuffled":
        rng.shuffle(round_)
        round_.sort(key=lambda c: c[0].kind != "native")  # stable: native first
    elif exp.rtts or exp.losses or exp.rates:   # each scenario's baseline first, as listed
        round_.sort(key=lambda c: c[0].kind != "native")
    round_ = spread_natives(round_, exp.natives_per_round)
    cases: list[Case] = []
    # the scenarios of the axes (site size in cores; RTT x loss; the rate): each in turn, all
    # of a round's cases (native first) at one before the next
    axes = [(k, rtt, loss, rate) for k in exp.cpus_per_site or (0,) for rtt in exp.rtts or ("",)
            for loss in exp.losses or ("",) for rate in exp.rates or ("",)]
    for slot in topologies.of(exp).slots(exp):   # the topology's parts of a round, in order
        for k, rtt, loss, rate in axes:
            for t, w, m, o, run in round_:
                if run > 1 and slot.label_suffix:   # a chain's native is not the reference
                    continue
                i = start + len(cases)
                variant = "" if o.name == "default" else f"-{o.name}"
                pair = f"{slot.pair[0]}-{slot.pair[1]}-" if slot.pair else ""
                via = f"-{slot.topology}" if slot.topology else ""
                cores = f"-cpu{k}" if k else ""
                nrun = f"-n{run}" if run > 1 else ""
                cid = (f"{i:04d}-{pair}{t.label}{nrun}-{w.label}-mtu{m}{variant}{cores}"
                       f"{wanaxis.case_tag(rtt, loss, rate)}{via}-r{rep}")
                if slot.label_suffix:
                    t = replace(t, label=t.label + slot.label_suffix)
                case = Case(i, cid, t, w, m, o, rep, slot.topology, slot.pair, slot.colour,
                            cpus=k, rtt=rtt, loss=loss, rate=rate, native_run=run)
                if keep is None or keep(case):
                    cases.append(case)
    return cases


def spread_natives(round_: list[Entry], runs: int) -> list[Entry]:
    """The round with its native entries measured `runs` times: run 1 where it was, run j
    (2..runs) inserted (j - 1) / runs of the way through the round, so each method is
    paired with natives measured before and after it (docs/methodology.md, "Several natives
    per round"). Native's noise from run to run is the host's, not shared by the methods
    measured minutes later: its geometric mean over a round's runs is what each method's
    share is taken against (results/model.round_reference)."""
    natives = [e for e in round_ if e[0].kind == "native"]
    if runs <= 1 or not natives:
        return round_
    out = list(round_)
    for j in range(runs, 1, -1):   # from the back: earlier positions stay valid
        at = round((j - 1) * len(round_) / runs)
        while 0 < at < len(round_) and round_[at][0] == round_[at - 1][0]:
            at += 1   # not between two cases of one method
        out[at:at] = [(t, w, m, o, j) for t, w, m, o, _ in natives]
    return out
