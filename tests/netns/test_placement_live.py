"""Per-site CPU placement on real namespaces (testbed/placement.py): a campaign with placement
on starts each site's processes (iperf3, wireguard-go) confined to the site's CPUs and steers
the site's underlay receive work there by RPS, as read from /proc and sysfs while the case
runs; each case records it; teardown writes the old rps_cpus back. Placement off leaves the
processes on every CPU and records that it was off."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nswatch
import pytest
from nswatch import NamespaceWatcher

from tunbench import proc, runner, spec, tunnels
from tunbench.testbed import local, names, netlink, placement
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import Ledger

pytestmark = pytest.mark.correctness

WATCHED = ("iperf3", "wireguard-go")    # what the sites start in these cases


def _need_two_cpus() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("placement needs 2 CPUs; this host gives tunbench 1")


@contextmanager
def bed() -> Iterator[Testbed]:
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        yield local.build(rid, ledger)
    finally:
        errors = ledger.close()
        local.sweep(rid)
        assert not errors, errors


class Watcher(NamespaceWatcher):
    """Reads, every 100 ms while a campaign runs, the affinity of every watched process in
    the namespaces that campaign creates, and the rps_cpus of each site's underlay."""

    def __init__(self) -> None:
        super().__init__()
        self.procs: dict[tuple[str, str], set[str]] = {}   # (site, comm) -> lists seen
        self.rps: dict[str, set[str]] = {}                  # site -> rps_cpus seen

    def probe(self, ns: str, rid: str, site: str) -> None:
        for pid in nswatch.pids(ns):
            comm, cpus = nswatch.comm(pid), placement.allowed_cpus(pid)
            if comm in WATCHED and cpus is not None:
                self.procs.setdefault((site, comm), set()).add(cpus)
        dev = names.link_name(rid, "u" + site)
        rps = proc.run(["cat", f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"],
                       netns=ns, check=False, timeout=10)
        if rps.ok:
            self.rps.setdefault(site, set()).add(rps.stdout.strip())


def _campaign(tmp: Path, mode: str, kinds: list[dict[str, Any]]) -> tuple[Watcher, list[Any]]:
    exp = spec.build({"experiment": {"repeats": 1, "duration": 2, "warmup": 0.5,
                                     "placement": mode},
                      "tunnel": kinds, "workload": [{"name": "stream"}]}, "test")
    with Watcher() as w:
        outcome = runner.run_campaign(exp, tmp)
    cases = outcome.store.read_cases()
    assert [c["status"] for c in cases] == ["ok"] * len(kinds), [c.get("error") for c in cases]
    return w, cases


def _mask(cpus: str) -> int:
    return int(cpus.replace(",", ""), 16)


def test_campaign_with_placement_confines_each_site(tmp_path: Path) -> None:
    _need_two_cpus()
    kinds: list[dict[str, Any]] = [{"kind": "native"}]
    wg = tunnels.get("wireguard")
    if not wg.requirements(wg.parse_params({"impl": "go"})):
        kinds.append({"kind": "wireguard", "impl": "go"})    # a datapath daemon per site
    expected = placement.plan("sites", local=True)["cpus"]
    assert expected["a"] != expected["b"]
    w, cases = _campaign(tmp_path / "on", "sites", kinds)
    # while they ran: every iperf3 (and wireguard-go) of a site on that site's CPUs only
    for site in ("a", "b"):
        assert w.procs.get((site, "iperf3")) == {expected[site]}, w.procs
        if len(kinds) > 1:
            assert w.procs.get((site, "wireguard-go")) == {expected[site]}, w.procs
        # and the underlay's receive work steered there (sysfs prints the mask it took)
        want = _mask(placement.rps_mask(placement.parse_cpus(expected[site])))
        assert w.rps.get(site) and {_mask(v) for v in w.rps[site]} <= {want, 0}, w.rps
        assert want in {_mask(v) for v in w.rps[site]}
    # each case says so
    for c in cases:
        rec = c["testbed"]["placement"]
        assert rec["mode"] == "sites" and rec["on"] is True and rec["cpus"] == expected
        assert rec["processes"]["iperf3-client"] == expected["a"]     # the client side
        assert rec["processes"]["iperf3-server"] == expected["b"]
        for site in ("a", "b"):
            r = rec["rps"][site]
            assert r["dev"].startswith(names.PREFIX) and r["before"]
            assert all(_mask(v) == 0 for v in r["before"].values())   # a fresh veth: off
    # and nothing of the runs is left
    assert not w.left()


def test_campaign_with_placement_off_leaves_the_scheduler_free(tmp_path: Path) -> None:
    _need_two_cpus()
    everything = placement.format_cpus(os.sched_getaffinity(0))
    w, cases = _campaign(tmp_path / "off", "off", [{"kind": "native"}])
    assert w.procs.get(("a", "iperf3")) == {everything}
    assert w.procs.get(("b", "iperf3")) == {everything}
    assert {_mask(v) for s in ("a", "b") for v in w.rps.get(s, {"0"})} == {0}
    assert cases[0]["testbed"]["placement"] == {"mode": "off", "on": False, "cpus": {}}


def test_teardown_restores_rps_and_spawned_processes_are_confined() -> None:
    _need_two_cpus()
    with bed() as tb:
        before = {s.name: placement.read_rps(s, s.underlay_if) for s in tb.sites()}
        mark = len(tb.ledger.entries)
        rec = placement.place(tb, "sites")
        assert rec["on"]
        for s in tb.sites():
            want = _mask(placement.rps_mask(placement.parse_cpus(rec["cpus"][s.name])))
            now = placement.read_rps(s, s.underlay_if)
            assert now.keys() == before[s.name].keys()
            assert all(_mask(v) == want for v in now.values())
        sleeper = tb.spawn(tb.b, ["sleep", "30"], "sleeper")
        proc.wait_ready(sleeper, ready=lambda: nswatch.comm(sleeper.pid) == "sleep")
        assert placement.allowed_cpus(sleeper.pid) == rec["cpus"]["b"]
        assert tb.placed_processes["sleeper"] == rec["cpus"]["b"]
        # undo what placement (and the sleeper) recorded, newest first, as teardown does
        for entry in reversed(tb.ledger.entries[mark:]):
            tb.ledger.undo_entry(entry)
        assert not proc.pid_alive(sleeper.pid)
        for s in tb.sites():
            assert placement.read_rps(s, s.underlay_if) == before[s.name]
