"""Traffic like the SD-WAN study's on a real testbed: a custom IMIX's size proportions over
100k packets counted at the receiver, an RFC 6985 genome's letter counts, and the simple IMIX
over IPv6 (its small packets raised to 60 B)."""

from __future__ import annotations

import time

import pytest

from tunbench.testbed import local
from tunbench.testbed.base import Testbed
from tunbench.workloads import loadgen

pytestmark = pytest.mark.skipif(
    loadgen.find_binary() is None,
    reason=f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})")


def counted(tb: Testbed, dst: str, spec: loadgen.TrafficSpec, want: int,
            rate: float = 50000) -> tuple[dict[str, int], dict[str, int]]:
    """Packets sent and received per size over trials at `rate` until `want` were sent (the
    shared host may not keep the rate: a short trial is topped up with another)."""
    sent: dict[str, int] = {}
    recv: dict[str, int] = {}
    for _ in range(4):
        t = loadgen.run_trial(tb, dst, spec, 2.0, rate)
        for d, extra in ((sent, t.per_size_sent), (recv, t.per_size_received)):
            for k, v in extra.items():
                d[k] = d.get(k, 0) + v
        if sum(sent.values()) >= want:
            break
    assert sum(sent.values()) >= want, f"only {sum(sent.values())} packets sent"
    return sent, recv


def test_custom_mix_proportions_over_100k_packets(testbed: Testbed) -> None:
    # the study's customised IMIX (48/576/1438 B IP), with weights that are not the simple 7:4:1
    spec = loadgen.TrafficSpec(size="mix", mix="48:5,576:3,1438:2", flows=100, port=5321)
    assert spec.profile().mean_size == pytest.approx((48 * 5 + 576 * 3 + 1438 * 2) / 10)
    sent, recv = counted(testbed, local.UNDERLAY4[1], spec, 100_000)
    want = {"48": 0.5, "576": 0.3, "1438": 0.2}
    assert set(recv) == set(want), recv
    for counts in (sent, recv):   # what the generator sent, and what crossed the underlay
        n = sum(counts.values())
        assert n >= 99_000
        for size, frac in want.items():
            assert abs(counts[size] / n - frac) < 0.005, (size, counts)


def test_genome_letter_counts(testbed: Testbed) -> None:
    # RFC 6985: a=64, b=128, g=1518; the string is the repeating sequence (8 a, 4 b, 1 g)
    spec = loadgen.TrafficSpec(size="genome", genome="aaaaaaaabbbbg", flows=10, port=5322)
    sent, recv = counted(testbed, local.UNDERLAY4[1], spec, 20_000, rate=20000)
    n = sum(recv.values())
    assert set(recv) == {"64", "128", "1518"}, recv
    for size, frac in (("64", 8 / 13), ("128", 4 / 13), ("1518", 1 / 13)):
        # the sequence is not shuffled: counts hold to within one cycle
        assert abs(sent[size] - frac * sum(sent.values())) <= 8, sent
        assert abs(recv[size] / n - frac) < 0.01, recv


def dad_done(tb: Testbed) -> None:
    """The underlay's IPv6 addresses leave DAD (tentative addresses drop what they receive)."""
    for _ in range(50):
        if not any(s.run(["ip", "-6", "addr", "show", "tentative"]).stdout.strip()
                   for s in tb.sites()):
            return
        time.sleep(0.1)
    raise AssertionError("IPv6 addresses still tentative after 5 s")


def test_imix_over_ipv6(testbed: Testbed) -> None:
    dad_done(testbed)
    spec = loadgen.TrafficSpec(size="imix", flows=20, port=5323, family=6)
    assert spec.mix_args() == ["--mix", "60:7,576:4,1500:1"]
    t = loadgen.run_trial(testbed, local.UNDERLAY6[1], spec, 1.0, 12000)
    n = sum(t.per_size_received.values())
    assert n > 5000 and t.loss_ratio < 0.01, t
    for size, frac in (("60", 7 / 12), ("576", 4 / 12), ("1500", 1 / 12)):
        assert abs(t.per_size_received[size] / n - frac) < 0.02, t.per_size_received
