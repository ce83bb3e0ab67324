"""The topology contract, run over EVERY registered topology (topologies/), as
test_driver_contract.py is over the tunnel kinds.

For each local topology (pair, hub, chain, mesh):
- bad input is refused in one line, exit 2, before anything changes: by the experiment
  parser (`tunbench run`), and by the topology's own `build` (and so by runner.run_case,
  which dispatches through it) for a case the parser never makes;
- `build` puts every namespace it makes in the ledger, the testbed answers a ping across it,
  and the ledger alone (no sweep) undoes it: no namespace, root link, bridge, state file or
  owner file of the run id is left.
No traffic beyond one ping: the live tests of each topology measure.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tunbench import hubcase, proc, runner, topologies
from tunbench import spec as exp_spec
from tunbench.capabilities import root_missing
from tunbench.errors import SpecError
from tunbench.plan import Case, plan
from tunbench.spec import Experiment
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import OWNERS_DIR, STATE_DIR, Ledger

pytestmark = [pytest.mark.correctness,
              pytest.mark.skipif(root_missing() is not None, reason="needs root")]

TB = [sys.executable, "-m", "tunbench"]
STREAM = {"workload": [{"name": "stream"}], "experiment": {"repeats": 1}}

# a small experiment each topology is chosen by (as a file gives it)
GOOD: dict[str, dict[str, Any]] = {
    "pair": {"tunnel": [{"kind": "native"}], **STREAM},
    "hub": {"testbed": {"kind": "hub", "spokes": 2}, "tunnel": [{"kind": "native"}], **STREAM},
    "chain": {"chain": {"path": ["router"]}, "tunnel": [{"kind": "native"}], **STREAM},
    "mesh": {"testbed": {"kind": "mesh", "sites": 3}, "tunnel": [{"kind": "native"}],
             **STREAM},
}

# bad input the experiment parser refuses: (the file's tables, words of the one line)
BAD_FILE: dict[str, tuple[str, str]] = {
    "pair": ('[experiment]\nmtus = [100]\n[[tunnel]]\nkind = "native"\n', "is not an MTU"),
    "hub": ('[testbed]\nkind = "hub"\nspokes = 0\n[[tunnel]]\nkind = "native"\n'
            '[[workload]]\nname = "stream"\n', "testbed.spokes must be an integer from 1"),
    "chain": ('[chain]\npath = ["router", "ids"]\n[[tunnel]]\nkind = "native"\n',
              "unknown function kind 'ids'"),
    "mesh": ('[testbed]\nkind = "mesh"\nsites = 2\n[[tunnel]]\nkind = "native"\n',
             "testbed.sites must be an integer from 3"),
}


def _bad_case(name: str) -> Callable[[Experiment, Case], tuple[Experiment, Case, str]]:
    """A case the parser never makes, that the topology's own `check` refuses: (experiment,
    case, words of the one line)."""
    def pair(exp: Experiment, case: Case) -> tuple[Experiment, Case, str]:
        return exp, dataclasses.replace(case, mtu=100), "underlay MTU 100 is not an MTU"

    def hub(exp: Experiment, case: Case) -> tuple[Experiment, Case, str]:
        assert exp.hub is not None
        return (dataclasses.replace(exp, hub=dataclasses.replace(exp.hub, spokes=0)), case,
                "spokes 0 is not within 1..")

    def chain(exp: Experiment, case: Case) -> tuple[Experiment, Case, str]:
        assert exp.chain is not None
        hops = tuple(dataclasses.replace(h, kind="ids") for h in exp.chain.hops)
        return (dataclasses.replace(exp, chain=dataclasses.replace(exp.chain, hops=hops)),
                case, "chain function kind(s) ids unknown")

    def mesh(exp: Experiment, case: Case) -> tuple[Experiment, Case, str]:
        return exp, dataclasses.replace(case, pair=("s1", "s9")), "mesh pair s1-s9 is not"

    return {"pair": pair, "hub": hub, "chain": chain, "mesh": mesh}[name]


LOCAL = sorted(GOOD)


def test_every_topology_has_its_rows_here() -> None:
    """A new topology adds its experiment and its bad inputs to this test."""
    assert set(topologies.registry()) == set(GOOD) == set(BAD_FILE)


def _ours() -> tuple[set[str], set[str]]:
    return ({n for n in netlink.list_netns() if names.is_ours_netns(n)},
            {n for n in netlink.link_names(None) if names.is_ours_link(n)})


def _bridges() -> list[str]:
    r = proc.run(["ip", "-j", "link", "show", "type", "bridge"], timeout=10)
    return [d["ifname"] for d in json.loads(r.stdout or "[]")]


def _left(rid: str) -> list[str]:
    """Everything of run id `rid` on this host: namespaces, root links and bridges, its state
    directory and journal, its owner file."""
    left = [f"netns {n}" for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
    left += [f"link {n}" for n in netlink.link_names(None) if n.startswith(f"tb{rid}")]
    left += [f"bridge {n}" for n in _bridges() if n.startswith(f"tb{rid}")]
    left += [str(p) for p in (STATE_DIR / rid, STATE_DIR / f"{rid}.jsonl", OWNERS_DIR / rid)
             if p.exists()]
    return left


def _setup(name: str) -> tuple[type[topologies.Topology], Experiment, Case]:
    exp = exp_spec.build(GOOD[name], f"{name}.toml")
    case = plan(exp)[0]
    shape = topologies.of(exp, case.through_chain)
    assert shape.name == name
    return shape, exp, case


@pytest.mark.parametrize("name", LOCAL)
def test_bad_file_refused_in_one_line_before_anything(name: str, tmp_path: Path) -> None:
    body, needle = BAD_FILE[name]
    exp = tmp_path / "e.toml"
    exp.write_text(body)
    before = _ours()
    state = tmp_path / "state"
    r = subprocess.run(TB + ["run", "--experiment", str(exp), "--out", str(tmp_path / "out"),
                             "--db", "off"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "TUNBENCH_STATE_DIR": str(state)})
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunbench: ") and needle in lines[0], lines
    assert _ours() == before
    assert not state.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", LOCAL)
def test_build_refuses_a_bad_case_in_one_line_before_anything(name: str) -> None:
    """The topology's own check, first in `build`; and runner.run_case, dispatching through
    the registry, records it as the case's one-line error with nothing built or left."""
    shape, exp, case = _setup(name)
    exp, case, needle = _bad_case(name)(exp, case)
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    before = _ours()
    with pytest.raises(SpecError) as exc:
        shape.build(exp, case, rid, ledger, None)
    line = exc.value.one_line()
    assert needle in line and "\n" not in line and "(" in line, line   # the problem and fix
    assert ledger.entries == [] and _ours() == before and not _left(rid)
    assert ledger.close() == []
    doc = runner.run_case(exp, case)
    assert doc["status"] == "failed" and doc["error"] == line, doc["error"]
    assert doc["testbed"] is None and doc["notes"] == [], doc["notes"]
    assert _ours() == before and not _left(doc["case"]["run_id"])


def _ping(built: Any) -> None:
    """One ping across the testbed: a to b, or the hub to its first spoke."""
    if isinstance(built, Testbed):
        built.a.run(["ping", "-c", "1", "-W", "2", "-n", built.b.underlay4], timeout=10)
    else:
        assert isinstance(built, hubcase.HubBed)
        built.hub.run(["ping", "-c", "1", "-W", "2", "-n", built.hub.spokes[0].underlay4],
                      timeout=10)


@pytest.mark.parametrize("name", LOCAL)
def test_build_and_undo_through_the_ledger_leave_nothing(name: str,
                                                        root_unchanged: None) -> None:
    shape, exp, case = _setup(name)
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        built = shape.build(exp, case, rid, ledger, None)
        assert isinstance(built, Testbed) != shape.measures_itself
        made = {n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")}
        recorded = {e["name"] for e in ledger.entries if e["kind"] == "netns"}
        assert made and made == recorded, (made, recorded)   # every namespace in the ledger
        _ping(built)
        errors = ledger.close()   # the ledger alone: no sweep before the check
        assert errors == [], errors
        assert not _left(rid), f"left behind: {_left(rid)}"
    finally:
        ledger.close()
        local.sweep(rid)   # a failed assertion above must not leave the testbed behind
