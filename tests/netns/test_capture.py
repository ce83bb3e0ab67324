"""The capture receiver and its tc drop filter on a real testbed: the filter's scope and
teardown, exact loss counting with one and two sender threads, IPv6, agreement with the socket
receiver on a shaped link, and the loss-search workload's choice of receiver (capture where
the tunnel delivers on a device, sockets for SRv6, and the probe's fallback)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_loss_search import (  # noqa: F401
    DST,
    backlog_drops,
    flow0_data_dropped,
    shaped,
    tbf_knee_pps,
    underlay_drop_one_flow_in_ten,
)

import physics
from kinds_here import skip_unless_here
from tunbench import tunnels
from tunbench.errors import CommandFailed
from tunbench.testbed import bpfdrop, local
from tunbench.testbed.base import Testbed
from tunbench.workloads import loadgen
from tunbench.workloads.base import Context
from tunbench.workloads.loss_search import LossSearch, LossSearchParams
from tunbench.workloads.search import rfc2544_search

pytestmark = [pytest.mark.skipif(
    loadgen.find_binary() is None,
    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})"), pytest.mark.correctness]


def udp_in(tb: Testbed) -> int:
    """Datagrams site b's UDP stack saw (delivered, no port, or dropped at a full buffer)."""
    lines = [ln.split() for ln in tb.b.run(["cat", "/proc/net/snmp"]).stdout.splitlines()
             if ln.startswith("Udp:")]
    row = dict(zip(lines[0][1:], map(int, lines[1][1:]), strict=True))
    return row["InDatagrams"] + row["NoPorts"] + row["InErrors"]


def clsact_drops(tb: Testbed) -> int:
    qd = json.loads(tb.b.run(["tc", "-s", "-j", "qdisc", "show", "dev",
                              tb.b.underlay_if]).stdout)
    return sum(int(q.get("drops", 0)) for q in qd if q.get("kind") == "clsact")


def test_drop_filter_drops_only_our_ports_and_goes_with_the_ledger(testbed: Testbed) -> None:
    ns, dev = testbed.b.netns, testbed.b.underlay_if
    bpfdrop.attach(testbed.ledger, ns, dev, 5310, 5311)
    assert bpfdrop.filters(ns, dev) == [bpfdrop.FILTER_NAME]
    before = udp_in(testbed)
    inside = loadgen.run_trial(testbed, DST, loadgen.TrafficSpec("200", 4, 5311), 0.5, 2000,
                               capture=True)
    # the ring saw the packets, then the filter dropped them before site b's UDP stack
    assert inside.received > 0 and inside.received + inside.lost == inside.offered
    assert udp_in(testbed) - before < 10 and clsact_drops(testbed) >= inside.received
    # a socket receiver behind the filter gets nothing and no END: it is stopped after the
    # sender and reports everything lost (not a timeout)
    dead = loadgen.run_trial(testbed, DST, loadgen.TrafficSpec("200", 4, 5311), 0.5, 2000)
    assert dead.received == 0 and dead.lost == dead.offered > 0 and dead.loss_ratio == 1.0
    outside = loadgen.run_trial(testbed, DST, loadgen.TrafficSpec("200", 4, 5312), 0.5, 2000)
    assert outside.received > 0                              # other ports reach the socket
    assert outside.received + outside.lost == outside.offered
    testbed.a.run(["ping", "-c", "1", "-W", "2", DST])         # ICMP (and ARP) pass
    # the entry in the ledger removes the qdisc it created
    entry = [e for e in testbed.ledger.entries if e["kind"] == "bpfdrop"][-1]
    assert entry["qdisc"] is True
    testbed.ledger.entries.remove(entry)
    bpfdrop.detach(entry)
    assert bpfdrop.filters(ns, dev) == []
    assert "clsact" not in testbed.b.run(["tc", "qdisc", "show", "dev", dev]).stdout
    bpfdrop.detach(entry)   # already gone: fine


def test_drop_filter_leaves_a_clsact_it_did_not_create(testbed: Testbed) -> None:
    ns, dev = testbed.b.netns, testbed.b.underlay_if
    testbed.b.run(["tc", "qdisc", "add", "dev", dev, "clsact"])
    testbed.ledger.command(["tc", "qdisc", "del", "dev", dev, "clsact"], ns)
    with bpfdrop.dropping(testbed.ledger, ns, (dev,), 5320, 5320):
        assert len(bpfdrop.filters(ns, dev)) == 1
    assert bpfdrop.filters(ns, dev) == []
    assert "clsact" in testbed.b.run(["tc", "qdisc", "show", "dev", dev]).stdout
    assert not [e for e in testbed.ledger.entries if e["kind"] == "bpfdrop"]


