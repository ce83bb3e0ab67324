"""Small-packet UDP through the native generator on a real testbed: the `micro` mix crosses
the underlay in its proportions (IPv4 and IPv6), and the fixed small sizes of a loss-search
size sweep (64, 128, 200 B) are sent and received at exactly their size."""

from __future__ import annotations

import pytest

from tunbench.testbed import local
from tunbench.testbed.base import Testbed
from tunbench.workloads import loadgen, traffic

pytestmark = [pytest.mark.skipif(
    loadgen.find_binary() is None,
    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})"), pytest.mark.correctness,
              pytest.mark.beside]


def _weights(spec: str) -> dict[str, float]:
    pairs = [part.split(":") for part in spec.split(",")]
    total = sum(int(w) for _, w in pairs)
    return {s: int(w) / total for s, w in pairs}


@pytest.mark.parametrize("dst", [local.UNDERLAY4[1], local.UNDERLAY6[1]], ids=["v4", "v6"])
def test_micro_mix_proportions(testbed: Testbed, dst: str) -> None:
    spec = loadgen.TrafficSpec(size="micro", flows=20, port=5301)
    t = loadgen.run_trial(testbed, dst, spec, 2.0, 20000)
    want = _weights(traffic.NAMED_MIXES["micro"])
    assert t.mean_size_l3 == pytest.approx(traffic.profile("micro").mean_size, rel=1e-3)
    assert sum(t.per_size_sent.values()) >= 20_000, t.per_size_sent
    for counts in (t.per_size_sent, t.per_size_received):   # sent, and what crossed
        n = sum(counts.values())
        assert set(counts) == set(want), counts
        for size, frac in want.items():
            assert abs(counts[size] / n - frac) < 0.01, (size, counts)
    # the loss at 20 kpps depends on the host's load (over this testbed's IPv6 underlay the
    # generator lost about half with any size): the mix, not the loss, is this test's
    assert t.received > 0


@pytest.mark.parametrize("size", ["64", "128", "200"])
def test_fixed_small_sizes(testbed: Testbed, size: str) -> None:
    spec = loadgen.TrafficSpec(size=size, flows=10, port=5301)
    t = loadgen.run_trial(testbed, local.UNDERLAY4[1], spec, 1.0, 5000)
    assert set(t.per_size_sent) == set(t.per_size_received) == {size}
    assert t.received > 0 and t.mean_size_l3 == float(size)
