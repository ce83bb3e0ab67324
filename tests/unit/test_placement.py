"""The pure pieces of per-site CPU placement (testbed/placement.py): CPU lists as the kernel
writes them, the split of a host's CPUs between the two sites, the RPS masks sysfs takes, the
plan of a case, and the `placement` / `sites.X.cpus` settings with their one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import cli, spec
from tunbench.errors import SpecError
from tunbench.testbed import placement


@pytest.mark.parametrize("text, cpus", [
    ("0", (0,)), ("2-5", (2, 3, 4, 5)), ("0,2", (0, 2)), ("0-1,4-5", (0, 1, 4, 5)),
    ("5,0-1", (0, 1, 5)), ("1,1-2", (1, 2)), ("0 - 1", (0, 1)),
])
def test_parse_cpus(text: str, cpus: tuple[int, ...]) -> None:
    assert placement.parse_cpus(text) == cpus


@pytest.mark.parametrize("text, msg", [
    ("", "is not a CPU list"), ("a-b", "bad part 'a-b'"), ("5-2", "runs backwards"),
    ("0,,1", "bad part ''"), ("-1", "bad part '-1'"), ("0-", "bad part '0-'"),
])
def test_parse_cpus_refuses(text: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        placement.parse_cpus(text)


def test_parse_cpus_reads_what_the_kernel_writes() -> None:
    # the same format as /sys/devices/system/cpu/online and Cpus_allowed_list on this host
    online = Path("/sys/devices/system/cpu/online").read_text().strip()
    import os
    assert set(placement.parse_cpus(online)) >= os.sched_getaffinity(0)
    assert placement.format_cpus(placement.parse_cpus(online)) == online


@pytest.mark.parametrize("cpus, text", [
    ((0,), "0"), ((0, 1, 2, 3), "0-3"), ((0, 2, 3, 4, 7), "0,2-4,7"), ((3, 1, 2), "1-3"),
])
def test_format_cpus(cpus: tuple[int, ...], text: str) -> None:
    assert placement.format_cpus(cpus) == text
    assert placement.parse_cpus(text) == tuple(sorted(cpus))


@pytest.mark.parametrize("cpus, halves", [
    ([0, 1], [(0,), (1,)]),
    ([0, 1, 2, 3], [(0, 1), (2, 3)]),
    ([0, 1, 2], [(0,), (1, 2)]),            # the odd CPU to the later site (b, the receiver)
    ([6, 2, 4, 8], [(2, 4), (6, 8)]),       # an affinity with holes: sorted, then halved
])
def test_split_in_two(cpus: list[int], halves: list[tuple[int, ...]]) -> None:
    assert placement.split_cpus(cpus, 2) == halves


def test_split_needs_one_cpu_per_part() -> None:
    assert placement.split_cpus([0], 2) is None
    assert placement.split_cpus([], 2) is None
    parts = placement.split_cpus(range(10), 3)
    assert parts is not None and [len(p) for p in parts] == [3, 3, 4]
    assert sorted(c for p in parts for c in p) == list(range(10))


@pytest.mark.parametrize("cpus, mask", [
    ((0,), "1"), ((1,), "2"), ((0, 1), "3"), ((2, 3, 4, 5), "3c"),
    ((0, 32), "1,00000001"), (tuple(range(64)), "ffffffff,ffffffff"), ((), "0"),
])
def test_rps_mask(cpus: tuple[int, ...], mask: str) -> None:
    assert placement.rps_mask(cpus) == mask


def test_confine_is_an_argv_prefix() -> None:
    assert placement.confine(["iperf3", "-s"], "1") == ["taskset", "-c", "1", "iperf3", "-s"]


def test_plan_local() -> None:
    assert placement.plan("off", local=True) == {"mode": "off", "on": False, "cpus": {}}
    on = placement.plan("sites", local=True, available=[0, 1])
    assert on == {"mode": "sites", "on": True, "cpus": {"a": "0", "b": "1"}}
    assert placement.plan("sites", local=True, available=range(8))["cpus"] == \
        {"a": "0-3", "b": "4-7"}
    one = placement.plan("sites", local=True, available=[0])
    assert not one["on"] and "1 CPU" in one["why"]


def test_plan_hosts_uses_the_sites_cpus() -> None:
    p = placement.plan("sites", local=False, site_cpus={"a": "2-5", "b": ""})
    assert p == {"mode": "sites", "on": True, "cpus": {"a": "2-5"}}
    none = placement.plan("sites", local=False, site_cpus={})
    assert not none["on"] and "cpus" in none["why"]


def _exp(exp: dict[str, object], sites: object = None) -> spec.Experiment:
    data: dict[str, object] = {"experiment": exp, "tunnel": [{"kind": "native"}],
                               "workload": [{"name": "stream"}]}
    if sites is not None:
        data["sites"] = sites
    return spec.build(data, "f.toml")


def test_placement_setting() -> None:
    assert _exp({}).placement == "processes"   # the default: the ends of a measurement apart
    assert _exp({}).to_dict()["placement"] == "processes"
    off = _exp({"placement": "off"})
    assert off.to_dict()["placement"] == "off"      # --resume rebuilds it as off
    from tunbench import cli
    assert spec.build(cli._spec_dict(off.to_dict()), "f.toml").placement == "off"
    older = {k: v for k, v in _exp({}).to_dict().items() if k != "placement"}
    assert spec.build(cli._spec_dict(older), "f.toml").placement == "off"   # before it existed
    on = _exp({"placement": "sites"})
    assert on.placement == "sites" and on.to_dict()["placement"] == "sites"
    with pytest.raises(SpecError) as err:
        _exp({"placement": "on"})
    assert err.value.message == "f.toml: experiment.placement must be one of sites, processes, off, got 'on'"


def test_placement_flag() -> None:
    args = cli.build_parser().parse_args(["run", "--placement", "sites", "--tunnels", "native"])
    assert cli.spec_from_args(args).placement == "sites"
    args = cli.build_parser().parse_args(["run", "--tunnels", "native"])
    assert cli.spec_from_args(args).placement == "processes"
    with pytest.raises(SystemExit) as ex:
        cli.build_parser().parse_args(["run", "--placement", "yes"])
    assert ex.value.code == 2


def test_site_cpus() -> None:
    exp = _exp({}, {"a": {"target": "root@gw1", "cpus": "2-5"},
                    "b": {"target": "root@gw2", "cpus": "0,1"}})
    assert exp.sites["a"].cpus == "2-5" and exp.sites["b"].cpus == "0-1"
    assert exp.placement == "sites"          # naming a site's CPUs asks for placement
    assert exp.to_dict()["sites"]["a"]["cpus"] == "2-5"
    plain = _exp({}, {"a": "root@gw1", "b": "root@gw2"})
    assert plain.placement == "processes" and "cpus" not in plain.to_dict()["sites"]["a"]


@pytest.mark.parametrize("exp, sites, msg", [
    ({}, {"a": {"target": "gw1", "cpus": "2-x"}, "b": "gw2"},
     "f.toml: sites.a.cpus '2-x' is not a CPU list"),
    ({}, {"a": {"target": "gw1", "cpus": 3}, "b": "gw2"},
     "f.toml: sites.a.cpus 3 is not a CPU list"),
    ({"placement": "off"}, {"a": {"target": "gw1", "cpus": "2"}, "b": "gw2"},
     "f.toml: experiment.placement is 'off' but sites.a.cpus is given"),
])
def test_bad_site_cpus_are_one_line(exp: dict[str, object], sites: object, msg: str) -> None:
    with pytest.raises(SpecError) as err:
        _exp(exp, sites)
    assert err.value.message.startswith(msg) and "\n" not in err.value.message


def test_fingerprint_tells_placement_apart_and_keeps_older_campaigns() -> None:
    from tunbench.results import fingerprint
    off = fingerprint.derive(_exp({"placement": "off"}).to_dict(), {})
    assert "placement" not in off      # as every campaign recorded before placement existed
    on = fingerprint.derive(_exp({"placement": "sites"}).to_dict(), {})
    assert on["placement"] == "sites"
    assert fingerprint.differences(off, on) == ["CPU placement: A off, B sites"]
    default = fingerprint.derive(_exp({}).to_dict(), {})
    assert default["placement"] == "processes"
    assert fingerprint.differences(off, default) == ["CPU placement: A off, B processes"]
    assert fingerprint.differences(off, fingerprint.derive(
        _exp({"placement": "off"}).to_dict(), {})) == []


def test_a_workload_that_pins_iperf3_itself_turns_the_default_placement_off() -> None:
    """affinity (iperf3 -A) chooses iperf3's CPUs: the default placement steps aside instead
    of skipping every case; asking for both is still refused at the case."""
    from tunbench import spec
    data = {"experiment": {}, "tunnel": [{"kind": "native"}],
            "workload": [{"name": "stream", "affinity": "0,1"}]}
    assert spec.build(data, "f.toml").placement == "off"
    data["experiment"] = {"placement": "processes"}
    assert spec.build(data, "f.toml").placement == "processes"
