"""Hub-and-spokes with real traffic: one hub, 3 spokes (kernel VXLAN devices), the hub built
with N kernel VXLAN devices or with one tbtun attach point and N rules. Traffic to each spoke
arrives at that spoke only; removing a spoke's rule stops its traffic (dropped, counted)
while the others keep running; nothing is left afterwards."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tunbench import proc, tunnels
from tunbench.capabilities import root_missing
from tunbench.errors import SpecError
from tunbench.tbtun import hub as tbhub
from tunbench.tbtun import loader
from tunbench.testbed import hub, local, names, netlink
from tunbench.testbed.ledger import Ledger

TB = [sys.executable, "-m", "tunbench"]


def _why_not() -> str | None:
    if root_missing():
        return "needs root"
    drv = tunnels.get("ebpf-vxlan")
    missing = drv.requirements(drv.default_params())
    return missing[0].one_line() if missing else None


pytestmark = [pytest.mark.skipif(_why_not() is not None, reason=f"tbtun hub: {_why_not()}"), pytest.mark.correctness,
              pytest.mark.beside]


@pytest.fixture
def hub3() -> Iterator[hub.Hub]:
    rid = names.new_run_id({n.split("-")[1] for n in netlink.list_netns()
                            if names.is_ours_netns(n)})
    ledger = Ledger(rid)
    try:
        yield hub.build(rid, ledger, 3)
    finally:
        errors = ledger.close()
        local.sweep(rid)
        assert not errors, errors
        left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
        assert not left and not loader.run_dir(rid).exists(), left


def _rx(h: hub.Hub) -> list[int]:
    return [netlink.link_stats(s.netns, s.vxlan_if)["rx_packets"] for s in h.spokes]


def _ping(h: hub.Hub, dst: str, count: int = 2) -> bool:
    return h.run(["ping", "-c", str(count), "-i", "0.2", "-W", "2", dst], timeout=20,
                 check=False).ok


def _each_spoke_gets_its_own(h: hub.Hub) -> None:
    for s in h.spokes:
        before = _rx(h)
        assert _ping(h, s.inner4), f"spoke {s.index} unreachable"
        grew = [after - b for after, b in zip(_rx(h), before, strict=True)]
        assert grew[s.index - 1] >= 2, grew
        assert [g for i, g in enumerate(grew) if i != s.index - 1] == [0, 0], grew


def test_hub_with_kernel_vxlan_devices_reaches_each_spoke(hub3: hub.Hub) -> None:
    devs = tbhub.kernel_vxlan(hub3)
    assert len(devs) == 3
    _each_spoke_gets_its_own(hub3)


def test_hub_with_one_tbtun_attach_point_and_rule_removal(hub3: hub.Hub) -> None:
    h = hub3
    where = tbhub.tbtun(h, attach="auto")
    assert loader.filters(h.netns, h.underlay_if) == {"egress": ["tb_encap"],
                                                      "ingress": ["tb_decap"]}
    assert loader.tcx_attached(h.netns, h.underlay_if) == (
        not loader.tcx_missing(platform.release()))       # auto: tcx where the kernel has it
    assert loader.attached_by(where) == ("tc" if loader.tcx_missing(platform.release())
                                         else "tcx")      # what the hub case records
    _each_spoke_gets_its_own(h)
    # per-rule counters: each spoke's rule carried its own pings
    rules = {r.prefix: r for r in loader.list_rules(where)}
    counters = loader.rule_counters(where)
    assert all(counters[rules[f"{s.inner4}/32"].id][0] >= 2 for s in h.spokes), counters
    # TCP to spoke 2 through the kernel VXLAN device at the far end
    s2 = h.spokes[1]
    srv = proc.spawn(["iperf3", "-s", "-1", "-B", s2.inner4], netns=s2.netns)
    try:
        proc.wait_ready(srv, ready=lambda: _listening(s2.netns), timeout=30)
        r = h.run(["iperf3", "-c", s2.inner4, "-t", "1", "-J"], timeout=40)
        assert json.loads(r.stdout)["end"]["sum_received"]["bytes"] > 1_000_000
    finally:
        srv.stop()
    # remove spoke 2's rule with the CLI: its traffic stops (no_rule), the others still run
    before = loader.stats(where)["no_rule"]["packets"]
    r = subprocess.run(TB + ["tunnel-rules", "del", "--site", f"{h.run_id}/hub",
                             f"{s2.inner4}/32"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rx = _rx(h)
    assert not _ping(h, s2.inner4, count=3)
    assert loader.stats(where)["no_rule"]["packets"] >= before + 3
    assert _rx(h)[1] == rx[1]
    for s in (h.spokes[0], h.spokes[2]):
        assert _ping(h, s.inner4)


def _listening(netns: str) -> bool:
    out = proc.run(["ss", "-Hltn", "sport", "= :5201"], netns=netns, timeout=10).stdout
    return bool(out.strip())


def test_bad_spoke_count_is_refused_before_anything_is_created() -> None:
    rid = names.new_run_id()
    with pytest.raises(SpecError, match="spokes 0 is not within 1..1000"):
        hub.build(rid, Ledger(rid, journal=False), 0)
    assert not [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
