"""Which sites of a topology share one machine (testbed/topology.machine_groups), from the
agents' hello records: the grouping by kernel boot id for a pair and for a hub of N sites, the
machine id and filesystem judged per group, and two sites in one network namespace refused in
one line. The hosts' own answers are tested live in tests/remote/test_shared_machine.py."""

from __future__ import annotations

import pytest

from tunbench.errors import SpecError
from tunbench.testbed.topology import machine_groups


def hello(boot: str, netns: str, machine: str = "m1") -> dict[str, str]:
    return {"boot_id": boot, "machine_id": machine, "netns": netns}


def target(name: str) -> str:
    return f"root@{name}"


def test_separate_machines_form_no_group() -> None:
    ids = {"a": hello("k1", "n1"), "b": hello("k2", "n2", "m2")}
    assert machine_groups(ids, target, lambda o, x: False) == []


def test_a_pair_on_one_kernel_is_one_group() -> None:
    ids = {"a": hello("k1", "n1"), "b": hello("k1", "n2")}
    seen: list[tuple[str, str]] = []
    groups = machine_groups(ids, target, lambda o, x: seen.append((o, x)) is None)
    assert groups == [{"sites": ["a", "b"], "boot_id": True, "machine_id": True,
                       "filesystem": True}]
    assert seen == [("a", "b")]    # a's agent directory looked for from b


def test_a_hub_groups_only_the_sites_that_share_a_kernel() -> None:
    ids = {"hub": hello("k1", "n1"), "s1": hello("k1", "n2", "m9"), "s2": hello("k2", "n3"),
           "s3": hello("k1", "n4")}
    (group,) = machine_groups(ids, target, lambda o, x: x != "s3")
    assert group["sites"] == ["hub", "s1", "s3"]
    assert group["machine_id"] is False       # s1 reports another machine id
    assert group["filesystem"] is False       # s3 does not see the hub's directory


def test_two_machines_each_shared_are_two_groups() -> None:
    ids = {"hub": hello("k1", "n1"), "s1": hello("k1", "n2"), "s2": hello("k2", "n3", "m2"),
           "s3": hello("k2", "n4", "m2")}
    groups = machine_groups(ids, target, lambda o, x: True)
    assert [g["sites"] for g in groups] == [["hub", "s1"], ["s2", "s3"]]


def test_one_network_namespace_is_refused_in_one_line() -> None:
    ids = {"hub": hello("k1", "n1"), "s1": hello("k2", "n2", "m2"), "s2": hello("k1", "n1")}
    with pytest.raises(SpecError) as err:
        machine_groups(ids, target, lambda o, x: True)
    line = err.value.one_line()
    assert "sites hub (root@hub) and s2 (root@s2) are one machine and one network " \
        "namespace" in line and "\n" not in line


def test_a_missing_boot_id_judges_nothing() -> None:
    ids = {"a": {"netns": "n1"}, "b": {"netns": "n1"}}
    assert machine_groups(ids, target, lambda o, x: True) == []


def test_a_hub_records_its_groups_and_labels_each_site() -> None:
    """What a hub case on hosts records from the groups (HubHosts.sharing, shares_with)."""
    from tunbench.testbed.hubhosts import HubHosts
    from tunbench.testbed.topology import SiteSpec
    hh = HubHosts({n: SiteSpec(n, f"root@{n}") for n in ("hub", "s1", "s2")})
    assert hh.sharing() == {"shared_by_sites": False} and hh.shares_with("s1") == []
    ids = {"hub": hello("k1", "n1"), "s1": hello("k2", "n2"), "s2": hello("k1", "n3")}
    hh.shared = machine_groups(ids, target, lambda o, x: False)
    assert hh.sharing() == {"shared_by_sites": True, "shared_machine": [
        {"sites": ["hub", "s2"], "boot_id": True, "machine_id": True, "filesystem": False}]}
    assert hh.shares_with("hub") == ["s2"] and hh.shares_with("s2") == ["hub"]
    assert hh.shares_with("s1") == []
