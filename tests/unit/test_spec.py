"""Experiment validation: every problem named with its place, all at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunbench import spec
from tunbench.errors import SpecError
from tunbench.plan import plan


def test_defaults() -> None:
    exp = spec.build({})
    assert [t.kind for t in exp.tunnels] == ["native", "vxlan"]
    assert [w.name for w in exp.workloads] == ["stream"]
    # no repeats given: the sequential design (rounds until decided, tests/unit/test_sequential)
    assert exp.mtus == (1500,) and exp.repeats is None and exp.sequential
    assert (exp.budget, exp.max_rounds, exp.planned_rounds) == (900.0, 20, 2)


def test_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(SpecError) as e:
        spec.build({"tunnel": [{"kind": "gree"}]})
    assert "unknown tunnel kind 'gree'" in e.value.message
    assert "vxlan" in e.value.message


@pytest.mark.parametrize("exp, needle", [
    ({"repeats": 0}, "experiment.repeats"),
    ({"repeats": 2.5}, "experiment.repeats"),
    ({"duration": "ten"}, "experiment.duration"),
    ({"warmup": -1}, "experiment.warmup"),
    ({"mtus": [1500, 100]}, "100 is not an MTU"),
    ({"mtus": "1500"}, "experiment.mtus"),
    ({"rate": "fast"}, "experiment.rate"),
    ({"order": "random"}, "experiment.order"),
    ({"family": 5}, "experiment.family"),
    ({"colour": "red"}, "unknown field experiment.colour"),
])
def test_experiment_field_errors(exp: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        spec.build({"experiment": exp})


@pytest.mark.parametrize("tunnel, needle", [
    ({"kind": "vxlan", "vni": 2**24}, "vni 16777216 out of range"),
    ({"kind": "vxlan", "vni": "x"}, "parameter 'vni' must be int"),
    ({"kind": "vxlan", "underlay": 5}, "parameter 'underlay' must be one of 4, 6"),
    ({"kind": "vxlan", "colour": 1}, "unknown parameter 'colour'"),
    ({"kind": "vxlan", "label": "bad label!"}, "label 'bad label!'"),
    ({"label": "x"}, "missing 'kind'"),
])
def test_tunnel_param_errors(tunnel: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        spec.build({"tunnel": [tunnel]})


def test_workload_param_errors() -> None:
    with pytest.raises(SpecError, match="streams 0 out of range"):
        spec.build({"workload": [{"name": "stream", "streams": 0}]})
    with pytest.raises(SpecError, match="unknown workload 'strem'"):
        spec.build({"workload": [{"name": "strem"}]})


def test_offload_errors() -> None:
    with pytest.raises(SpecError, match="unknown offload 'turbo'"):
        spec.build({"offloads": [{"name": "x", "turbo": "on"}]})
    with pytest.raises(SpecError, match="must be \"on\" or \"off\""):
        spec.build({"offloads": [{"name": "x", "gro": "maybe"}]})


def test_all_problems_at_once(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('[experiment]\nrepeats = 0\nrate = "fast"\n\n[[tunnel]]\nkind = "nope"\n\n'
                 '[[tunnel]]\nkind = "vxlan"\nvni = -1\n')
    with pytest.raises(SpecError) as e:
        spec.build(spec.load_toml(f), str(f))
    lines = e.value.message.splitlines()
    assert len(lines) == 4
    assert all(line.startswith(str(f)) for line in lines)
    assert any("tunnel[0]" in x and "nope" in x for x in lines)
    assert any("tunnel[1]" in x and "vni -1" in x for x in lines)


def test_toml_syntax_error_names_file(tmp_path: Path) -> None:
    f = tmp_path / "broken.toml"
    f.write_text("[experiment\nrepeats = 1\n")
    with pytest.raises(SpecError, match="broken.toml: not valid TOML"):
        spec.load_toml(f)


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="does not exist"):
        spec.load_toml(Path("/nonexistent/x.toml"))


def test_flags_override_file() -> None:
    base = {"experiment": {"repeats": 5, "duration": 30}, "tunnel": [{"kind": "native"}]}
    merged = spec.merge(base, {"experiment": {"duration": 2}, "tunnel": [{"kind": "vxlan"}]})
    exp = spec.build(merged)
    assert exp.repeats == 5 and exp.duration == 2
    assert [t.kind for t in exp.tunnels] == ["vxlan"]


def test_all_expands_to_available_native_first() -> None:
    exp = spec.build({"tunnel": [{"kind": "all"}]}, available={"vxlan", "native"})
    assert [t.kind for t in exp.tunnels] == ["native", "vxlan"]


def test_plan_rounds_native_first_and_shuffle_is_seeded() -> None:
    data = {"experiment": {"repeats": 2, "mtus": [1500, 9000]},
            "tunnel": [{"kind": "vxlan"}, {"kind": "native"}]}
    cases = plan(spec.build(data))
    assert len(cases) == 8
    assert [c.repeat for c in cases] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert len({c.case_id for c in cases}) == 8
    shuffled = {"experiment": {**data["experiment"], "order": "shuffled", "seed": 7},
                "tunnel": data["tunnel"]}
    a = [c.case_id for c in plan(spec.build(shuffled))]
    b = [c.case_id for c in plan(spec.build(shuffled))]
    assert a == b
    first = plan(spec.build(shuffled))[0]
    assert first.tunnel.kind == "native"


def test_tunnel_sweep_expands_one_tunnel_per_count_and_records_it() -> None:
    """`tunnels = [1, 2, 4]` (ECMP over N tunnels) is a sweep like stream counts: one tunnel
    and case per value, labelled LABEL-tN, each recording its base label and point."""
    exp = spec.build({"tunnel": [{"kind": "native"},
                                 {"kind": "wireguard", "tunnels": [1, 2, 4], "port": 51000},
                                 {"kind": "ipsec", "label": "esp", "tunnels": [1, 2]}]})
    assert [(t.label, getattr(t.params, "tunnels", None)) for t in exp.tunnels] == [
        ("native", None), ("wireguard-t1", 1), ("wireguard-t2", 2), ("wireguard-t4", 4),
        ("esp-t1", 1), ("esp-t2", 2)]
    assert all(getattr(t.params, "port", 51000) == 51000 for t in exp.tunnels[1:4])
    d = exp.tunnels[2].to_dict()
    assert d["base"] == "wireguard" and d["sweep"] == {"tunnels": 2}
    assert "sweep" not in exp.tunnels[0].to_dict()
    ids = [c.case_id for c in plan(exp)]
    assert "0002-wireguard-t2-stream-mtu1500-r1" in ids


@pytest.mark.parametrize("tunnel, needle", [
    ({"kind": "wireguard", "tunnels": []}, r"tunnels must be an integer or a non-empty list"),
    ({"kind": "ipsec", "tunnels": [1, "2"]}, r"got \[1, '2'\]"),
    ({"kind": "wireguard", "tunnels": [1, 1]}, "lists a value twice"),
    ({"kind": "wireguard", "tunnels": [1, 17]}, "tunnels 17 out of range"),
    ({"kind": "vxlan", "tunnels": [1, 2]}, "unknown parameter 'tunnels'"),
])
def test_tunnel_sweep_errors(tunnel: dict, needle: str) -> None:
    with pytest.raises(SpecError, match=needle):
        spec.build({"tunnel": [tunnel]})
