"""OVS kinds without root: parsers on captured real ovs-appctl output, overheads, params."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tunbench import tunnels
from tunbench.errors import SpecError
from tunbench.tunnels import ovs

KINDS = ("vxlan", "geneve", "gre")


@pytest.mark.parametrize("kind", KINDS)
def test_parse_dump_flows_captured(data_dir: Path, kind: str) -> None:
    text = (data_dir / "ovs" / f"dump-flows-{kind}-b.txt").read_text()
    flows = ovs.parse_dump_flows(text)
    # every flow line of the dump is parsed (the header line is not a flow)
    assert len(flows) == sum(1 for line in text.splitlines() if "actions:" in line)
    assert all(f["packets"] >= 0 and f["bytes"] >= f["packets"] for f in flows)
    pop = ovs.flow_totals(flows, "tnl_pop")
    push = ovs.flow_totals(flows, "tnl_push")
    # site b received the iperf3 stream (decapsulated) and sent the ACKs (encapsulated)
    assert pop["flows"] >= 1 and pop["bytes"] > 10_000_000
    assert push["flows"] >= 1 and 0 < push["bytes"] < pop["bytes"]


@pytest.mark.parametrize("kind", KINDS)
def test_overhead_matches_the_header_ovs_pushes(data_dir: Path, kind: str) -> None:
    """The tnl_push header (outer Ethernet + IP + encapsulation) has the size of our overhead
    (outer IP + encapsulation + the inner Ethernet header the tunnel carries)."""
    text = (data_dir / "ovs" / f"dump-flows-{kind}-b.txt").read_text()
    sizes = {int(s) for s in re.findall(r"header\(size=(\d+)", text)}
    drv = tunnels.get(f"ovs-{kind}")
    assert sizes == {drv.overhead(drv.parse_params({}), 4)}


@pytest.mark.parametrize("kind", KINDS)
def test_parse_dpctl_show_captured(data_dir: Path, kind: str) -> None:
    ports = ovs.parse_dpctl_show((data_dir / "ovs" / f"dpctl-show-s-{kind}-b.txt").read_text())
    tun = [p for p in ports.values() if p["type"] == kind]
    assert len(tun) == 1
    veth = next(p for n, p in ports.items() if n.endswith("ub"))
    inner = next(p for n, p in ports.items() if n.endswith("ov"))
    assert veth["type"] == "" and inner["type"] == "tap"
    # what arrived on the underlay was delivered, decapsulated, to the inner port
    assert veth["rx_bytes"] > inner["tx_bytes"] > 10_000_000
    assert set(veth) >= {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes"}


def test_overheads() -> None:
    want = {"ovs-vxlan": (50, 70), "ovs-geneve": (50, 70), "ovs-gre": (42, 62),
            "ovs-stt": (74, 94)}
    for kind, (v4, v6) in want.items():
        drv = tunnels.get(kind)
        p = drv.parse_params({})
        assert (drv.overhead(p, 4), drv.overhead(p, 6)) == (v4, v6)
        assert drv.tunnel_mtu(p, 1500) == 1500 - v4


@pytest.mark.parametrize("raw, needle", [
    ({"datapath": "kernel"}, "parameter 'datapath' must be one of 'auto', 'netdev', 'system'"),
    ({"vni": 0}, "vni 0 out of range"),
    ({"port_order": "random"}, "parameter 'port_order' must be one of 'fixed', 'hashed'"),
    ({"bogus": 1}, "unknown parameter 'bogus'"),
])
def test_bad_params_one_line(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(SpecError) as exc:
        tunnels.get("ovs-vxlan").parse_params(raw)
    line = exc.value.one_line()
    assert needle in line and "\n" not in line


def test_stt_unavailable_on_netdev_with_reason() -> None:
    drv = tunnels.get("ovs-stt")
    missing = drv.requirements(drv.parse_params({"datapath": "netdev"}))
    assert any("userspace datapath" in m.what and "drops every packet" in m.why
               for m in missing)


def test_registry_has_the_four_kinds() -> None:
    reg = tunnels.registry()
    for kind in ("ovs-vxlan", "ovs-geneve", "ovs-gre", "ovs-stt"):
        assert reg[kind].kind == kind and reg[kind].summary
