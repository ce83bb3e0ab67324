"""A mesh with one site here (`--site s1=local`: the orchestrator's own network stack) beside
sites on sshd "hosts" (sshhosts.py). The remote tier never changes the machine's root
namespace, so tunbench itself runs in a namespace of its own on the hosts' bridge
(`sshhosts.orchestrator`, `ip netns exec`): its `local` site is that namespace.

A 3-site mesh (local + h1 + h2), native and vxlan, stream 2 s, one pair at a time: all 3 pairs
measured with each kind, the local site's cases built here (its underlay the orchestrator's
own address) and recorded as `local` like the others (testbed, mesh note, index.json, the
report's grid and its sites, `advise` per pair), no site in two measurements at once (from
the recorded start and end), nothing left on any host or in the orchestrator's namespace.
And with `parallel = true` over 4 sites (h1, local, h2, h3): the local site is one host like
the others, its pair running beside a disjoint pair of hosts, still no site in two
overlapping cases, nothing left. (The hosts and the orchestrator share this machine's CPUs:
the overlap and the records are tested, not the figures.) And the harness itself: what runs
through it runs in its own network namespace, and it is removed when the test fails."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshhosts import TOOLS, Orchestrator, SshHosts, hosts_for, orchestrator
from test_remote_kinds import runs_here
from test_sites import assert_clean

from tunbench import proc
from tunbench.testbed import netlink
from tunbench.testbed.ledger import OWNERS_DIR, STATE_DIR

pytestmark = [pytest.mark.netns, pytest.mark.correctness]
TUNNELS = ("native", "vxlan")


@pytest.fixture(scope="module")
def hosts3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    with hosts_for(Path(tmp_path_factory.mktemp("sshhosts3")) / "h", count=3,
                   tools=(*TOOLS, "iperf3")) as h:
        yield h


def run_mesh(orch: Orchestrator, hosts: SshHosts, sites: dict[str, str], out: Path,
             duration: int, parallel: bool = False) -> None:
    """`tunbench run` of the mesh inside the orchestrator's namespace."""
    f = out.parent / "mesh.toml"
    f.write_text('[testbed]\nkind = "mesh"\n' + ("parallel = true\n" if parallel else ""))
    r = orch.tunbench("run", "--experiment", f,
                      *[x for n, t in sites.items() for x in ("--site", f"{n}={t}")],
                      "--ssh-config", hosts.ssh_config, "--tunnels", ",".join(TUNNELS),
                      "--workloads", "stream", "--duration", str(duration), "--warmup", "0",
                      "--repeats", "1", "--out", out, "--db", "off")
    assert r.returncode == 0, r.stderr


def check_mesh(orch: Orchestrator, hosts: SshHosts, sites: dict[str, str], out: Path,
               parallel: bool) -> list[dict[str, Any]]:
    """Every pair once per kind, each case ok between its pair's sites at their own
    addresses, the local site recorded as `local`, no site in two measurements at once."""
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    names = list(sites)
    pairs = sorted([a, b] for i, a in enumerate(names) for b in names[i + 1:])
    assert len(docs) == len(TUNNELS) * len(pairs)
    addr = {n: orch.addr if t == "local" else hosts.hosts[t].addr for n, t in sites.items()}
    for d in docs:
        assert d["status"] == "ok", (d["case"]["id"], d["error"], d.get("error_log"))
        a, b = d["mesh"]["pair"]
        assert d["case"]["pair"] == [a, b] and d["mesh"]["parallel"] is parallel
        tb = d["testbed"]
        assert tb["kind"] == "hosts" and tb["mesh"]["pair"] == [a, b]
        assert tb["mesh"]["hosts"] == {a: sites[a], b: sites[b]}
        for end, name in (("a", a), ("b", b)):
            assert tb["hosts"][end]["target"] == sites[name]
            assert tb["sites"][end]["underlay4"] == addr[name]
            assert (tb["sites"][end]["host"] == "local") is (sites[name] == "local")
        assert d["raw"]["iperf3"]["bytes_received"] > 0
    for kind in TUNNELS:
        assert sorted(sorted(d["mesh"]["pair"]) for d in docs
                      if d["case"]["tunnel"]["kind"] == kind) == pairs, kind
    spans = sorted((d["started"], d["ended"], d["mesh"]["pair"]) for d in docs)
    for i, (s0, e0, p0) in enumerate(spans):   # no site in two cases that overlap in time
        assert s0 < e0
        for s1, _e1, p1 in spans[i + 1:]:
            if s1 < e0:
                assert parallel and not set(p0) & set(p1), (p0, p1)
    index = json.loads((out / "index.json").read_text())
    assert {n: s["target"] for n, s in index["experiment"]["sites"].items()
            if isinstance(s, dict)} == sites
    return docs


def check_clean(orch: Orchestrator, hosts: SshHosts, docs: list[dict[str, Any]]) -> None:
    """Nothing of the run on any host, in the orchestrator's namespace, or in this
    machine's state directory (the local site's case directories and journals)."""
    assert_clean(hosts)
    assert orch.leftovers() == []
    assert not state_of({d["testbed"]["run_id"] for d in docs})


