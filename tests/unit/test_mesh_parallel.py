"""The mesh's `parallel = true` without root: refused in one line (here: one host's
namespaces; two sites on one host target) before anything is made; on hosts the schedule's
colours become the runner's steps and their pairs its lanes (a pair's cases in plan order,
native first; a pair's two directions one lane); `--dry-run` says which pairs run together;
each case records `parallel` and the pairs that ran alongside it. And the lanes themselves
(lanes.py), on real threads: they overlap, the reporter hears the first lane's cases as they
run and the others' whole, never two at once, and a real SIGINT ends every lane's case at its
next phase, each lane's own cleanup run, the step raising Interrupted."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import cli_inproc
from tunbench import interrupts, lanes, runner, topologies
from tunbench import spec as exp_spec
from tunbench.cli import _spec_dict
from tunbench.errors import Interrupted, SpecError
from tunbench.plan import plan
from tunbench.progress import Estimate, PhaseEvent

HOSTS = {f"s{i}": f"root@h{i}" for i in range(1, 5)}


def mesh(hosts: dict[str, Any] | None = None, **tb: object) -> dict[str, Any]:
    return {"testbed": {"kind": "mesh", **tb}, "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}], **({"sites": hosts} if hosts else {})}


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        exp_spec.build(data, "e.toml")
    line = exc.value.one_line()
    assert "\n" not in line
    return line


def test_parallel_here_and_two_sites_on_one_host_are_refused_in_one_line() -> None:
    assert refused(mesh(sites=4, parallel=True)) == (
        "e.toml: testbed.parallel = true needs the sites on hosts: on this host's namespaces "
        "every pair shares one host's CPUs, so pairs run one after another (leave parallel "
        "out, or give [sites] s1..sN / --site s1=USER@HOST ... one host each) (fix the values "
        "named above; nothing was changed)")
    assert refused(mesh({**HOSTS, "s3": "ROOT@h1"}, parallel=True)) == (
        "e.toml: testbed.parallel = true: sites s1 and s3 are both on ROOT@h1, so two pairs "
        "of one colour would run on one host at once (give each site a host of its own, or "
        "leave parallel out) (fix the values named above; nothing was changed)")


def test_the_cli_refuses_parallel_here_with_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text('[testbed]\nkind = "mesh"\nsites = 3\nparallel = true\n')
    r = cli_inproc.tunbench("run", "--experiment", str(f), "--tunnels", "native,vxlan",
                            "--dry-run")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert "testbed.parallel = true needs the sites on hosts" in r.stderr


def test_parallel_on_hosts_is_recorded_and_rebuilt_on_resume() -> None:
    exp = exp_spec.build(mesh(HOSTS, parallel=True), "e.toml")
    assert exp.mesh is not None and exp.mesh.parallel
    assert exp.to_dict()["testbed"]["parallel"] is True
    assert exp_spec.build(_spec_dict(exp.to_dict()), "e.toml").mesh == exp.mesh
    assert [s["parallel"] for s in exp.mesh.schedule()] == [True, True, True]
    # parallel = false is recorded as before (a campaign recorded without it resumes)
    seq = exp_spec.build(mesh(HOSTS), "e.toml")
    assert "parallel" not in seq.to_dict()["testbed"]


def test_a_colour_is_a_step_its_pairs_the_lanes_in_plan_order() -> None:
    exp = exp_spec.build({**mesh(HOSTS, parallel=True), "experiment": {"repeats": 2}},
                         "e.toml")
    topo = topologies.of(exp)
    cases = plan(exp)
    steps = topo.steps(exp, cases)
    assert len(steps) == 2 * 3                      # rounds x colours
    assert [c for step in steps for lane in step for c in lane] == cases
    for step in steps:
        assert len(step) == 2                       # 4 sites: two disjoint pairs a colour
        sites = [s for lane in step for s in lane[0].pair]
        assert len(sites) == len(set(sites)) == 4   # no site in two lanes
        for lane in step:
            assert [c.tunnel.kind for c in lane] == ["native", "vxlan"]
            assert len({c.pair for c in lane}) == 1 and len({c.repeat for c in lane}) == 1
    # alongside: the second lane of each step takes no time of its own in the estimate
    plans = runner.case_plans(exp, cases, runner._alongside(steps))
    est = Estimate(plans, now=0.0)
    assert sum(p.alongside for p in plans) == len(cases) // 2
    assert est.remaining(0.0) == pytest.approx(sum(est.case_s(i) for i in range(len(cases))
                                                   if not plans[i].alongside))
    # directions = "both": a pair's two directions are one lane (they share its sites)
    both = exp_spec.build({**mesh(HOSTS, parallel=True, directions="both"),
                           "experiment": {"repeats": 1}}, "e.toml")
    for step in topologies.of(both).steps(both, plan(both)):
        assert len(step) == 2
        for lane in step:
            a, b = lane[0].pair
            assert [c.pair for c in lane] == [(a, b), (a, b), (b, a), (b, a)]
    # not parallel (here, or parallel = false on hosts): one case after another
    for data in (mesh(sites=4), mesh(HOSTS)):
        e = exp_spec.build({**data, "experiment": {"repeats": 1}}, "e.toml")
        assert topologies.of(e).steps(e, plan(e)) == [[[c]] for c in plan(e)]


def test_each_case_records_parallel_and_the_pairs_alongside() -> None:
    exp = exp_spec.build({**mesh(HOSTS, parallel=True), "experiment": {"repeats": 1}}, "e")
    topo = topologies.of(exp)
    for c in plan(exp):
        m = topo.sections(exp, c)["mesh"]
        assert m["parallel"] is True
        other = {frozenset(p) for s in exp.mesh.schedule() if s["colour"] == c.colour
                 for p in s["pairs"]} - {frozenset(c.pair)}
        assert [frozenset(x.split("-")) for x in m["alongside"]] == list(other)
    five = exp_spec.build({**mesh({f"s{i}": f"h{i}" for i in range(1, 6)}, parallel=True),
                           "experiment": {"repeats": 1}}, "e")
    # 5 sites: each colour two pairs, the fifth site sits it out
    assert all(len(topologies.of(five).sections(five, c)["mesh"]["alongside"]) == 1
               for c in plan(five))
    seq = exp_spec.build({**mesh(HOSTS), "experiment": {"repeats": 1}}, "e")
    m = topologies.of(seq).sections(seq, plan(seq)[0])["mesh"]
    assert m["parallel"] is False and "alongside" not in m


def test_dry_run_says_which_pairs_run_together(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host h*\n  User root\n")
    f = tmp_path / "m.toml"
    f.write_text('[testbed]\nkind = "mesh"\nparallel = true\n')
    sites = [x for i in range(1, 6) for x in ("--site", f"s{i}=h{i}")]
    r = cli_inproc.tunbench("run", "--experiment", str(f), *sites, "--ssh-config", str(cfg),
                            "--tunnels", "native,vxlan", "--workloads", "stream",
                            "--repeats", "1", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == ("mesh: 5 sites, 10 pair(s), 5 colour(s) of disjoint pairs; on hosts, "
                        "the pairs of a colour at the same time (parallel = true), one colour "
                        "after another")
    assert lines[2:7] == ["  colour 0 (together): s2-s5, s3-s4",
                          "  colour 1 (together): s1-s5, s2-s3",
                          "  colour 2 (together): s1-s4, s3-s5",
                          "  colour 3 (together): s1-s3, s2-s4",
                          "  colour 4 (together): s1-s2, s4-s5"]

class Heard:
    """A reporter that records what it hears, and fails if two cases overlap in it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.running: str | None = None

    def case_start(self, case: Any) -> None:
        assert self.running is None, (self.running, case)
        self.running = case
        self.events.append(("start", case))

    def phase(self, event: PhaseEvent) -> None:
        assert self.running is not None
        self.events.append(("phase", self.running))

    def case_end(self, case: Any, doc: dict[str, Any]) -> None:
        assert self.running == case, (self.running, case)
        self.running = None
        self.events.append(("end", case))


