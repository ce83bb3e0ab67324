"""Site size in cores on real namespaces (testbed/sitecores.py): a campaign at
cpus_per_site 1 and 2 runs native and wireguard-go (a CPU-bound userspace datapath); while
each case runs, every process of each site's namespace is read from /proc (its
Cpus_allowed_list and its cpuset cgroup): the site's processes are in the site's cgroup on
the site's CPUs, and what is not in it is only a short configuration command; each case
records its count, the CPUs each site got and the cgroup paths; the cgroups are gone after.
The figures (throughput and CPU per Gbit/s at 1 and 2 cores, and each method's 1-core share
of its 2-core figure) are recorded as test properties and printed: this is a correctness
test; how far 1 core bounds a method is measured by bench/bench_cores.py (docs/methodology.md,
"Site size in cores"), not asserted here."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tunbench import proc, runner, spec, tunnels
from tunbench.report import data, sitesize
from tunbench.testbed import names, netlink, placement, sitecores

pytestmark = pytest.mark.correctness

WATCHED = ("iperf3", "wireguard-go")    # what each site starts and keeps running
# short commands drivers and the runner run in a site to configure or probe it (site.run),
# not confined (docs/methodology.md); cgjoin itself before it joins (python); pyroute2's
# namespace helper, a fork of this process (python, pytest)
CONFIG = {"ip", "ping", "ethtool", "cat", "sysctl", "tc", "wg", "cp", "ls", "python3",
          "python", "pytest", "nstat", "ss", "sh", "sleep", "taskset"}


def _cpuset_of(pid: int) -> str | None:
    """The cpuset cgroup path of a process (v1 line, else the v2 one)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = [ln.split(":", 2)[2] for ln in lines if "cpuset" in ln.split(":", 2)[1].split(",")]
    if v1:
        return v1[0]
    v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
    return v2[0] if v2 else None


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


PF_EXITING = 0x4   # include/linux/sched.h: set as do_exit() begins, before cgroup_exit()


def _state(pid: str) -> str:
    """The process's state letter, "X" while it exits: on the v1 hierarchy cgroup_exit() moves
    an exiting task to the root cgroup before it is a zombie (seen in a flake-finder run: an
    iperf3 client ending its case read as "/" with its cmdline already gone). PF_EXITING is set
    before that move, so reading the flags after the cgroup tells the two apart exactly."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    if len(fields) > 6 and int(fields[6]) & PF_EXITING:
        return "X"
    return fields[0]


def _ppid(pid: str) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = stat.rsplit(")", 1)[1].split()[1]
        return f"{ppid} {_cmdline(ppid)[:80]}"
    except (OSError, IndexError):
        return ""


class Watcher:
    """Every 100 ms while a campaign runs: for each process in the namespaces the campaign
    creates, its comm, Cpus_allowed_list and cpuset cgroup, by (run id, site)."""

    def __init__(self) -> None:
        self.before = set(netlink.list_netns())
        self.seen: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
        self.stray: list[tuple[str, ...]] = []    # a watched program outside any site cgroup
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.1):
            for ns in set(netlink.list_netns()) - self.before:
                if not names.is_ours_netns(ns):
                    continue
                _, rid, site = ns.split("-")
                r = proc.run(["ip", "netns", "pids", ns], check=False, timeout=10)
                for pid in r.stdout.split():
                    try:
                        comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    except OSError:
                        continue
                    cpus, cg = placement.allowed_cpus(int(pid)), _cpuset_of(int(pid))
                    # an exiting or exited process reads as the root cgroup on a v1
                    # kernel: not a process that runs (its state is read after its cgroup)
                    if _state(pid) in ("Z", "X", ""):
                        continue
                    if cpus is not None and cg is not None:
                        self.seen.setdefault((rid, site), set()).add((comm, cpus, cg))
                        if comm in WATCHED and not cg.startswith(f"/{names.PREFIX}-"):
                            self.stray.append((rid, site, pid, comm, cg, _cmdline(pid),
                                               _ppid(pid)))

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _kinds() -> list[dict[str, Any]]:
    wg = tunnels.get("wireguard")
    if wg.requirements(wg.parse_params({"impl": "go"})):
        pytest.skip("wireguard-go is not installed")
    return [{"kind": "native"}, {"kind": "wireguard", "impl": "go"}]


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
    for c in cases:
        k, rid = c["case"]["cpus_per_site"], c["testbed"]["run_id"]
        rec = c["testbed"]["cores"]
        want = sitecores.site_sets(k, avail)
        # recorded: the count, the CPUs each site got, the cgroup paths, RPS on them
        assert c["testbed"]["cpus_per_site"] == k and rec["cpus_per_site"] == k
        assert rec["cpus"] == want and rec["mechanism"] == hier.mechanism
        assert rec["apart"] == (want["a"] != want["b"])
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
    assert not [n for n in netlink.list_netns() if n not in w.before and names.is_ours_netns(n)]
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
