"""latency-under-load on a real testbed: sockperf ping-pong idle and while bulk iperf3 TCP
streams run through the same tunnel; both distributions recorded (with the streams as a dim),
the loaded median not below the idle one, the streams' goodput and CPU sampled over the
loaded window; nothing left running."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tunbench import proc, tunnels
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import Ledger
from tunbench.workloads.base import Context
from tunbench.workloads.latency_under_load import LatencyUnderLoad

pytestmark = [pytest.mark.skipif(
    not (shutil.which("sockperf") and shutil.which("iperf3")),
    reason="needs sockperf and iperf3 (deps/apt-*.txt; make deps)"), pytest.mark.correctness]


@pytest.fixture
def bottleneck() -> Iterator[Testbed]:
    """A testbed whose underlay is shaped to 50 Mbit/s (tbf, the run's --rate): the bulk
    streams queue there, as at a WAN link. Without a bottleneck (bare veth) nothing queues and
    the loaded median can even be lower than the idle one: busy CPUs do not sleep between
    requests (measured here: 25.0 µs idle, 23.5 µs under 4 streams on native)."""
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        yield local.build(rid, ledger, rate="50mbit")
    finally:
        errors = ledger.close()
        local.sweep(rid)
        assert not errors, errors


@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_loaded_latency_next_to_idle(bottleneck: Testbed, kind: str) -> None:
    testbed = bottleneck
    drv = tunnels.get(kind)
    ep = drv().up(testbed, drv.parse_params({}))
    p = LatencyUnderLoad.parse_params({"streams": 4})
    ctx = Context(testbed, ep, duration=2.0, warmup=1.0)
    out = LatencyUnderLoad().run(ctx, p)
    m = out.metrics
    idle, loaded = m["idle_rtt_p50"], m["loaded_rtt_p50"]
    assert idle.base == loaded.base == "udp_rtt"
    assert idle.dims == {"q": 50.0, "streams": 0} and loaded.dims == {"q": 50.0, "streams": 4}
    assert idle.value is not None and loaded.value is not None
    assert loaded.value >= idle.value > 0, (idle.value, loaded.value)
    assert m["rtt_p50_ratio"].value == pytest.approx(loaded.value / idle.value)
    for phase in ("idle", "loaded"):
        st = out.raw[phase]["stats"]
        # one request at a time: ~1 sample per RTT, and the loaded RTT is tens of ms here
        assert st["samples"] > (1000 if phase == "idle" else 15), (phase, st["samples"])
        assert m[f"{phase}_rtt_std"].value == st["std"] > 0
        assert m[f"{phase}_rtt_mean"].value == st["mean"]
    # the streams really ran during the loaded window and carried traffic
    assert out.raw["iperf3"]["streams"] == 4 and m["load_throughput"].value > 0
    assert len(out.series["load_throughput"]) >= 2
    # CPU sampled over the loaded window, with the tools' processes tracked
    assert ctx.cpu_record is not None and len(ctx.cpu_record.samples) >= 2
    assert ctx.cpu_record.summary()["busy_avg"] > 0
    tracked = {k.split("[")[0] for k in ctx.cpu_record.processes}
    assert {"iperf3-client", "iperf3-server", "sockperf-server-udp"} <= tracked, tracked
    for site in testbed.sites():
        left = proc.run(["ip", "netns", "pids", str(site.netns)]).stdout.split()
        names = {_comm(pid) for pid in left}
        assert not names & {"iperf3", "sockperf"}, names


def _comm(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:   # ended meanwhile
        return ""
