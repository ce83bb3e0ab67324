"""The topology registry (topologies/): pair, hub and chain declare how an experiment picks
them, their settings, what they need and the tunnel kinds they run; every declaration is
checked against what the code does (the spec accepts and refuses the kinds a topology says it
runs; the settings are the keys and flags the parsers take; doctor knows every tool and kernel
option), and `tunbench list --topologies` shows them, also as JSON."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest

import cli_inproc
from tunbench import cli, doctor, proc, topologies, tunnels
from tunbench import spec as exp_spec
from tunbench.errors import SpecError
from tunbench.plan import plan
from tunbench.testbed import hubspec, meshspec

TB = [sys.executable, "-m", "tunbench"]
HOSTS = {"a": "root@h1", "b": "root@h2"}
KINDS = sorted(tunnels.registry())


def _accepted(data: dict) -> bool:
    try:
        exp_spec.build(data, "e.toml")
    except SpecError:
        return False
    return True


def test_the_registry_holds_pair_hub_and_chain_with_whole_declarations() -> None:
    reg = topologies.registry()
    assert set(reg) == {"pair", "hub", "chain", "mesh"}
    # every tool has its install hint (doctor lists the tunnel kinds' and workloads' tools,
    # not the chain functions' nft), every kernel option is one doctor checks
    known_tools, known_kernel = set(proc.TOOL_PACKAGES), set(doctor.kernel_options())
    for name, topo in reg.items():
        d = topo.describe()
        assert topo.name == name and d["summary"] and d["chosen_by"], name
        assert d["params"] and all(p["key"] and p["default"] and p["help"]
                                   for p in d["params"]), name
        assert set(d["needs"]["tools"]) <= known_tools, name
        assert set(d["needs"]["kernel"]) <= known_kernel, name
        assert d["tunnel_kinds"]["here"] and set(d["tunnel_kinds"]["here"]) <= set(KINDS)
        assert json.loads(json.dumps(d)) == d
    with pytest.raises(SpecError) as exc:
        topologies.get("ring")
    assert exc.value.one_line() == ("unknown topology 'ring' (known topologies: chain, hub, "
                                    "mesh, pair; see `tunbench list --topologies`)")


def test_the_settings_are_the_keys_and_flags_the_parsers_take() -> None:
    flags = {o for a in cli.build_parser()._subparsers._group_actions[0]   # type: ignore[union-attr]
             .choices["run"]._actions for o in a.option_strings}
    for topo in topologies.registry().values():
        for p in topo.params:
            table, _, keys = p.key.partition("] ")
            for key in keys.split(", "):
                if table == "[testbed":
                    assert key in hubspec.KEYS + meshspec.KEYS, p.key
                elif table == "[chain":
                    assert key in ("path", "direct"), p.key
                else:
                    assert table == "[sites", p.key
            for flag in (p.flag or "").split():
                if flag.startswith("--"):
                    assert flag.split("=")[0] in flags, flag
    hub = topologies.get("hub")
    assert {f"[testbed] {k}" for k in hubspec.KEYS} <= {p.key for p in hub.params}
    assert {p.flag for p in hub.params} >= set(hubspec.FLAGS.values())


@pytest.mark.parametrize("kind", KINDS)
def test_each_topology_runs_the_kinds_it_says(kind: str) -> None:
    """What tunnel_kinds() declares is what the experiment parser accepts."""
    hub, chain, pair = (topologies.get(n) for n in ("hub", "chain", "pair"))
    assert _accepted({"testbed": {"kind": "hub", "spokes": 2}, "tunnel": [{"kind": kind}],
                      "workload": [{"name": "stream"}]}) == (kind in hub.tunnel_kinds())
    assert _accepted({"chain": {"path": ["router"]}, "tunnel": [{"kind": kind}]}) == (
        kind in chain.tunnel_kinds(on_hosts=False))
    assert _accepted({"sites": HOSTS, "chain": {"path": ["wan"]},
                      "tunnel": [{"kind": kind}]}) == (kind in chain.tunnel_kinds(True))
    gw = {"kind": "gateway", "tunnel": kind}
    gateway_line = None
    try:
        exp_spec.build({"chain": {"path": ["gwa", "wan", "gwb"], "gwa": gw,
                                  "gwb": dict(gw)}}, "e.toml")
    except SpecError as exc:
        gateway_line = exc.one_line()
    cannot = gateway_line is not None and "cannot be a gateway" in gateway_line
    assert cannot == (kind not in chain.gateway_kinds()), gateway_line
    assert _accepted({"tunnel": [{"kind": kind}]}) == (kind in pair.tunnel_kinds())
    mesh = topologies.get("mesh")
    assert _accepted({"testbed": {"kind": "mesh", "sites": 3}, "tunnel": [{"kind": kind}]}) \
        == (kind in mesh.tunnel_kinds())
    assert _accepted({"testbed": {"kind": "mesh"}, "tunnel": [{"kind": kind}],
                      "sites": {"s1": "root@h1", "s2": "root@h2", "s3": "root@h3"}}) \
        == (kind in mesh.tunnel_kinds(on_hosts=True))
    assert (kind in pair.tunnel_kinds(on_hosts=True)) == (not tunnels.get(kind).not_on_hosts)


def test_exactly_one_topology_takes_each_case() -> None:
    pair_exp = exp_spec.build({"tunnel": [{"kind": "vxlan"}]}, "e.toml")
    hub_exp = exp_spec.build({"testbed": {"kind": "hub", "spokes": 2},
                              "tunnel": [{"kind": "vxlan"}], "workload": [{"name": "stream"}]},
                             "e.toml")
    chain_exp = exp_spec.build({"chain": {"path": ["router"], "direct": True},
                                "tunnel": [{"kind": "vxlan"}],
                                "workload": [{"name": "stream"}]}, "e.toml")
    assert topologies.of(pair_exp).name == "pair"
    assert topologies.of(hub_exp).name == "hub"
    mesh_exp = exp_spec.build({"testbed": {"kind": "mesh", "sites": 3},
                               "tunnel": [{"kind": "vxlan"}]}, "e.toml")
    assert topologies.of(mesh_exp).name == "mesh"
    cases = plan(chain_exp)
    got = {(c.through_chain, topologies.of(chain_exp, c.through_chain).name) for c in cases}
    assert got == {(True, "chain"), (False, "pair")}   # direct = true: both in one campaign


def test_list_topologies_shows_each_and_its_json_parses() -> None:
    r = subprocess.run(TB + ["list", "--topologies"], capture_output=True, text=True,
                       timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin",
                                        "PYTHONPATH": ":".join(sys.path)})
    assert r.returncode == 0, r.stderr
    for name in ("pair", "hub", "chain"):
        assert name in r.stdout
    assert "[testbed] spokes (--spokes) = 10" in r.stdout
    assert "gateways: " + ", ".join(topologies.get("chain").gateway_kinds()) in r.stdout
    r = cli_inproc.tunbench("list", "--topologies", "--json")
    doc = json.loads(r.stdout)
    assert doc["format"] == "tunbench-list" and set(doc["topologies"]) == {"pair", "hub", "chain",
                                                                    "mesh"}
    assert doc["topologies"]["hub"]["tunnel_kinds"]["here"] == list(tunnels.hub_kinds())
    assert doc["topologies"]["hub"]["workloads"] == list(hubspec.HUB_WORKLOADS)
    r = cli_inproc.tunbench("list", "--topologies", "ring")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "tunbench: unknown topology 'ring' (known topologies: chain, hub, mesh, pair; see "
        "`tunbench list --topologies`)"]


# -- building: runner.run_case dispatches once, through the topology the case runs on -------

def _exp(name: str) -> exp_spec.Experiment:
    data = {"pair": {"tunnel": [{"kind": "vxlan"}], "workload": [{"name": "stream"}]},
            "hub": {"testbed": {"kind": "hub", "spokes": 2}, "tunnel": [{"kind": "vxlan"}],
                    "workload": [{"name": "stream"}]},
            "chain": {"chain": {"path": ["router"]}, "tunnel": [{"kind": "vxlan"}]},
            "mesh": {"testbed": {"kind": "mesh", "sites": 3}, "tunnel": [{"kind": "vxlan"}]}}
    return exp_spec.build(data[name], "e.toml")


def test_every_topology_builds_and_what_measures_itself_records() -> None:
    from tunbench.topologies.base import Topology
    for name, topo in topologies.registry().items():
        assert topo.build.__func__ is not Topology.build.__func__, name  # type: ignore[attr-defined]
        own = (topo.measure.__func__ is not Topology.measure.__func__,  # type: ignore[attr-defined]
               topo.record.__func__ is not Topology.record.__func__)  # type: ignore[attr-defined]
        assert own == (topo.measures_itself, topo.measures_itself), name
    assert [n for n, t in sorted(topologies.registry().items()) if t.measures_itself] == ["hub"]


def test_run_case_has_no_branch_on_the_topology() -> None:
    """runner.run_case asks topologies.of once: no test of exp.hub / exp.chain / exp.mesh /
    case.pair in it, and the runner imports no topology's own builder or case module."""
    import ast
    import inspect

    from tunbench import runner
    fn = ast.parse(inspect.getsource(runner.run_case))
    tested = {ast.unparse(n) for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    assert not tested & {"exp.hub", "exp.chain", "exp.mesh", "case.pair"}, tested
    assert "topologies.of(exp, case.through_chain)" in ast.unparse(fn)
    imported = {ast.unparse(n) for n in ast.walk(ast.parse(inspect.getsource(runner)))
                if isinstance(n, (ast.Import, ast.ImportFrom))}
    for mod in ("hubcase", "mesh", "chain import build"):
        assert not [i for i in imported if mod in i], (mod, imported)


# the modules around the cases: which topology an experiment has is asked of topologies.of
# only (preflight, opening the hosts, the plan, the dry run)
SETTERS = {"spec.py",      # the parser that sets exp.hub / exp.chain / exp.mesh
           "hubcase.py"}   # the hub's own measurement, reached only through topologies/hub.py


def _reads_the_shape(tree: ast.AST) -> list[str]:
    """Every `exp.hub` / `exp.chain` / `exp.mesh` (or getattr(exp, "mesh", ...)) in `tree`."""
    out = []
    for n in ast.walk(tree):
        attr = (isinstance(n, ast.Attribute) and n.attr in SHAPES
                and isinstance(n.value, ast.Name) and n.value.id in ("exp", "experiment"))
        call = (isinstance(n, ast.Call) and ast.unparse(n.func) == "getattr" and len(n.args) > 1
                and isinstance(n.args[1], ast.Constant) and n.args[1].value in SHAPES)
        if attr or call:
            out.append(f"{n.lineno}: {ast.unparse(n)}")
    return out


SHAPES = ("hub", "chain", "mesh")


def test_no_module_outside_topologies_tests_which_topology_an_experiment_has() -> None:
    """runner (preflight, open_topology, run_case), plan and cli (the dry run) go through the
    experiment's topology: its requirements, open, slots and plan_text; no module outside
    topologies/ reads exp.hub / exp.chain / exp.mesh, and runner and plan import no
    topology's own modules."""
    import inspect
    from pathlib import Path

    from tunbench import plan as plan_mod
    from tunbench import runner
    src = Path(inspect.getfile(topologies)).parents[1]
    found = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel.parts[0] == "topologies" or rel.name in SETTERS and len(rel.parts) == 1:
            continue
        hits = _reads_the_shape(ast.parse(path.read_text()))
        if hits:
            found[str(rel)] = hits
    assert not found, found
    assert "topologies.of(exp).requirements(exp)" in ast.unparse(
        ast.parse(inspect.getsource(runner.preflight)))
    assert "topologies.of(exp).open(exp" in ast.unparse(
        ast.parse(inspect.getsource(runner.open_topology)))
    assert "topologies.of(exp).slots(exp)" in inspect.getsource(plan_mod._round)
    assert "topologies.of(exp).plan_text(exp)" in inspect.getsource(cli._dry_run)
    # the runner keeps chain.hops (the per-hop figures of a testbed whose notes have a chain)
    for mod, own in ((runner, ("hubcase", "mesh", "hubspec", "chain import build",
                               "chain import hosts")),
                     (plan_mod, ("hubcase", "mesh", "hubspec", "chain"))):
        imported = {ast.unparse(n) for n in ast.walk(ast.parse(inspect.getsource(mod)))
                    if isinstance(n, (ast.Import, ast.ImportFrom))}
        for name in own:
            assert not [i for i in imported if name in i], (mod.__name__, name, imported)
    # the checker sees what it looks for
    assert sorted(_reads_the_shape(ast.parse("if exp.chain is not None and getattr(exp, "
                                             "'mesh'): pass"))) == [
        "1: exp.chain", "1: getattr(exp, 'mesh')"]


def test_each_topology_shapes_its_campaign() -> None:
    """The hooks around the cases, on parsed experiments: what preflight adds, how a round is
    divided (and so the case ids and labels), what the dry run prints, and the default open
    refusing hosts in one line."""
    from tunbench.chain import hops as chain_hops
    from tunbench.topologies.base import Slot, Topology
    pair, hub, chain, mesh = (topologies.get(n) for n in ("pair", "hub", "chain", "mesh"))
    chain_exp = _exp("chain")
    assert chain.requirements(chain_exp) == chain_hops.requirements(["router"])
    assert pair.requirements(_exp("pair")) == hub.requirements(_exp("hub")) == []
    assert pair.slots(_exp("pair")) == hub.slots(_exp("hub")) == chain.slots(chain_exp) \
        == (Slot(),)
    direct = dataclasses.replace(chain_exp, chain=dataclasses.replace(chain_exp.chain,
                                                                      direct=True))
    assert chain.slots(direct) == (Slot("direct"), Slot("chain", label_suffix=" via chain"))
    # each round: every case direct, then every case through the chain (round 1 here)
    once = [c for c in plan(chain_exp) if c.repeat == 1]
    both = [c for c in plan(direct) if c.repeat == 1]
    assert len(both) == 2 * len(once) and once
    for c, d, x in zip(once, both[:len(once)], both[len(once):], strict=True):
        base = c.case_id[5:].removesuffix(f"-r{c.repeat}")
        assert (d.topology, d.tunnel.label, d.case_id) == (
            "direct", c.tunnel.label, f"{d.index:04d}-{base}-direct-r{c.repeat}")
        assert (x.topology, x.tunnel.label, x.case_id) == (
            "chain", c.tunnel.label + " via chain", f"{x.index:04d}-{base}-chain-r{c.repeat}")
    mesh_exp = _exp("mesh")
    slots = mesh.slots(mesh_exp)
    assert [s.pair for s in slots] == [tuple(p) for sl in mesh_exp.mesh.schedule()
                                       for p in sl["pairs"]]
    assert {s.pair for s in slots} == {("s1", "s2"), ("s1", "s3"), ("s2", "s3")}
    cases = [c for c in plan(mesh_exp) if c.repeat == 1]
    assert [c.pair for c in cases] == [s.pair for s in slots for _ in range(len(cases) // 3)]
    assert all(c.case_id.split("-")[1:3] == list(c.pair) for c in cases)
    assert mesh.plan_text(mesh_exp)[0] == ("mesh: 3 sites, 3 pair(s), 3 colour(s) of disjoint "
                                           "pairs; on this host one pair at a time")
    assert len(mesh.plan_text(mesh_exp)) == 1 + 3
    assert pair.plan_text(_exp("pair")) == chain.plan_text(chain_exp) == []
    # every registered topology opens its hosts itself (the mesh: testbed/meshhosts.py); the
    # contract's default, for one that is not built on hosts, refuses in one line
    assert all(t.open.__func__ is not Topology.open.__func__ for t in (pair, chain, hub, mesh))

    class Here(Topology):
        name = "here-only"
    with pytest.raises(SpecError) as exc:
        Here.open(mesh_exp, None)   # type: ignore[arg-type]
    assert exc.value.one_line() == ("the here-only topology runs on this host's namespaces "
                                    "only so far (leave [sites] / --site out)")


@pytest.mark.parametrize(("name", "bad", "line"), [
    ("pair", lambda e, c: (e, dataclasses.replace(c, mtu=100), None),
     "underlay MTU 100 is not an MTU from 1280 to 65535 (give --mtu / experiment.mtus "
     "within that range)"),
    ("hub", lambda e, c: (dataclasses.replace(e, hub=dataclasses.replace(e.hub, spokes=0)),
                          c, None),
     "spokes 0 is not within 1..1000 (give 1..1000 spokes (underlay /30s fit "
     "198.18.0.0/16))"),
    ("hub", lambda e, c: (e, c, object()),
     "the hub's sites were not opened as a hub and its spokes (give [sites] hub, s1..sN: "
     "runner.open_topology opens them so)"),
    ("chain", lambda e, c: (dataclasses.replace(e, chain=dataclasses.replace(
        e.chain, hops=tuple(dataclasses.replace(h, kind="ids") for h in e.chain.hops))),
        c, None),
     "chain function kind(s) ids unknown (known: firewall, gateway, nat, router, wan)"),
    ("mesh", lambda e, c: (e, dataclasses.replace(c, pair=("s1", "s9")), None),
     "mesh pair s1-s9 is not two sites of s1..s3 (measure the pairs the mesh's schedule "
     "plans)"),
    ("mesh", lambda e, c: (e, dataclasses.replace(c, mtu=9000), None),
     "the mesh's underlay MTU is 1500, not 9000 (leave --mtu / experiment.mtus out)"),
    ("mesh", lambda e, c: (e, c, object()),
     "a mesh on this host's namespaces takes no hosts opened over SSH (give [sites] s1..sN "
     "to put its sites on hosts)"),
], ids=["pair-mtu", "hub-spokes", "hub-hosts", "chain-kind", "mesh-pair", "mesh-mtu",
        "mesh-hosts"])
def test_check_refuses_in_one_line(name: str, bad: Any, line: str) -> None:
    """What `build` refuses before making anything (pure: check runs first; the live
    contract test, tests/netns/test_topology_contract.py, shows nothing changes)."""
    exp = _exp(name)
    exp, case, hosts = bad(exp, plan(exp)[0])
    topo = topologies.of(exp, case.through_chain)
    assert topo.name == name
    with pytest.raises(SpecError) as exc:
        topo.check(exp, case, hosts)
    assert exc.value.one_line() == line
    good = _exp(name)
    topo.check(good, plan(good)[0], None)   # the parser's own cases pass


def test_what_each_topology_says_and_records_of_a_case() -> None:
    from tunbench import hubcase, runner
    hub_exp, mesh_exp, pair_exp = _exp("hub"), _exp("mesh"), _exp("pair")
    hub_case, mesh_case = plan(hub_exp)[0], plan(mesh_exp)[0]
    assert topologies.get("hub").setup_text(hub_exp, hub_case) == \
        "hub testbed with 2 spokes here"
    assert topologies.get("pair").setup_text(pair_exp, plan(pair_exp)[0]) == \
        "testbed and vxlan tunnel"
    # the estimate: a hub case measures twice (one spoke, then all at once)
    one = runner.case_plans(pair_exp, plan(pair_exp)[:1])[0].workload_s
    assert runner.case_plans(hub_exp, [hub_case])[0].workload_s == 2 * one
    assert topologies.get("mesh").sections(mesh_exp, mesh_case) == {
        "mesh": {"pair": list(mesh_case.pair), "colour": mesh_case.colour,
                 "parallel": False, "sites": 3}}
    assert topologies.get("pair").sections(pair_exp, plan(pair_exp)[0]) == {}
    # a hub case whose build failed: what hubcase.run_case recorded before
    assert hubcase.record(hub_case, None) == {
        "testbed": None, "tunnel": {"kind": "vxlan", "mtu": 1450, "overhead": 50, "info": {}},
        "metrics": {}, "series": {}, "cpu": None, "counters": None, "raw": {},
        "offloads": None, "sections": {}}
    assert topologies.get("hub").log_tails(None) is None
    assert topologies.get("pair").log_tails(None) is None
