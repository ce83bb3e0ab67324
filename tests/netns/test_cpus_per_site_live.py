"""Site size in cores on real namespaces (testbed/sitecores.py).

test_sites_confined_to_their_cores (correctness): a campaign at cpus_per_site 1 and 2 runs
native and wireguard-go (a CPU-bound userspace datapath); while each case runs, every process
of each site's namespace is read from /proc (its Cpus_allowed_list and its cpuset cgroup):
the site's processes are in the site's cgroup on the site's CPUs, and what is not in it is
only a short configuration command; each case records its count, the campaign's one layout
and why, the CPUs each site got and the cgroup paths; the cgroups are gone after. Its figures
are recorded as test properties and printed, not asserted.

wireguard-go at 1 core per site below its 2-core figure is not asserted: in the shared layout
(this 2-core host) its 1-core share of the 2-core figure was at or above 1 in 3 of the 22
1.5 s samples recorded (tests/data/cores/wireguard_go_1core_vs_2core.json), so no bound
below 1 fails a correct system less than once in 1000 runs; bench/bench_cores_ratio.py
measures and prints it (docs/methodology.md, "Site size in cores")."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nswatch
import pytest
from nswatch import NamespaceWatcher

from tunbench import runner, spec, tunnels
from tunbench.report import data, sitesize
from tunbench.testbed import names, placement, sitecores

WATCHED = ("iperf3", "wireguard-go")    # what each site starts and keeps running
# short commands drivers and the runner run in a site to configure or probe it (site.run),
# not confined (docs/methodology.md); cgjoin itself before it joins (python); pyroute2's
# namespace helper, a fork of this process (python, pytest)
CONFIG = {"ip", "ping", "ethtool", "cat", "sysctl", "tc", "wg", "cp", "ls", "python3",
          "python", "pytest", "nstat", "ss", "sh", "sleep", "taskset"}


class Watcher(NamespaceWatcher):
    """Every 100 ms while a campaign runs: for each process in the namespaces the campaign
    creates, its comm, Cpus_allowed_list and cpuset cgroup, by (run id, site)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        self.stray: list[tuple[str, ...]] = []    # a watched program outside any site cgroup

    def probe(self, ns: str, rid: str, site: str) -> None:
        for pid in nswatch.pids(ns):
            comm = nswatch.comm(pid)
            if not comm:
                continue
            cpus, cg = placement.allowed_cpus(pid), nswatch.cpuset_of(pid)
            # an exiting or exited process reads as the root cgroup on a v1 kernel: not a
            # process that runs (its state is read after its cgroup)
            if nswatch.state(pid) in ("Z", "X", ""):
                continue
            if cpus is not None and cg is not None:
                self.seen.setdefault((rid, site), set()).add((comm, cpus, cg))
                if comm in WATCHED and not cg.startswith(f"/{names.PREFIX}-"):
                    self.stray.append((rid, site, str(pid), comm, cg, nswatch.cmdline(pid),
                                       nswatch.parent(pid)))


def _kinds() -> list[dict[str, Any]]:
    wg = tunnels.get("wireguard")
    if wg.requirements(wg.parse_params({"impl": "go"})):
        pytest.skip("wireguard-go is not installed")
    return [{"kind": "native"}, {"kind": "wireguard", "impl": "go"}]


@pytest.mark.correctness
def test_sites_confined_to_their_cores(tmp_path: Path,
                                       record_property: Any) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the axis 1, 2 needs 2 CPUs")
    why = sitecores.missing()
    if why:
        pytest.skip(why)
    hier = sitecores.find_hierarchy()
    assert hier is not None
    kinds = _kinds()
    exp = spec.build({"experiment": {"repeats": 1, "duration": 2, "warmup": 0.5,
                                     "cpus_per_site": [1, 2]},
                      "tunnel": kinds, "workload": [{"name": "stream"}]}, "test")
    with Watcher() as w:
        outcome = runner.run_campaign(exp, tmp_path)
    cases = outcome.store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * 4, [c.get("error") for c in cases]
    assert [(c["case"]["cpus_per_site"], c["case"]["tunnel"]["kind"]) for c in cases] == \
        [(1, "native"), (1, "wireguard"), (2, "native"), (2, "wireguard")]
    avail = sorted(set(hier.effective_cpus()) & set(os.sched_getaffinity(0)))
    # one layout for the campaign, from its whole axis (2 x 2 > 2 CPUs here: shared)
    lay = sitecores.layout([1, 2], len(avail))
    for c in cases:
        k, rid = c["case"]["cpus_per_site"], c["testbed"]["run_id"]
        rec = c["testbed"]["cores"]
        want = sitecores.site_sets(k, avail, lay)
        # recorded: the count, the layout and why, the CPUs each site got, the cgroup paths,
        # RPS on them
        assert c["testbed"]["cpus_per_site"] == k and rec["cpus_per_site"] == k
        assert rec["cpus"] == want and rec["mechanism"] == hier.mechanism
        assert rec["layout"] == lay and rec["apart"] == (lay == "apart")
        assert rec["layout_reason"] == sitecores.layout_reason(lay, [1, 2], len(avail))
        assert rec["axis"] == [1, 2]
        for site in ("a", "b"):
            path = Path(rec["cgroups"][site])
            assert path.name == f"{names.PREFIX}-{rid}-{site}" and path.parent == hier.parent
            assert not path.exists(), f"{path} left behind"
            mask = int(placement.rps_mask(placement.parse_cpus(want[site])), 16)
            assert {int(v.replace(",", ""), 16) for v in rec["rps"][site]["before"].values()} \
                == {0}
            assert int(rec["rps"][site]["mask"], 16) == mask
        labels = rec["processes"]
        assert labels.get("iperf3-client") == "a" and labels.get("iperf3-server") == "b"
        # while it ran: every process of each site's namespace
        for site in ("a", "b"):
            seen = w.seen.get((rid, site), set())
            cg = "/" + str(Path(rec["cgroups"][site]).relative_to(hier.mount))
            inside = {(comm, cpus) for comm, cpus, g in seen if g == cg}
            outside = {comm for comm, _, g in seen if g != cg}
            comms = {comm for comm, _ in inside}
            want_comms = {"iperf3"} | ({"wireguard-go"} if c["case"]["tunnel"]["kind"] ==
                                       "wireguard" else set())
            assert want_comms <= comms, (c["case"]["id"], site, seen)
            assert {cpus for _, cpus in inside} == {want[site]}, (c["case"]["id"], site, seen)
            assert not (outside & set(WATCHED)), (c["case"]["id"], site, seen, w.stray)
            assert outside <= CONFIG, (c["case"]["id"], site, outside)
    # nothing of the runs is left: namespaces and cgroups
    assert not w.left()
    rids = {c["testbed"]["run_id"] for c in cases}
    assert not [d for d in hier.parent.iterdir()
                if d.is_dir() and any(d.name.startswith(f"{names.PREFIX}-{r}-") for r in rids)]
    # the figures, recorded (bench/bench_cores.py measures the bound with repeats)
    camp = data.load(tmp_path)
    (s,) = sitesize.scalings(camp)
    figures = {m.tunnel: {"throughput": {k: v[0] for k, v in m.head.items()},
                          "cpu_per_gbit": {k: v[0] for k, v in m.cpu.items()},
                          "share_1_of_2": (m.share(1, 2) or (None,))[0]}
               for m in s.methods}
    record_property("cpus_per_site_figures", json.dumps(figures))
    print("cpus_per_site figures:", json.dumps(figures))
    assert set(figures) == {"native", "wireguard (go)"}
    assert s.layout == lay

