"""Experiment -> ordered list of cases (tunnel x MTU x offloads x workload x repeat).

A workload with its own `mtus` runs only at those underlay MTUs; the others at the
experiment's. A swept workload (parallel-streams with a list of stream counts) is already one
spec per value here, each with its own label.

Repeats are the outer loop, so every tunnel is measured once per round and slow drift of the
host affects all tunnels alike; within a round the native baseline comes first. With
order = "shuffled" each round is shuffled with the seed (native still first).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from .spec import Experiment, OffloadVariant, TunnelSpec, WorkloadSpec


@dataclass(frozen=True)
class Case:
    index: int
    case_id: str
    tunnel: TunnelSpec
    workload: WorkloadSpec
    mtu: int
    offloads: OffloadVariant
    repeat: int

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "id": self.case_id, "tunnel": self.tunnel.to_dict(),
                "workload": self.workload.to_dict(), "mtu": self.mtu,
                "offloads": self.offloads.to_dict(), "repeat": self.repeat}


def plan(exp: Experiment) -> list[Case]:
    rng = random.Random(exp.seed)
    cases: list[Case] = []
    for rep in range(exp.repeats):
        round_: list[tuple[TunnelSpec, WorkloadSpec, int, OffloadVariant]] = [
            (t, w, m, o) for m in exp.all_mtus() for o in exp.offloads for t in exp.tunnels
            for w in exp.workloads if m in (w.mtus or exp.mtus)]
        if exp.order == "shuffled":
            rng.shuffle(round_)
            round_.sort(key=lambda c: c[0].kind != "native")  # stable: native first
        for t, w, m, o in round_:
            i = len(cases)
            variant = "" if o.name == "default" else f"-{o.name}"
            cid = f"{i:04d}-{t.label}-{w.label}-mtu{m}{variant}-r{rep + 1}"
            cases.append(Case(i, cid, t, w, m, o, rep + 1))
    return cases
