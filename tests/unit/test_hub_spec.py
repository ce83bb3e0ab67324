"""The hub testbed option without root: `[testbed]` and `--testbed hub --spokes N` refused in
one line per problem before anything is created (exit 2 through the CLI), recorded in the
experiment so `--resume` rebuilds it, and the report's hub table from case documents."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import cli_inproc
from tunbench import cli
from tunbench import spec as exp_spec
from tunbench.cli import _spec_dict
from tunbench.errors import SpecError
from tunbench.report import hubs
from tunbench.results.records import CaseRecord
from tunbench.testbed import hubspec


def refused(data: dict) -> list[str]:
    with pytest.raises(SpecError) as exc:
        exp_spec.build(data, "e.toml")
    return exc.value.one_line().splitlines()


def test_a_hub_testbed_is_parsed_and_recorded() -> None:
    exp = exp_spec.build({"testbed": {"kind": "hub", "spokes": 3},
                          "tunnel": [{"kind": "native"}, {"kind": "vxlan"}]}, "e.toml")
    assert exp.hub == hubspec.HubSpec(3)
    assert exp.to_dict()["testbed"] == {"kind": "hub", "spokes": 3}
    # --resume rebuilds the same experiment from the recorded one
    again = exp_spec.build(_spec_dict(exp.to_dict()), "e.toml")
    assert again.hub == exp.hub
    assert exp_spec.build({"testbed": {"kind": "hub"}}, "e.toml").hub == hubspec.HubSpec(10)
    assert exp_spec.build({"testbed": {"kind": "pair"}}, "e.toml").hub is None


@pytest.mark.parametrize("spokes", [0, 1001, -3, 2.5, "10", True])
def test_spokes_out_of_range_or_not_an_integer(spokes: object) -> None:
    (line,) = refused({"testbed": {"kind": "hub", "spokes": spokes}})
    assert f"e.toml: testbed.spokes must be an integer from 1 to 1000, got {spokes!r}" in line


def test_unknown_kind_field_and_spokes_without_a_hub() -> None:
    assert "testbed.kind 'star' is not one of pair, hub" in refused(
        {"testbed": {"kind": "star"}})[0]
    assert "unknown field testbed.colour (known: kind, spokes)" in refused(
        {"testbed": {"kind": "hub", "colour": 1}})[0]
    assert "testbed.spokes needs the hub testbed" in refused({"testbed": {"spokes": 3}})[0]
    assert "[testbed] must be a table" in refused({"testbed": "hub"})[0]


def test_what_the_hub_cannot_run_is_refused_each_in_one_line() -> None:
    lines = refused({"testbed": {"kind": "hub", "spokes": 3},
                     "experiment": {"mtus": [9000], "rate": "100mbit"},
                     "tunnel": [{"kind": "vxlan"}, {"kind": "wireguard"}],
                     "workload": [{"name": "stream"}, {"name": "latency"}],
                     "offloads": [{"name": "no-gro", "gro": "off"}]})
    text = "\n".join(lines)
    assert "tunnel kind(s) wireguard have no hub variant" in text
    assert "workload(s) latency do not run on the hub testbed" in text
    assert "underlay MTU is 1500" in text and "no shaping" in text
    assert "default offloads only" in text
    (line,) = refused({"testbed": {"kind": "hub"}, "sites": {"a": "local", "b": "root@gw2"}})
    assert "site(s) a, b are not hub testbed sites (name them hub and s1..sN" in line
    (line,) = refused({"testbed": {"kind": "hub"}, "chain": {"path": ["router"]}})
    assert "the hub testbed has no [chain]" in line


def test_the_flags_are_named_and_merge_over_the_file(tmp_path: Path) -> None:
    for args, words in ((["--testbed", "hub", "--spokes", "0"],
                         "--spokes must be an integer from 1 to 1000, got 0"),
                        (["--spokes", "4"], "--spokes needs the hub testbed"),
                        (["--testbed", "ring"], "--testbed 'ring' is not one of pair, hub"),
                        (["--testbed", "hub", "--tunnels", "native,geneve"],
                         "--testbed: tunnel kind(s) geneve have no hub variant")):
        with pytest.raises(SpecError) as exc:
            cli.spec_from_args(cli.build_parser().parse_args(["run", *args]))
        assert exc.value.one_line().startswith(words), exc.value.one_line()
    exp_file = tmp_path / "e.toml"
    exp_file.write_text('[testbed]\nkind = "hub"\nspokes = 5\n')
    args = cli.build_parser().parse_args(["run", "--experiment", str(exp_file),
                                          "--spokes", "7"])
    assert cli.spec_from_args(args).hub == hubspec.HubSpec(7)


def test_the_cli_exits_2_with_one_line_before_anything() -> None:
    r = cli_inproc.tunbench("run", "--testbed", "hub", "--spokes", "1001", "--dry-run")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "--spokes must be an integer from 1 to 1000, got 1001" in r.stderr


def _doc(kind: str, repeat: int, one: float, setup: float) -> CaseRecord:
    return CaseRecord.from_doc({
        "status": "ok", "case": {"id": f"{kind}-r{repeat}", "tunnel": {
            "label": kind, "display": kind, "kind": kind}, "repeat": repeat, "mtu": 1500,
            "workload": {"name": "stream"}, "offloads": {"name": "default"}},
            "hub": {"spokes": 3, "setup_s": setup, "memory_kb": 100 * repeat,
                    "one_mbps": one, "all_mbps": 2 * one, "all_spokes": 3,
                    **({"maps_kb": 161.4} if kind == "ebpf-vxlan" else {})}})


def test_hub_table_medians_per_kind_and_nothing_without_a_hub() -> None:
    cases = [_doc("vxlan", 1, 1000, 0.01), _doc("vxlan", 2, 3000, 0.03),
             _doc("vxlan", 3, 2000, 0.02), _doc("ebpf-vxlan", 1, 4000, 0.2)]
    rows = hubs.rows(cases)
    assert rows == [("vxlan", "3", "3", "0.020", "+200", "2,000", "4,000"),
                    ("ebpf-vxlan", "3", "1", "0.200", "+100 (maps 161)", "4,000", "8,000")]
    assert "<h2 id=hub>" in hubs.section_html(cases)
    no_hub = _doc("vxlan", 1, 1000, 0.01)
    assert hubs.section_html([dataclasses.replace(no_hub, hub={})]) == ""


def test_parameters_the_hub_would_ignore_are_refused_decap_is_kept() -> None:
    lines = refused({"testbed": {"kind": "hub", "spokes": 3},
                     "tunnel": [{"kind": "vxlan", "vni": 7},
                                {"kind": "ebpf-vxlan", "rules": 100}]})
    assert len(lines) == 2
    assert lines[0].startswith("e.toml: tunnel vxlan: vni set by the hub testbed")
    assert lines[1].startswith("e.toml: tunnel ebpf-vxlan: rules set by the hub testbed")
    exp = exp_spec.build({"testbed": {"kind": "hub"},
                          "tunnel": [{"kind": "ebpf-vxlan", "decap": "xdp"}]}, "e.toml")
    assert exp.tunnels[0].params.decap == "xdp"    # type: ignore[attr-defined]


def test_all_means_every_available_kind_with_a_hub_variant() -> None:
    exp = exp_spec.build({"testbed": {"kind": "hub"}, "tunnel": [{"kind": "all"}]}, "e.toml",
                         available={"native", "vxlan", "wireguard", "ebpf-vxlan", "gre"})
    assert [t.kind for t in exp.tunnels] == ["native", "ebpf-vxlan", "vxlan"]


HOSTS = {"hub": "root@hub1", "s1": "root@edge1",
         "s2": {"target": "root@edge2", "underlay_if": "eth1", "underlay4": "10.0.0.12"}}


def test_hub_and_spokes_on_hosts_are_parsed_and_recorded() -> None:
    """`[sites]` hub, s1..sN: the spokes counted from the sites (testbed.spokes may say the
    same), each site as a pair testbed's, recorded so --resume rebuilds it."""
    exp = exp_spec.build({"testbed": {"kind": "hub"}, "sites": dict(HOSTS),
                          "tunnel": [{"kind": "vxlan"}, {"kind": "ebpf-vxlan"}]}, "e.toml")
    assert exp.hub == hubspec.HubSpec(2)
    assert sorted(exp.sites) == ["hub", "s1", "s2"]
    assert exp.sites["s2"].underlay_if == "eth1" and exp.sites["s2"].underlay4 == "10.0.0.12"
    assert exp.sites["hub"].target == "root@hub1"
    again = exp_spec.build(_spec_dict(exp.to_dict()), "e.toml")
    assert again.sites == exp.sites and again.hub == exp.hub
    same = exp_spec.build({"testbed": {"kind": "hub", "spokes": 2}, "sites": dict(HOSTS)},
                          "e.toml")
    assert same.hub == hubspec.HubSpec(2)


