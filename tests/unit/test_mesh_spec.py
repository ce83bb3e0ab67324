"""The mesh testbed's spec and schedule without root: `[testbed] kind = "mesh"` and
`--testbed mesh --sites N` refused in one line naming the fix (exit 2 through the CLI) before
anything is created; the schedule an edge colouring of the pair graph (every pair exactly
once, each colour a matching, at most max degree + 1 colours); the plan runs pair by pair,
native first within each pair; `--dry-run` prints the schedule."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest

import cli_inproc
from tunbench import runner, sequential
from tunbench import spec as exp_spec
from tunbench.cli import _spec_dict
from tunbench.errors import SpecError
from tunbench.plan import Case, next_round, plan
from tunbench.testbed import meshspec


def refused(data: dict) -> str:
    with pytest.raises(SpecError) as exc:
        exp_spec.build(data, "e.toml")
    line = exc.value.one_line()
    assert "\n" not in line
    return line


def mesh(**tb: object) -> dict:
    return {"testbed": {"kind": "mesh", **tb}, "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}]}


def test_a_mesh_is_parsed_recorded_and_rebuilt_on_resume() -> None:
    exp = exp_spec.build(mesh(sites=4), "e.toml")
    assert exp.mesh is not None and exp.hub is None
    assert exp.mesh.pairs == (("s1", "s2"), ("s1", "s3"), ("s1", "s4"), ("s2", "s3"),
                              ("s2", "s4"), ("s3", "s4"))
    assert exp.to_dict()["testbed"] == {"kind": "mesh", "sites": 4, "pairs": "all",
                                        "directions": "one"}
    assert exp_spec.build(_spec_dict(exp.to_dict()), "e.toml").mesh == exp.mesh
    listed = exp_spec.build(mesh(sites=3, pairs=["s2-s1", "s2-s3"], directions="both"), "e")
    assert listed.mesh is not None and listed.mesh.pairs == (("s1", "s2"), ("s2", "s3"))
    assert listed.to_dict()["testbed"]["pairs"] == ["s1-s2", "s2-s3"]
    assert exp_spec.build(_spec_dict(listed.to_dict()), "e.toml").mesh == listed.mesh


@pytest.mark.parametrize(("tb", "line"), [
    ({"sites": 2}, "e.toml: testbed.sites must be an integer from 3 to 32, got 2 (a mesh of "
                   "2 sites is the pair testbed: leave --testbed out) (fix the values named "
                   "above; nothing was changed)"),
    ({}, "e.toml: testbed.sites is missing: a mesh needs its number of sites (--sites N or "
         "[testbed] sites = N, N >= 3) (fix the values named above; nothing was changed)"),
    ({"sites": 3, "pairs": ["s1-s4"]},
     "e.toml: testbed.pairs: 's1-s4' names unknown site(s) s4 (this mesh has s1..s3: raise "
     "--sites or fix the pair) (fix the values named above; nothing was changed)"),
    ({"sites": 3, "pairs": ["s1-s2", "s2-s1"]},
     "e.toml: testbed.pairs: 's2-s1' is the same pair as 's1-s2' (list each pair once; "
     "directions = \"both\" measures both ways) (fix the values named above; nothing was "
     "changed)"),
    ({"sites": 3, "pairs": ["s1-s1"]},
     "e.toml: testbed.pairs: 's1-s1' pairs a site with itself (name two different sites) "
     "(fix the values named above; nothing was changed)"),
    ({"sites": 3, "pairs": "some"},
     "e.toml: testbed.pairs must be \"all\" or a non-empty list like [\"s1-s2\", \"s2-s3\"], "
     "got 'some' (fix the values named above; nothing was changed)"),
    ({"sites": 3, "parallel": True},
     "e.toml: testbed.parallel = true needs the sites on hosts: on this host's namespaces "
     "every pair shares one host's CPUs, so pairs run one after another (leave parallel out, "
     "or give [sites] s1..sN / --site s1=USER@HOST ... one host each) (fix the values named "
     "above; nothing was changed)"),
    ({"sites": 3, "parallel": "yes"},
     "e.toml: testbed.parallel must be true or false, got 'yes' (fix the values named "
     "above; nothing was changed)"),
    ({"sites": 3, "directions": "up"},
     "e.toml: testbed.directions must be \"one\" or \"both\", got 'up' (fix the values "
     "named above; nothing was changed)"),
])
def test_bad_mesh_input_is_refused_in_one_line(tb: dict, line: str) -> None:
    assert refused(mesh(**tb)) == line


def test_a_kind_the_mesh_cannot_run_is_refused_naming_those_it_can() -> None:
    data = mesh(sites=3)
    data["tunnel"] = [{"kind": "native"}, {"kind": "wireguard"}]
    assert refused(data) == (
        "e.toml: tunnel kind(s) wireguard are not mesh-capable (the mesh runs native, vxlan; "
        "leave the others out or use the pair testbed) (fix the values named above; nothing "
        "was changed)")


@pytest.mark.parametrize(("tb", "sites", "line"), [
    ({"sites": 3}, {"a": "root@h1", "b": "root@h2"},
     "e.toml: site(s) a, b are not mesh sites (name them s1..sN, one host each: --site "
     "s1=USER@HOST --site s2=USER@HOST ...)"),
    ({}, {"s1": "root@h1", "s2": "root@h2", "s4": "root@h4"},
     "e.toml: mesh sites must be s1..sN without gaps: s3 is missing (given: s1, s2, s4)"),
    ({}, {"s1": "root@h1", "s2": "local", "s3": "local"},
     "e.toml: sites.s2 and sites.s3 are both 'local': this host's network stack is one site "
     "(a tunnel needs two network stacks); give sites.s3 a host of its own"),
    ({"sites": 4}, {"s1": "root@h1", "s2": "root@h2", "s3": "root@h3"},
     "e.toml: testbed.sites is 4 but [sites] gives 3 host(s) (s1..s3): give one host per "
     "site, or leave testbed.sites out"),
    ({}, {"s1": "root@h1", "s2": "root@h2"},
     "e.toml: testbed.sites must be an integer from 3 to 32, got 2 (a mesh of 2 sites is "
     "the pair testbed: leave --testbed out)"),
])
def test_bad_mesh_sites_on_hosts_are_refused_in_one_line(tb: dict, sites: dict,
                                                        line: str) -> None:
    assert refused({**mesh(**tb), "sites": sites}) == (
        line + " (fix the values named above; nothing was changed)")


def test_a_mesh_on_hosts_takes_its_sites_from_sites_and_is_rebuilt_on_resume() -> None:
    hosts = {f"s{i}": f"root@h{i}" for i in range(1, 5)}
    exp = exp_spec.build({**mesh(), "sites": hosts}, "e.toml")
    assert exp.mesh is not None and exp.mesh.sites == 4 and len(exp.mesh.pairs) == 6
    assert {n: s.target for n, s in exp.sites.items()} == hosts
    again = exp_spec.build(_spec_dict(exp.to_dict()), "e.toml")
    assert again.mesh == exp.mesh and again.sites == exp.sites
    data = {**mesh(), "sites": hosts}
    data["tunnel"] = [{"kind": "native"}, {"kind": "wireguard"}]
    assert "wireguard are not mesh-capable" in refused(data)


def test_the_cli_refuses_with_exit_2_naming_the_flag_and_changes_nothing() -> None:
    r = cli_inproc.tunbench("run", "--testbed", "mesh", "--sites", "2", "--tunnels", "native,vxlan",
                            "--dry-run")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "tunbench: --sites must be an integer from 3 to 32, got 2 (a mesh of 2 sites is the "
        "pair testbed: leave --testbed out) (fix the values named above; nothing was changed)"]


def _check_colouring(edges: list[tuple[str, str]], colours: list[list[tuple[str, str]]]
                     ) -> None:
    flat = [e for c in colours for e in c]
    assert sorted(flat) == sorted(edges)                           # every pair exactly once
    for c in colours:                                              # each colour a matching
        sites = [s for e in c for s in e]
        assert len(sites) == len(set(sites)), c
    degree: dict[str, int] = {}
    for a, b in edges:
        degree[a], degree[b] = degree.get(a, 0) + 1, degree.get(b, 0) + 1
    assert len(colours) <= max(degree.values()) + 1


@pytest.mark.parametrize("seed", range(200))
def test_the_edge_colouring_of_any_pair_graph(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"s{i}" for i in range(1, rng.randint(3, 14) + 1)]
    every = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    edges = rng.sample(every, rng.randint(1, len(every)))
    _check_colouring(edges, meshspec.colour_edges(edges))


@pytest.mark.parametrize("n", range(3, 12))
def test_every_pair_takes_the_fewest_colours(n: int) -> None:
    names = tuple(f"s{i}" for i in range(1, n + 1))
    every = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    colours = meshspec.round_robin(names)
    _check_colouring(every, colours)
    assert len(colours) == (n - 1 if n % 2 == 0 else n)   # the chromatic index of K_n


def test_the_plan_runs_pair_by_pair_native_first_in_schedule_order() -> None:
    exp = exp_spec.build({**mesh(sites=4, directions="both"),
                          "experiment": {"repeats": 2}}, "e.toml")
    assert exp.mesh is not None
    cases = plan(exp)
    assert len(cases) == 2 * 12 * 2          # rounds x directed pairs x kinds
    order = [s for slot in exp.mesh.schedule() for s in slot["pairs"]]
    for rnd in (1, 2):
        mine = [c for c in cases if c.repeat == rnd]
        assert [list(c.pair) for c in mine[::2]] == order
        assert [c.tunnel.kind for c in mine] == ["native", "vxlan"] * 12
        assert all(c.to_dict()["pair"] == list(c.pair) for c in mine)
    assert len({c.case_id for c in cases}) == len(cases)


def test_dry_run_prints_the_schedule() -> None:
    r = cli_inproc.tunbench("run", "--testbed", "mesh", "--sites", "4", "--tunnels", "native,vxlan",
                            "--workloads", "stream", "--repeats", "1", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == ("mesh: 4 sites, 6 pair(s), 3 colour(s) of disjoint pairs; on this "
                        "host one pair at a time")
    assert lines[2:5] == ["  colour 0: s1-s4, s2-s3", "  colour 1: s1-s3, s2-s4",
                          "  colour 2: s1-s2, s3-s4"]
    assert "  0000-s1-s4-native-stream-mtu1500-r1" in lines


def _mesh_doc(case: Case, value: float) -> dict:
    """A case document as the runner writes it, the fields the sequential rule reads."""
    return {"case": {**case.to_dict(), "workload": {**case.to_dict()["workload"],
                                                     "headline": ["throughput"]}},
            "status": "ok", "started": 0.0, "ended": 3.0,
            "metrics": {"throughput": {"value": value, "higher_is_better": True}}}


def test_a_sequential_mesh_ranks_each_pair_and_adds_rounds_for_the_open_pair_only() -> None:
    """Without --repeats, each pair is its own ranking against its own native, and the round
    the rule adds measures the pairs still open, not every pair of an open method: on s1-s2
    and s2-s3 vxlan is clearly half of native after the two minimum rounds; on s1-s3 it is
    0.9 then 1.1 of native, undecided. The round added is s1-s3's native and vxlan only."""
    exp = exp_spec.build(mesh(sites=3), "e.toml")
    assert exp.sequential and exp.mesh is not None
    cases = plan(exp)
    assert len(cases) == sequential.MIN_ROUNDS * 3 * 2
    share = {("s1", "s2"): (0.50, 0.51), ("s2", "s3"): (0.49, 0.50),
             ("s1", "s3"): (0.90, 1.10)}
    docs = [_mesh_doc(c, 1000.0 if c.tunnel.kind == "native"
                      else 1000.0 * share[c.pair][c.repeat - 1]) for c in cases]
    obs = sequential.series_from_docs(docs)
    assert sorted(s.scenario for s in obs.series) == [
        ("stream", 1500, "default", "s1-s2"), ("stream", 1500, "default", "s1-s3"),
        ("stream", 1500, "default", "s2-s3")]
    assert all(dict(s.native) == {1: 1000.0, 2: 1000.0} for s in obs.series)
    rankings = [sequential.rank(s) for s in obs.series]
    step = sequential.next_step(rankings, obs.rounds, obs.measured_s, obs.case_s(),
                                min_rounds=exp.planned_rounds, max_rounds=exp.max_rounds,
                                budget_s=exp.budget)
    assert step.stop is None and step.keep is not None
    added = next_round(exp, 3, len(cases), functools.partial(runner._kept, step.keep))
    assert [(c.pair, c.tunnel.kind) for c in added] == [(("s1", "s3"), "native"),
                                                        (("s1", "s3"), "vxlan")]
    open_ = sequential.unsettled(rankings)
    assert [p["pair"] for p in open_] == ["s1-s3"]
    # vxlan's mean share on s1-s3 is just under native's: native ranks first
    assert sequential.pair_text(open_[0]).startswith(
        "native vs vxlan (stream, MTU 1500, pair s1-s3): undecided, ")
    assert sequential.open_text(rankings) == "1 pair(s) open: native~vxlan (stream, s1-s3)"
    # a case outside a mesh keeps its three-part scenario (and its recorded form)
    assert sequential.case_key({"case": plan(exp_spec.build(
        {"tunnel": [{"kind": "native"}], "workload": [{"name": "stream"}]}, "e"))[0]
        .to_dict()}) == ("native", ("stream", 1500, "default"))