def test_bad_port_range_is_refused_before_loading() -> None:
    with pytest.raises(ValueError, match="port range"):
        bpfdrop.program(6000, 5000)


@pytest.mark.parametrize("threads", [1, 2])
def test_capture_counts_exactly_on_a_real_underlay_drop(testbed: Testbed, threads: int) -> None:
    dev = underlay_drop_one_flow_in_ten(testbed)
    spec = loadgen.TrafficSpec(size="200", flows=10, port=5303, src_port=40000)
    with bpfdrop.dropping(testbed.ledger, testbed.b.netns, (testbed.b.underlay_if,), 5303, 5303):
        backlog = backlog_drops()
        t = loadgen.run_trial(testbed, DST, spec, 1.0, 10000, capture=True, threads=threads)
        backlog = backlog_drops() - backlog
    # flow 0 (of thread 0, whatever share of the packets that thread managed to send) is
    # dropped whole on site a's egress: the ring counts exactly the qdisc's drops as lost, plus
    # only what the ring itself flagged (socket_drops) or a starved backlog dropped (0 and 0
    # on a quiet host: then they are equal)
    dropped = flow0_data_dropped(testbed, dev, t, spec.flows)
    assert dropped > 0 and t.received + t.lost == t.offered
    assert dropped <= t.lost <= dropped + t.socket_drops + backlog, (t, backlog)
    assert t.loss_ratio == pytest.approx(t.lost / t.offered)
    assert t.latency_us["p50"] > 0


def test_capture_ipv6_sizes_and_latency(testbed: Testbed) -> None:
    dst6 = local.UNDERLAY6[1]
    spec = loadgen.TrafficSpec(size="300", flows=20, port=5330)
    with bpfdrop.dropping(testbed.ledger, testbed.b.netns, (testbed.b.underlay_if,), 5330, 5330):
        t = loadgen.run_trial(testbed, dst6, spec, 1.0, 20000, capture=True, threads=2)
    assert t.received > 0 and t.received + t.lost == t.offered   # counts, not the loss
    assert t.per_size_received == {"300": t.received}     # size from the IPv6 header
    assert 0 < t.latency_us["p50"] <= t.latency_us["p99"]


@pytest.mark.physics("rfc2544_capture_vs_socket")
def test_capture_and_socket_receivers_agree_on_a_shaped_link(shaped: Testbed) -> None:  # noqa: F811
    """The same RFC 2544 search on the same tbf-shaped link, counting with sockets and with the
    capture ring: the two rates agree within their recorded spread (the knee itself against
    tbf's formula is test_loss_search.py's physics)."""
    expected = tbf_knee_pps(361 + 14, 1.0)
    spec = loadgen.TrafficSpec(size="361", flows=100, port=5340)
    found: dict[str, float] = {}
    for capture in (False, True):
        def measure(rate: float, dur: float, capture: bool = capture) -> loadgen.TrialResult:
            return loadgen.run_trial(shaped, DST, spec, dur, rate, capture=capture, threads=2)
        with bpfdrop.dropping(shaped.ledger, shaped.b.netns,
                              (shaped.b.underlay_if,) if capture else (), 5340, 5340):
            r = rfc2544_search(measure, expected * 1.5, threshold=0.001,
                               resolution_pps=expected * 0.005, duration=1.0, min_pps=100)
        assert r.rate_pps, r
        found["capture" if capture else "socket"] = r.rate_pps
    print(f"RFC 2544 on a {expected:.0f} pps knee: {found}")
    physics.check("rfc2544_capture_vs_socket", found["capture"], found["socket"],
                  what="the socket receivers' rate on the same link")


# One RFC 2544 trial of 0.5 s at 4,000 pps (the search's upper bound, which passes: a search
# ends there), for the tests that ask which receiver counted and why, not what rate the path
# carries (the knee against tbf's formula: test_loss_search.py's physics)
ONE_TRIAL = {"max_rate_pps": 4000.0, "trial_duration": 0.5}


def _run_loss_search(tb: Testbed, ep: tunnels.Endpoints, **params: object):
    p = LossSearchParams(**{"sizes": ("361",), "method": "rfc2544", "trial_duration": 1.0,
                            "resolution_pct": 2.0, "latency_at_pct": (),
                            **params})  # type: ignore[arg-type]
    ctx = Context(tb, ep, duration=1.0, warmup=0)
    assert LossSearch().unsupported(ctx, p) is None
    return LossSearch().run(ctx, p)