@pytest.mark.parametrize(("sites", "testbed", "words"), [
    ({"hub": "root@h", "s1": "root@a", "s3": "root@b"}, {},
     "spoke sites must be s1..sN without gaps: s2 is missing (given: s1, s3)"),
    ({"hub": "root@h", "s1": "root@a"}, {"spokes": 3},
     "testbed.spokes is 3 but 1 spoke site(s) are given (s1): one host per spoke"),
    ({"hub": "root@h"}, {}, "no spoke sites (give s1=USER@HOST"),
    ({"s1": "root@a", "s2": "root@b"}, {}, "site hub is missing"),
    ({"hub": "root@h", "s1": "root@h"}, {}, "sites.s1 and sites.hub are the same host"),
    ({"hub": "local", "s1": "root@a"}, {}, "sites.hub is 'local': a hub testbed on hosts"),
    ({"hub": "root@h", "s1": {"target": "root@a", "underlay6": "fd00::1"}}, {},
     "sites.s1.underlay6: the hub testbed runs over an IPv4 underlay only"),
    ({"hub": "root@h", "s01": "root@a"}, {}, "site(s) s01 are not hub testbed sites"),
    ({"hub": "-oProxyCommand=x", "s1": "root@a"}, {}, "sites.hub: invalid site target"),
    ({"hub": "root@h", "s1": {"target": "root@a", "colour": 1}}, {},
     "unknown field sites.s1.colour"),
])
def test_a_bad_hub_or_spoke_site_is_refused_in_one_line(sites: dict, testbed: dict,
                                                        words: str) -> None:
    (line,) = refused({"testbed": {"kind": "hub", **testbed}, "sites": sites})
    assert words in line, line