def test_resume_reruns_a_mesh_s_failed_cases_and_keeps_the_others_failures() -> None:
    """What --resume keeps (runner.resume_done): on a mesh a failed case runs again with the
    missing ones; on the pair testbed a recorded failure stays as it is."""
    exp = exp_spec.build({**mesh(sites=3), "experiment": {"repeats": 1}}, "e.toml")
    cases = plan(exp)
    recorded = {c.case_id: "failed" if c.pair == ("s1", "s3") else "ok" for c in cases[:-1]}
    done = runner.resume_done(exp, cases, recorded)
    assert sorted(set(c.case_id for c in cases) - set(done)) == sorted(
        [c.case_id for c in cases if c.pair == ("s1", "s3")] + [cases[-1].case_id])
    pair = exp_spec.build({"tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                           "workload": [{"name": "stream"}], "experiment": {"repeats": 1}},
                          "e.toml")
    pcases = plan(pair)
    recorded = {pcases[0].case_id: "ok", pcases[1].case_id: "failed"}
    assert runner.resume_done(pair, pcases, recorded) == recorded


def test_dry_run_of_a_mesh_on_hosts_prints_its_schedule_and_opens_nothing(
        tmp_path: Path) -> None:
    """--site s1=... --site s4=... with --ssh-config: parsed as a mesh of 4 hosts (no
    --sites needed), the schedule printed; a dry run connects to nothing."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host h*\n  User root\n")
    sites = [x for i in range(1, 5) for x in ("--site", f"s{i}=h{i}")]
    r = cli_inproc.tunbench("run", "--testbed", "mesh", *sites, "--ssh-config", str(cfg),
                            "--tunnels", "native,vxlan", "--workloads", "stream", "--repeats", "1",
                            "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == ("mesh: 4 sites, 6 pair(s), 3 colour(s) of disjoint pairs; on hosts "
                        "one pair at a time")
    assert len([ln for ln in lines if ln.startswith("  0")]) == 12