def test_lanes_overlap_and_the_reporter_hears_one_case_at_a_time() -> None:
    spans: dict[str, tuple[float, float]] = {}

    masks: list[set[signal.Signals]] = []
    # the lanes' first cases wait for each other: they meet only if the lanes run together
    # (one after the other, the first waits 30 s and raises), whatever the host's load
    meet = threading.Barrier(2, timeout=30)

    def run_one(case: str, view: Any) -> None:
        # what a lane's processes inherit: SIGINT and SIGTERM not held off (stop needs them)
        masks.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
        if case in ("a1", "b1"):
            meet.wait()
        view.case_start(case)
        t0 = time.monotonic()
        for _ in range(3):
            view.phase(PhaseEvent("workload", "x"))
            time.sleep(0.05 if case.startswith("a") else 0.03)
        spans[case] = (t0, time.monotonic())
        view.case_end(case, {"status": "ok"})

    heard = Heard()
    lanes.run_lanes([["a1", "a2"], ["b1", "b2", "b3"]], heard, run_one)
    assert sorted(c for e, c in heard.events if e == "end") == ["a1", "a2", "b1", "b2", "b3"]
    assert [c for e, c in heard.events if e == "phase"] == ["a1"] * 3 + ["a2"] * 3
    # each lane's cases in order, and the two lanes at the same time
    assert spans["a1"][1] <= spans["a2"][0] and spans["b2"][1] <= spans["b3"][0]
    assert spans["b1"][0] < spans["a1"][1] and spans["a1"][0] < spans["b1"][1]
    assert not meet.broken
    assert len(masks) == 5 and not any(m & {signal.SIGINT, signal.SIGTERM} for m in masks)


def test_a_sigint_ends_every_lane_at_its_next_phase_and_the_step_raises() -> None:
    """A real SIGINT to this process while two lanes run: the main thread's handler records
    it, each lane's case ends at its next phase through its own finally (its teardown), no
    further case starts, and run_lanes raises Interrupted once both lanes ended."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    interrupts.install_handlers()
    torn: list[str] = []
    started: list[str] = []
    lock = threading.Lock()

    def run_one(case: str, view: Any) -> None:
        with lock:
            started.append(case)
            if len(started) == 2:     # both lanes are in a case: the SIGINT, to the process
                os.kill(os.getpid(), signal.SIGINT)
        view.case_start(case)
        try:
            for _ in range(3000):           # 60 s unless interrupted
                view.phase(PhaseEvent("workload", "x"))
                time.sleep(0.02)
        finally:
            torn.append(case)
        view.case_end(case, {"status": "ok"})

    t0 = time.monotonic()
    try:
        with pytest.raises(Interrupted):
            lanes.run_lanes([["a1", "a2"], ["b1", "b2"]], Heard(), run_one)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        interrupts.clear()
    assert time.monotonic() - t0 < 30      # at their next phase, not at the loop's end
    assert sorted(started) == sorted(torn) == ["a1", "b1"]