@pytest.mark.parametrize("kind", ["native", "vxlan"])
def test_loss_search_counts_at_the_tunnel_device(testbed: Testbed, kind: str) -> None:
    drv = tunnels.get(kind)
    ep = drv().up(testbed, drv.parse_params({}))
    out = _run_loss_search(testbed, ep)
    rx = out.raw["receiver"]
    assert rx["mode"] == "capture" and rx["rx_ifnames"] == list(ep.rx_ifnames)
    # the probe passed (mode capture): the ring saw some of it, never more than was sent
    assert 0 < rx["probe_captured"] <= rx["probe_sent"] and rx["sender_threads"] >= 1
    assert "tunnel device receives them" in out.raw["accounting"]["loss"]
    trials = out.raw["sizes"]["361"]["trials"]
    assert trials and all(t["received"] + t["lost"] == t["offered"] for t in trials), trials
    assert out.metrics["rfc2544_pps_361"].value > 0
    # the drop filter is gone once the workload returns
    for ifname in ep.rx_ifnames:
        assert bpfdrop.filters(testbed.b.netns, ifname) == []


def test_loss_search_uses_sockets_where_nothing_is_received_on_a_device(
        testbed: Testbed) -> None:
    """SRv6 decapsulates in a seg6local route: no device receives the inner packet, so the
    tunnel declares no rx_ifnames and the search counts with sockets. Declaring the underlay
    anyway exercises the probe: it sees no inner packets and falls back, with a note."""
    skip_unless_here("srv6")
    drv = tunnels.get("srv6")
    ep = drv().up(testbed, drv.parse_params({}))
    assert ep.rx_ifnames == ()
    capture_only = LossSearchParams(receiver="capture")
    reason = LossSearch().unsupported(Context(testbed, ep, duration=1.0), capture_only)
    assert reason and "receiver=capture" in reason
    # which receiver counted is the question, not the rate: one short trial at a rate every
    # path here carries (the search ends when its first trial, at the upper bound, passes)
    out = _run_loss_search(testbed, ep, **ONE_TRIAL)
    assert out.raw["receiver"]["mode"] == "socket" and "probe_sent" not in out.raw["receiver"]
    # Linux SRv6 encap does not fragment the inner packet: it fragments the outer IPv6 one,
    # which End.DX4 cannot decapsulate. Every packet above the tunnel MTU is lost (the
    # workload's note names the lost sizes when a search finds no rate, e.g. IMIX's 1500 B).
    fits = loadgen.run_trial(testbed, ep.b4, loadgen.TrafficSpec(str(ep.mtu), 2, 5350), 0.5, 500)
    above = loadgen.run_trial(testbed, ep.b4, loadgen.TrafficSpec(str(ep.mtu + 1), 2, 5350),
                              0.5, 500)
    assert fits.received > 0 and fits.received + fits.lost == fits.offered
    assert above.received == 0 and above.lost == above.offered > 0
    wrong = dataclasses.replace(ep, rx_ifnames=(testbed.b.underlay_if,))
    out = _run_loss_search(testbed, wrong, **ONE_TRIAL)
    rx = out.raw["receiver"]
    assert rx["mode"] == "socket" and rx["probe_captured"] == 0 and rx["probe_sent"] > 0
    assert any("loss counted with UDP sockets instead" in n for n in out.notes)
    assert out.metrics["rfc2544_pps_361"].value > 0
    assert bpfdrop.filters(testbed.b.netns, testbed.b.underlay_if) == []


def test_loss_search_falls_back_when_the_filter_cannot_be_installed(testbed: Testbed) -> None:
    """A device that is not there (as on a host without clsact or bpf, the attach fails):
    auto counts with sockets and says why; receiver=capture stops with that reason."""
    drv = tunnels.get("native")
    ep = dataclasses.replace(drv().up(testbed, drv.parse_params({})),
                             rx_ifnames=("tb-nosuchdev",))
    out = _run_loss_search(testbed, ep, **ONE_TRIAL)
    assert out.raw["receiver"]["mode"] == "socket"
    assert "could not be installed" in out.raw["receiver"]["fallback"]
    assert any("tb-nosuchdev" in n and "UDP sockets instead" in n for n in out.notes)
    assert out.metrics["rfc2544_pps_361"].value > 0
    assert not [e for e in testbed.ledger.entries if e["kind"] == "bpfdrop"]
    with pytest.raises(CommandFailed, match="could not be installed"):
        _run_loss_search(testbed, ep, receiver="capture", **ONE_TRIAL)
