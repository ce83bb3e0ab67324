"""Real namespaces, real tunnels, real traffic: native and VXLAN, and their teardown."""

from __future__ import annotations

import pytest

from tunbench import proc, tunnels
from tunbench.testbed import local, netlink
from tunbench.testbed.base import Testbed
from tunbench.workloads.base import Context
from tunbench.workloads.stream import Stream, StreamParams

pytestmark = [pytest.mark.correctness, pytest.mark.beside]


def test_testbed_underlay_both_families(testbed: Testbed, root_unchanged: None) -> None:
    a, b = testbed.a, testbed.b
    assert netlink.link_mtu(a.netns, a.underlay_if) == 1500
    a.run(["ping", "-c", "1", "-W", "2", b.underlay4])
    a.run(["ping", "-c", "1", "-W", "2", b.underlay6])
    # nothing of the testbed is in the root namespace
    assert a.underlay_if not in netlink.link_names(None)


@pytest.mark.parametrize("underlay", [4, 6])
def test_vxlan_carries_traffic_through_the_device(testbed: Testbed, underlay: int,
                                                  root_unchanged: None) -> None:
    drv = tunnels.get("vxlan")
    params = drv.parse_params({"underlay": underlay, "vni": 4242})
    ep = drv().up(testbed, params)
    assert ep.mtu == 1500 - (50 if underlay == 4 else 70)
    assert netlink.link_mtu(testbed.a.netns, str(ep.a_ifname)) == ep.mtu
    # the largest unfragmented packet through the tunnel is exactly the tunnel MTU
    testbed.a.run(["ping", "-c", "1", "-W", "2", "-M", "do", "-s", str(ep.mtu - 28), ep.b4])
    too_big = testbed.a.run(["ping", "-c", "1", "-W", "1", "-M", "do", "-s", str(ep.mtu - 27),
                             ep.b4], check=False)
    assert not too_big.ok
    before = drv().counters(testbed, ep)
    under_before = netlink.link_stats(testbed.b.netns, testbed.b.underlay_if)
    ctx = Context(testbed, ep, duration=2, warmup=0)
    out = Stream().run(ctx, StreamParams())
    after = drv().counters(testbed, ep)
    under_after = netlink.link_stats(testbed.b.netns, testbed.b.underlay_if)
    got = out.raw["iperf3"]["bytes_received"]
    assert got > 1_000_000
    # every byte iperf3 received went through the VXLAN device of the receiving site...
    assert after["b"]["rx_bytes"] - before["b"]["rx_bytes"] >= got
    assert after["a"]["tx_bytes"] - before["a"]["tx_bytes"] >= got
    # ...and crossed the underlay encapsulated (more bytes there than inside)
    assert under_after["rx_bytes"] - under_before["rx_bytes"] > got
    assert out.metrics["throughput"].value and out.metrics["throughput"].value > 0
    assert len(out.series["throughput"]) == 2


def test_native_stream_and_cpu(testbed: Testbed) -> None:
    drv = tunnels.get("native")
    ep = drv().up(testbed, drv.parse_params({}))
    ctx = Context(testbed, ep, duration=2, warmup=0)
    out = Stream().run(ctx, StreamParams())
    assert out.metrics["throughput"].value > 0
    rec = ctx.cpu_record
    assert rec is not None and len(rec.samples) >= 1
    summary = rec.summary()
    assert 0 < summary["busy_avg"] <= 100
    procs = summary["processes"]
    assert any(k.startswith("iperf3-client") for k in procs)
    assert all(v["cpu_seconds"] >= 0 for v in procs.values())


def test_server_stopped_after_measurement(testbed: Testbed) -> None:
    drv = tunnels.get("native")
    ep = drv().up(testbed, drv.parse_params({}))
    Stream().run(Context(testbed, ep, duration=1, warmup=0), StreamParams())
    left = proc.run(["ip", "netns", "pids", str(testbed.b.netns)]).stdout.split()
    assert left == []


def test_scratch_testbed_is_gone_after_an_error_inside() -> None:
    """local.scratch (the benches' and capture scripts' testbed): built with both sites'
    namespaces, and on an exception inside, torn down (nothing of its run id left) with the
    exception passed on."""
    seen: list[str] = []
    with pytest.raises(ZeroDivisionError), local.scratch() as tb:
        seen += [tb.a.netns, tb.b.netns]
        assert all(ns in netlink.list_netns() for ns in seen)
        assert tb.a.run(["ping", "-c", "1", "-W", "2", tb.b.underlay4]).ok
        _ = 1 / 0
    assert len(seen) == 2
    assert not [n for n in netlink.list_netns() if n.startswith(f"tb-{tb.run_id}-")]
