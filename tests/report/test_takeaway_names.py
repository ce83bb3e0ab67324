"""Take-aways speak the metric catalogue's language on every recorded campaign
(tests/data/campaigns): names and units as the tables show them, never a result file's key
(tcp_rtt_p50, ndr_pps_imix); a delay or cost against native as × native, never "1479.2 % of
native"; sweeps and their scenarios in numeric order (streams=1, 4, 16)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tunbench.report import data, stats, takeaways

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"
ALL = sorted(p.name for p in CAMPAIGNS.iterdir() if (p / "index.json").exists())


@pytest.mark.parametrize("name", ALL)
def test_no_raw_metric_key_in_a_takeaway(name: str) -> None:
    c = data.load(CAMPAIGNS / name)
    # keys whose catalogue name differs from the key itself (throughput -> Throughput is
    # the same word; tcp_rtt_p50 -> TCP RTT p50 is not)
    keys = {r.metric for r in c.rows if r.metric.lower() not in c.display(r.metric).lower()}
    for t in takeaways.compute(c):
        for key in keys:
            assert not re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", t.text), \
                (name, t.topic, key, t.text)
        for pct in re.findall(r"([\d,.]+)% of native", t.text):   # a share, never a delay
            assert float(pct.replace(",", "")) <= 200, (name, t.text)


def test_latency_against_native_as_times_native() -> None:
    c = data.load(CAMPAIGNS / "latency")
    (share,) = [t for t in takeaways.compute(c) if t.topic == "share-of-native"]
    pct = share.facts["pct"]
    assert pct > 200 and share.facts["higher_is_better"] is False
    assert f"comes closest to native TCP RTT p50: {pct / 100:.2f}× native" in share.text
    assert "µs" in share.text and "tcp_rtt" not in share.text
    (lat,) = [t for t in takeaways.compute(c) if t.topic == "latency"]
    assert lat.text.startswith("In latency at MTU 1500, TCP RTT p50 against native's")


def test_loss_search_named_by_the_catalogue() -> None:
    c = data.load(CAMPAIGNS / "loss")
    (share,) = [t for t in takeaways.compute(c) if t.topic == "share-of-native"]
    assert "of native NDR, IMIX" in share.text and "packets/s" in share.text


def test_scenarios_and_sweeps_in_numeric_order() -> None:
    c = data.load(CAMPAIGNS / "encrypted-streams")
    assert [s[0] for s in c.scenarios()] == ["stream streams=1", "stream streams=4",
                                            "stream streams=16"]
    sorted_names = sorted(["stream streams=16", "stream streams=4", "stream streams=1"],
                          key=stats.natural)
    assert sorted_names == ["stream streams=1", "stream streams=4", "stream streams=16"]
    texts = {t.topic: t.text for t in takeaways.compute(c)}
    assert re.search(r"by streams: 1: .*, 4: .*, 16: ", texts["share-of-native"])
    sweep = data.load(CAMPAIGNS / "sweep")
    scaling = [t.text for t in takeaways.compute(sweep) if t.topic == "scaling"]
    assert scaling and all("after 1 stream " in t for t in scaling)   # not "1 streams"
