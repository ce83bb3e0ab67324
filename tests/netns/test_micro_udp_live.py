"""Small-packet UDP through the native generator on a real testbed: the `micro` mix is sent in
its proportions and its sizes, and only those, cross the underlay (IPv4 and IPv6), and the
fixed small sizes of a loss-search size sweep (64, 128, 200 B) are sent and received at exactly
their size."""

from __future__ import annotations

import pytest

from tunbench.testbed import local
from tunbench.testbed.base import Testbed
from tunbench.workloads import loadgen, traffic

pytestmark = [pytest.mark.skipif(
    loadgen.find_binary() is None,
    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})"), pytest.mark.correctness,
              pytest.mark.beside]


def _weights(spec: str) -> dict[str, int]:
    return {s: int(w) for s, w in (part.split(":") for part in spec.split(","))}


@pytest.mark.parametrize("dst", [local.UNDERLAY4[1], local.UNDERLAY6[1]], ids=["v4", "v6"])
def test_micro_mix_proportions(testbed: Testbed, dst: str) -> None:
    spec = loadgen.TrafficSpec(size="micro", flows=20, port=5301)
    t = loadgen.run_trial(testbed, dst, spec, 2.0, 20000)
    want = _weights(traffic.NAMED_MIXES["micro"])
    cycle = sum(want.values())
    assert t.mean_size_l3 == pytest.approx(traffic.profile("micro").mean_size, rel=1e-3)
    sent, recv = t.per_size_sent, t.per_size_received
    n = sum(sent.values())
    assert set(sent) == set(want) and n == t.offered, sent
    # sent: a shuffled cycle of the weights, so each size's count is within one cycle of its
    # share, however many packets the host let the generator send
    for size, weight in want.items():
        assert abs(sent[size] - weight * n / cycle) <= weight, (size, sent)
    # the loss at 20 kpps depends on the host's load (over this testbed's IPv6 underlay the
    # generator lost about half with any size) and is not size-neutral: what crossed is the
    # mix's sizes and no other, none counted twice
    assert t.received > 0 and t.received + t.lost == t.offered
    assert set(recv) == set(want), recv
    assert all(recv[size] <= sent[size] for size in want), (sent, recv)


@pytest.mark.parametrize("size", ["64", "128", "200"])
def test_fixed_small_sizes(testbed: Testbed, size: str) -> None:
    spec = loadgen.TrafficSpec(size=size, flows=10, port=5301)
    t = loadgen.run_trial(testbed, local.UNDERLAY4[1], spec, 1.0, 5000)
    assert set(t.per_size_sent) == set(t.per_size_received) == {size}
    assert t.received > 0 and t.mean_size_l3 == float(size)