def state_of(rids: set[str]) -> list[str]:
    """This machine's state files of these run ids: case directories, journals, owners."""
    return [p.name for d in (STATE_DIR, OWNERS_DIR) if d.is_dir() for p in d.iterdir()
            if any(r in p.name for r in rids)]


def test_a_mesh_with_a_site_here_and_two_hosts(hosts3: SshHosts, tmp_path: Path) -> None:
    runs_here("vxlan")
    sites = {"s1": "local", "s2": "h1", "s3": "h2"}
    out = tmp_path / "r"
    with orchestrator(hosts3) as orch:
        dry = orch.tunbench("run", "--testbed", "mesh", "--site", "s1=local", "--site",
                            "s2=h1", "--site", "s3=h2", "--ssh-config", hosts3.ssh_config,
                            "--tunnels", "native,vxlan", "--workloads", "stream",
                            "--repeats", "1", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "  sites: s1 local (this host), s2 h1, s3 h2" in dry.stdout.splitlines()
        try:
            run_mesh(orch, hosts3, sites, out, duration=2)
            docs = check_mesh(orch, hosts3, sites, out, parallel=False)
        finally:
            left = orch.leftovers()
        assert left == []
        # one after another: each case ended before the next started
        spans = sorted((d["started"], d["ended"]) for d in docs)
        assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))
        # the local site in the report's grid like the others, and where each site is
        page = (out / "report" / "index.html").read_text()
        assert "<table class=meshgrid>" in page and "worst pair s" in page
        assert "Sites: s1 local (this host), s2 h1, s3 h2." in page
        assert "at a time with site s1 on this host (its own network stack) and each " in page
        for d in docs:
            if d["case"]["tunnel"]["kind"] == "vxlan":
                a, b = d["mesh"]["pair"]
                assert f"data-pair='{a}-{b}'" in page
                assert f'href="../cases/{d["case"]["id"]}.json"' in page
        # advise ranks each pair, the local site's two among them, and "for every pair"
        adv = orch.tunbench("advise", out)
        assert adv.returncode == 0, adv.stderr
        lines = adv.stdout.splitlines()
        assert "per pair (each against its own native):" in lines
        for a, b in (("s1", "s2"), ("s1", "s3"), ("s2", "s3")):
            assert any(ln.startswith(f"  {a}->{b}: ") for ln in lines), lines
        assert any(ln.startswith("for every pair: ") for ln in lines), lines
        check_clean(orch, hosts3, docs)


def test_parallel_takes_the_local_site_as_one_host(hosts3: SshHosts, tmp_path: Path) -> None:
    runs_here("vxlan")
    sites = {"s1": "h1", "s2": "local", "s3": "h2", "s4": "h3"}
    out = tmp_path / "r"
    with orchestrator(hosts3) as orch:
        try:
            run_mesh(orch, hosts3, sites, out, duration=1, parallel=True)
            docs = check_mesh(orch, hosts3, sites, out, parallel=True)
        finally:
            left = orch.leftovers()
        assert left == []
        by_colour: dict[int, list[dict[str, Any]]] = {}
        for d in docs:
            by_colour.setdefault(d["mesh"]["colour"], []).append(d)
        assert sorted(by_colour) == [0, 1, 2]
        for ds in by_colour.values():   # two disjoint pairs, one with the local site s2,
            pairs = sorted({tuple(d["mesh"]["pair"]) for d in ds})   # run beside each other
            assert len(pairs) == 2 and not set(pairs[0]) & set(pairs[1])
            assert any("s2" in p for p in pairs)
            span = {p: (min(d["started"] for d in ds if tuple(d["mesh"]["pair"]) == p),
                        max(d["ended"] for d in ds if tuple(d["mesh"]["pair"]) == p))
                    for p in pairs}
            (s0, e0), (s1, e1) = span.values()
            assert s0 < e1 and s1 < e0, span
            for d in ds:
                other = pairs[1] if tuple(d["mesh"]["pair"]) == pairs[0] else pairs[0]
                assert d["mesh"]["alongside"] == ["-".join(other)], d["mesh"]
        check_clean(orch, hosts3, docs)


def test_the_orchestrator_namespace_goes_when_the_test_fails(hosts3: SshHosts) -> None:
    """The harness itself: while it stands, what runs through it runs in its own network
    namespace (not the test's); what orchestrator() made is removed when the block raises."""
    with pytest.raises(RuntimeError, match="a test failing"), orchestrator(hosts3) as orch:
        there = proc.run([sys.executable, "-c", "import os; print(os.readlink("
                          "'/proc/self/ns/net'))"], netns=orch.netns).stdout.strip()
        assert there.startswith("net:[") and there != os.readlink("/proc/self/ns/net")
        assert orch.leftovers() == []
        raise RuntimeError("a test failing")
    assert orch.netns not in netlink.list_netns()
    mgmt = f"tb-{hosts3.run_id}-m"
    assert not [n for n in netlink.link_names(mgmt) if n.startswith(f"tb{orch.run_id}")]
    assert not state_of({orch.run_id})   # its ledger's journal and owner file
