"""Which tunnel kinds each topology takes is computed from the drivers' declarations
(hub_capable, chain_site_capable, chain_gateway, fingerprint_tools; tunnels/base.py), never
listed beside them: every kind is accepted or refused by the hub testbed, a chain between hosts
and a gateway pair exactly as its driver declares, in one line naming the computed list."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tunbench import spec as exp_spec
from tunbench import tunnels
from tunbench.chain import gateway
from tunbench.errors import SpecError
from tunbench.results import fingerprint
from tunbench.tunnels.base import TunnelDriver

KINDS = sorted(tunnels.registry())
HOSTS = {"a": "root@h1", "b": "root@h2"}
FIX = " (fix the values named above; nothing was changed)"


def _line(data: dict[str, Any]) -> str | None:
    """The one-line refusal of an experiment, None when it is accepted."""
    try:
        exp_spec.build(data, "e.toml")
    except SpecError as exc:
        return exc.one_line()
    return None


def test_the_computed_lists_keep_the_kinds_the_hand_kept_ones_had() -> None:
    """The kinds are the ones the lists named before they were derived (order: registry)."""
    assert set(tunnels.hub_kinds()) == {"native", "vxlan", "ebpf-vxlan"}
    assert set(tunnels.chain_site_kinds()) == {"native", "vxlan"}
    assert set(gateway.built()) == {"vxlan", "wireguard", "ipsec", "srv6"}
    before = {"wireguard": ("wg", "wireguard-go"), "ipsec": ("swanctl",),
              "ssh-tun": ("ssh", "sshd"), "ssh-forward": ("ssh", "sshd")}
    for kind in KINDS:
        want = ("ovs-vswitchd",) if kind.startswith("ovs-") else before.get(kind, ())
        assert fingerprint._kind_tools(kind) == want, kind
    assert fingerprint._kind_tools("tb-retired-kind") == ()
    for view in (tunnels.hub_kinds(), tunnels.chain_site_kinds(), gateway.built()):
        assert list(view) == sorted(view)


@pytest.mark.parametrize("kind", KINDS)
def test_every_declaration_has_what_it_promises(kind: str) -> None:
    drv = tunnels.get(kind)
    fields = {f.name for f in dataclasses.fields(drv.Params)}
    assert set(drv.hub_params) <= fields, kind
    assert not drv.hub_params or drv.hub_capable
    if drv.hub_capable and kind != "native":   # the baseline builds nothing on the hub
        assert drv.hub_up.__func__ is not TunnelDriver.hub_up.__func__, kind  # type: ignore[attr-defined]
    assert drv.chain_gateway is None or drv.chain_gateway in gateway.STYLES, kind
    assert set(drv.fingerprint_tools) <= {t.name for t in drv.declared().tools}, kind


@pytest.mark.parametrize("kind", KINDS)
def test_the_hub_takes_a_kind_as_its_driver_declares(kind: str) -> None:
    line = _line({"testbed": {"kind": "hub", "spokes": 2}, "tunnel": [{"kind": kind}],
                  "workload": [{"name": "stream"}]})
    if tunnels.get(kind).hub_capable:
        assert line is None or "no hub variant" not in line, line
    else:
        assert line == (f"e.toml: tunnel kind(s) {kind} have no hub variant (the hub testbed "
                        f"runs {', '.join(tunnels.hub_kinds())}; use the pair testbed for the "
                        f"others){FIX}"), line


def test_a_parameter_the_hub_sets_is_refused_and_one_it_honours_is_not() -> None:
    line = _line({"testbed": {"kind": "hub", "spokes": 2},
                  "tunnel": [{"kind": "vxlan", "vni": 77}], "workload": [{"name": "stream"}]})
    assert line is not None and "tunnel vxlan: vni set by the hub testbed" in line
    assert _line({"testbed": {"kind": "hub", "spokes": 2},
                  "tunnel": [{"kind": "ebpf-vxlan", "decap": "xdp"}],
                  "workload": [{"name": "stream"}]}) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_chain_between_hosts_takes_a_kind_as_its_driver_declares(kind: str) -> None:
    line = _line({"sites": HOSTS, "chain": {"path": ["wan"]}, "tunnel": [{"kind": kind}]})
    refusal = (f"[chain] with [sites]: tunnel(s) {kind} at the sites are not supported "
               f"through a chain between hosts yet ({', '.join(tunnels.chain_site_kinds())} "
               "are)")
    if tunnels.get(kind).chain_site_capable:
        assert line is None or refusal not in line, line
    else:
        assert line is not None and refusal in line, line


@pytest.mark.parametrize("kind", KINDS)
def test_a_gateway_pair_takes_a_kind_as_its_driver_declares(kind: str) -> None:
    gw = {"kind": "gateway", "tunnel": kind}
    line = _line({"chain": {"path": ["gwa", "wan", "gwb"], "gwa": gw, "gwb": dict(gw)}})
    if tunnels.get(kind).chain_gateway:
        assert line is None or "cannot be a gateway" not in line, line
    else:
        assert line == (f"e.toml: chain.gwa: tunnel '{kind}' is a tunnel kind that cannot be a "
                        f"gateway (gateways terminate {', '.join(gateway.built())}){FIX}"), line


def test_the_gateway_styles_answer_for_srv6_and_the_devices() -> None:
    """What gateway.py asked `tunnel == "srv6"` before is the style's: an IPv4 underlay
    refused, the driver's underlay left alone, one forwarding by the pair, routes only."""
    seg6, device = gateway.style_of({"tunnel": "srv6"}), gateway.style_of({"tunnel": "vxlan"})
    assert gateway.pair_problems({"tunnel": "srv6", "underlay": 4}) == [
        "srv6 needs an IPv6 underlay (SRv6 carries its segment list in IPv6 headers): set "
        "underlay = 6 or leave underlay out"]
    assert (seg6.encapsulates_on_input, seg6.gateways_as_sites, seg6.driver_underlay) == \
        (True, False, False)
    assert (device.encapsulates_on_input, device.gateways_as_sites, device.driver_underlay) == \
        (False, True, True)
    assert gateway.inner_mtu({"tunnel": "srv6"}, 1500) == 1500 - 40 - 8 - 16
    assert gateway.inner_mtu({"tunnel": "vxlan", "underlay": 6}, 1500) == 1500 - 70
    assert gateway.tunnel_params({"tunnel": "vxlan", "underlay": 6}).underlay == 6