def test_hosts_keep_their_own_mtu_and_the_cli_names_hub_sites(tmp_path: Path) -> None:
    (line,) = refused({"testbed": {"kind": "hub"}, "sites": dict(HOSTS),
                       "experiment": {"mtus": [9000]}})
    assert "underlay MTU is the hosts' own (never changed)" in line
    args = cli.build_parser().parse_args(
        ["run", "--testbed", "hub", "--site", "hub=root@hub1", "--site", "s1=root@edge1",
         "--site", "s2=root@edge2", "--tunnels", "vxlan,ebpf-vxlan"])
    exp = cli.spec_from_args(args)
    assert exp.hub == hubspec.HubSpec(2) and exp.sites["s2"].target == "root@edge2"
    with pytest.raises(SpecError) as exc:
        cli.spec_from_args(cli.build_parser().parse_args(
            ["run", "--testbed", "hub", "--spokes", "3", "--site", "hub=root@hub1",
             "--site", "s1=root@edge1"]))
    assert exc.value.one_line().startswith(
        "--spokes is 3 but 1 spoke site(s) are given (s1): one host per spoke (name s1..s3, "
        "or leave --spokes out)"), exc.value.one_line()
    r = cli_inproc.tunbench("run", "--testbed", "hub", "--site", "hub=root@hub1", "--site",
                            "s2=root@edge2", "--dry-run")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "s1 is missing" in r.stderr
