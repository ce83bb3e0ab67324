"""A mesh with one site here (`local`: this host's own network stack) beside sites on hosts,
without root or hosts: `[sites] s1 = "local"` accepted for one site; two (or more) local
sites, and a local site with no site on a host, refused in one line before anything is made
(exit 2 through the CLI); the experiment recorded and rebuilt on resume with it; its
`MeshHosts` makes no SSH endpoint for it and its pair views are the pair `Topology` with one
local site; `parallel = true` takes it as one host like the others (lanes); `--dry-run`
says where each site is and connects to nothing; `tunbench list --topologies` names it.
The live test is tests/remote/test_mesh_local.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import cli_inproc
from tunbench import spec as exp_spec
from tunbench import topologies
from tunbench.cli import _spec_dict
from tunbench.errors import SpecError
from tunbench.plan import plan
from tunbench.remote.agent.journal import machine_identity
from tunbench.testbed.meshhosts import MeshHosts
from tunbench.testbed.topology import machine_groups

MIXED = {"s1": "local", "s2": "root@h2", "s3": "root@h3"}


def mesh(sites: dict[str, Any], **tb: object) -> dict[str, Any]:
    return {"testbed": {"kind": "mesh", **tb}, "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
            "workload": [{"name": "stream"}], "sites": sites}


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as exc:
        exp_spec.build(data, "e.toml")
    line = exc.value.one_line()
    assert "\n" not in line
    return line


def test_one_local_site_is_taken_recorded_and_rebuilt_on_resume() -> None:
    exp = exp_spec.build(mesh(MIXED), "e.toml")
    assert exp.mesh is not None and exp.mesh.sites == 3 and len(exp.mesh.pairs) == 3
    assert [n for n, s in exp.sites.items() if s.local] == ["s1"]
    assert {n: s.target for n, s in exp.sites.items()} == MIXED
    recorded = exp.to_dict()
    assert recorded["sites"]["s1"]["target"] == "local"
    again = exp_spec.build(_spec_dict(recorded), "e.toml")
    assert again.mesh == exp.mesh and again.sites == exp.sites
    # any site may be the local one, given as a table too
    last = exp_spec.build(mesh({"s1": "root@h1", "s2": "root@h2",
                                "s3": {"target": "local", "underlay_if": "eth1"}}), "e")
    assert last.sites["s3"].local and last.sites["s3"].underlay_if == "eth1"
    # what the mesh runs on hosts, a local site or not: the kinds that run between hosts
    bad = mesh(MIXED)
    bad["tunnel"] = [{"kind": "native"}, {"kind": "wireguard"}]
    assert "wireguard are not mesh-capable" in refused(bad)


@pytest.mark.parametrize(("sites", "line"), [
    ({"s1": "local", "s2": "local", "s3": "root@h3"},
     "e.toml: sites.s1 and sites.s2 are both 'local': this host's network stack is one site "
     "(a tunnel needs two network stacks); give sites.s2 a host of its own"),
    # three: still one line, naming the first two
    ({"s1": "local", "s2": "local", "s3": "local", "s4": "root@h4"},
     "e.toml: sites.s1 and sites.s2 are both 'local': this host's network stack is one site "
     "(a tunnel needs two network stacks); give sites.s2 a host of its own"),
    # a local site with the others as this host's namespaces: not a mesh tunbench builds
    ({"s1": "local"},
     "e.toml: sites.s1 is 'local' but no site is on a host: a mesh's site 'local' is this "
     "host's own network stack beside sites on hosts (give the other sites hosts of their "
     "own: --site s2=USER@HOST ...), or leave [sites] / --site out for the mesh on this "
     "host's namespaces"),
    ({"s1": "root@h1", "s2": {"target": "local", "underlay6": "2001:db8::2"},
      "s3": "root@h3"},
     "e.toml: sites.s2.underlay6: the mesh runs over an IPv4 underlay only (leave underlay6 "
     "out)"),
    ({"s1": {"target": "local", "cpus": "0"}, "s2": "root@h2", "s3": "root@h3"},
     "e.toml: sites.s1.cpus: the mesh on hosts does not place a site's processes on CPUs "
     "yet (leave cpus out)"),
])
def test_bad_local_sites_are_refused_in_one_line(sites: dict[str, Any], line: str) -> None:
    tb = {"sites": 3} if len(sites) == 1 else {}
    assert refused({**mesh(sites), "testbed": {"kind": "mesh", **tb}}) == (
        line + " (fix the values named above; nothing was changed)")


def test_the_hub_still_refuses_a_local_site() -> None:
    data = {"testbed": {"kind": "hub"}, "tunnel": [{"kind": "native"}],
            "workload": [{"name": "stream"}],
            "sites": {"hub": "root@h0", "s1": "local", "s2": "root@h2"}}
    assert "sites.s1 is 'local': a hub testbed on hosts puts every site on a host of its own" \
        in refused(data)


def test_the_cli_refuses_two_local_sites_with_exit_2_before_anything(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host h*\n  User root\n")
    r = cli_inproc.tunbench("run", "--testbed", "mesh", "--site", "s1=local", "--site",
                            "s2=local", "--site", "s3=h3", "--ssh-config", str(cfg),
                            "--tunnels", "native,vxlan", "--out", str(tmp_path / "r"))
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "sites.s1 and sites.s2 are both 'local'" in r.stderr
    assert not (tmp_path / "r").exists()


def test_mesh_hosts_makes_no_endpoint_for_the_local_site() -> None:
    exp = exp_spec.build(mesh(MIXED), "e.toml")
    hosts = MeshHosts(exp.sites)
    assert sorted(hosts.endpoints) == ["s2", "s3"]
    # its pairs' views: the pair Topology with one local site (no endpoint for it), the
    # sender as a, the receiver as b, sharing the mesh's endpoints
    for x, y in (("s1", "s2"), ("s3", "s1")):
        view = hosts._view(x, y)
        here = "a" if x == "s1" else "b"
        there = "b" if here == "a" else "a"
        assert view.specs[here].local and not view.specs[there].local
        assert list(view.endpoints) == [there]
        assert view.endpoints[there] is hosts.endpoints[y if here == "a" else x]
        assert view.view(here) is None       # capability checks: this host itself
    both = hosts._view("s2", "s3")
    assert both.endpoints == {"a": hosts.endpoints["s2"], "b": hosts.endpoints["s3"]}
    # nothing to heal or mark down for the local site, and nothing was connected
    assert hosts.heal_sites(("s1",)) == [] and hosts.down == {}
    assert hosts._identity("s1")["boot_id"] and not hosts._sees("s1", "s2")
    hosts.close()


def test_parallel_takes_the_local_site_as_one_host_like_the_others() -> None:
    four = {"s1": "root@h1", "s2": "local", "s3": "root@h3", "s4": "root@h4"}
    exp = exp_spec.build({**mesh(four, parallel=True), "experiment": {"repeats": 1}}, "e")
    assert exp.mesh is not None and exp.mesh.parallel
    topo = topologies.of(exp)
    cases = plan(exp)
    steps = topo.steps(exp, cases)
    assert len(steps) == 3 and [c for s in steps for lane in s for c in lane] == cases
    for step in steps:   # two disjoint pairs a colour, the local site in one of them
        assert len(step) == 2
        sites = [s for lane in step for s in lane[0].pair]
        assert sorted(sites) == ["s1", "s2", "s3", "s4"]


def test_dry_run_says_where_each_site_is_and_opens_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host h*\n  User root\n")
    r = cli_inproc.tunbench("run", "--testbed", "mesh", "--site", "s1=local", "--site",
                            "s2=h2", "--site", "s3=h3", "--ssh-config", str(cfg),
                            "--tunnels", "native,vxlan", "--workloads", "stream",
                            "--repeats", "1", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1] == ("mesh: 3 sites, 3 pair(s), 3 colour(s) of disjoint pairs; on hosts "
                        "and this host (s1) one pair at a time")
    assert lines[2:5] == ["  colour 0: s2-s3", "  colour 1: s1-s3", "  colour 2: s1-s2"]
    assert lines[5] == "  sites: s1 local (this host), s2 h2, s3 h3"
    assert len([ln for ln in lines if ln.startswith("  0")]) == 6


def test_list_topologies_names_the_local_site() -> None:
    r = cli_inproc.tunbench("list", "--topologies", "mesh", "--json")
    assert r.returncode == 0, r.stderr
    mesh_doc = json.loads(r.stdout)["topologies"]["mesh"]
    sites = next(p for p in mesh_doc["params"] if p["key"] == "[sites] s1..sN")
    assert "at most one TARGET may be 'local': this host's own network stack" in sites["help"]
    assert "one of which may be this host ('local'" in mesh_doc["needs"]["hosts"]


def test_a_host_in_the_local_site_s_own_network_namespace_is_refused() -> None:
    """Opening counts the local site among the sites of one machine with this process's
    identity: a "host" reached over SSH that is this very network namespace (sshd here, say
    s2 = root@localhost) is two sites in one network stack, refused before any change."""
    exp = exp_spec.build(mesh({"s1": "local", "s2": "root@localhost", "s3": "root@h3"}), "e")
    hosts = MeshHosts(exp.sites)
    here = hosts._identity("s1")
    assert here == machine_identity() and here["netns"]
    other = {**here, "netns": "net:[1]"}   # another namespace of this machine: one group
    groups = machine_groups({"s1": here, "s3": other}, hosts.target, hosts._sees)
    assert [(g["sites"], g["boot_id"], g["filesystem"]) for g in groups] == [
        (["s1", "s3"], True, False)]   # the local site sees no agent directory of its own
    with pytest.raises(SpecError) as exc:
        machine_groups({"s1": here, "s2": dict(here)}, hosts.target, hosts._sees)
    assert exc.value.one_line().startswith(
        "sites s1 (local) and s2 (root@localhost) are one machine and one network namespace")
