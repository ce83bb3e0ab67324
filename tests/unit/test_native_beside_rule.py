"""Which cases measure native beside the method (runner.native_beside) and in which order
their bursts run (workloads/stream.burst_order); docs/methodology.md, "Native beside the
method". The live side is tests/netns/test_sequential_run.py."""

from __future__ import annotations

from typing import Any

import pytest

from tunbench import spec, topologies, tunnels
from tunbench.errors import SpecError
from tunbench.plan import plan
from tunbench.runner import native_beside
from tunbench.workloads import stream

KINDS = {"native", "vxlan", "wireguard", "ipsec", "ovs-vxlan", "ssh-forward", "ebpf-vxlan"}


def _beside(experiment: dict[str, Any], tunnel: dict[str, Any], remote: bool = False,
            **more: Any) -> dict[str, bool]:
    """{case id: native beside it} for native and `tunnel` with the stream workload."""
    exp = spec.build({"experiment": experiment,
                      "tunnel": [{"kind": "native"}, tunnel],
                      "workload": [{"name": "stream"}], **more}, "t.toml", available=KINDS)
    return {c.case_id: native_beside(exp, c, topologies.of(exp, c.through_chain),
                                     tunnels.get(c.tunnel.kind), remote)
            for c in plan(exp)}


def _methods(got: dict[str, bool]) -> set[bool]:
    return {v for k, v in got.items() if "-native-" not in k}


def test_the_sequential_design_pairs_the_kinds_that_leave_native_alone() -> None:
    for kind in ("vxlan", "wireguard"):
        got = _beside({}, {"kind": kind})
        assert _methods(got) == {True}, kind
        assert not any(v for k, v in got.items() if "-native-" in k)   # native: the reference
    assert _methods(_beside({}, {"kind": "ipsec", "mode": "tunnel", "impl": "libipsec"})) == {True}
    # the kernel's ESP is not surveyed yet (VM lab): by round
    assert _methods(_beside({}, {"kind": "ipsec", "mode": "tunnel", "impl": "kernel"})) == {False}


@pytest.mark.parametrize("tunnel", [{"kind": "ovs-vxlan"}, {"kind": "ssh-forward"},
                                    {"kind": "ebpf-vxlan"},   # its tc programs slow native
                                    {"kind": "ipsec", "mode": "transport", "impl": "kernel"}])
def test_kinds_that_take_native_path_pair_by_round(tunnel: dict[str, Any]) -> None:
    assert _methods(_beside({}, tunnel)) == {False}


@pytest.mark.parametrize("experiment", [{"repeats": 3}, {"delay": "5ms"}, {"loss": "0.1%"}])
def test_fixed_rounds_and_netem_pair_by_round(experiment: dict[str, Any]) -> None:
    """(The RTT, loss, rate and site-size axes need fixed rounds: `repeats` covers them.)"""
    assert _methods(_beside(experiment, {"kind": "vxlan"})) == {False}


def test_an_offload_variant_pairs_by_round() -> None:
    exp = spec.build({"tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                      "workload": [{"name": "stream"}],
                      "offloads": [{"name": "default"}, {"name": "no-gro", "gro": "off"}]}, "t.toml", available=KINDS)
    got = {c.case_id: native_beside(exp, c, topologies.of(exp, c.through_chain),
                                    tunnels.get(c.tunnel.kind)) for c in plan(exp)}
    assert {v for k, v in got.items() if "-vxlan-" in k and "no-gro" in k} == {False}
    assert {v for k, v in got.items() if "-vxlan-" in k and "no-gro" not in k} == {True}


def test_burst_order_alternates_which_side_goes_first() -> None:
    assert stream.burst_order(2) == ["method", "native", "native", "method"]
    order = stream.burst_order(stream.NATIVE_BURSTS)
    assert order.count("method") == order.count("native") == stream.NATIVE_BURSTS
    assert stream.burst_order(0) == []


def test_native_bursts_range() -> None:
    assert stream.Stream.parse_params({"native_bursts": 0}).native_bursts == 0
    with pytest.raises(SpecError, match="native_bursts 21 out of range"):
        stream.Stream.parse_params({"native_bursts": 21})


def test_sites_on_hosts_and_chain_campaigns_pair_by_round() -> None:
    """Hosts: a real RTT makes a 1 s burst mostly TCP's ramp. A chain campaign's direct
    cases run on a pair, but compare with its chain cases by round."""
    assert _methods(_beside({}, {"kind": "vxlan"}, remote=True)) == {False}
    chain = _beside({}, {"kind": "vxlan"}, chain={"path": ["router"], "direct": True})
    assert len(chain) > 2 and _methods(chain) == {False}
