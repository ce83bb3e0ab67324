"""The agg flush-timeout trade-off in the report (report/tradeoff.py, figures/tradeoff.py),
from a campaign recorded by a real run: `tunbench run --preset agg-tradeoff --scale 0.1` on
the shared 2-core development host (tests/data/agg/tradeoff-campaign: native, vxlan, agg at
flush 0, 50, 200 and 1000 µs; 100 B loss search on a 20 Mbit/s tbf underlay, UDP latency).
Expected values are read from the case files here, not written down."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tunbench.report import data, takeaways, tradeoff
from tunbench.report import html as html_page
from tunbench.report.figures import FIGURES, Figure, Palette, tradeoff_figures
from tunbench.report.takeaways import Takeaway

DATA = Path(__file__).resolve().parents[1] / "data" / "agg" / "tradeoff-campaign"
FLUSHES = [0, 50, 200, 1000]


def _cases() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((DATA / "cases").glob("*.json"))]


def _value(label: str, key: str) -> float:
    vals = [float(d["metrics"][key]["value"]) for d in _cases()
            if d["case"]["tunnel"]["label"] == label and key in d["metrics"]]
    assert len(vals) == 1, (label, key)
    return vals[0]


def _labels() -> dict[int, str]:
    return {d["case"]["tunnel"]["params"]["flush_us"]: d["case"]["tunnel"]["label"]
            for d in _cases() if d["case"]["tunnel"]["kind"] == "agg"}


@dataclass
class Page:
    figures: list[Figure]
    takeaways: list[Takeaway]
    html: Path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Page:
    """The report's own pieces on the recorded campaign: the trade-off figure (registered
    among the report's figures), every take-away, and the HTML page (the full build draws a
    dozen other figures too: tests/netns/test_agg_tradeoff_live.py runs that end to end)."""
    assert tradeoff_figures in FIGURES
    out = tmp_path_factory.mktemp("agg") / "report"
    c = data.load(DATA)
    figs = list(tradeoff_figures(c, out, Palette(c.tunnels())))
    takes = takeaways.compute(c)
    return Page(figs, takes, html_page.render(c, figs, takes, out))


def test_the_recorded_values_become_the_tradeoff() -> None:
    c = data.load(DATA)
    (t,) = tradeoff.find(c)
    assert (t.mtu, t.size, t.load_pct, t.goal, t.threshold_pct, t.rtt) == \
        (1500, "100", 80.0, "rfc2544", 0.1, "udp_rtt")
    assert [v.flush_us for v in t.aggs] == FLUSHES
    assert t.kind == "agg" and t.daemon == "tbagg"
    assert t.native is not None and t.baseline is not None and t.baseline.kind == "vxlan"
    native_p50 = _value("native", "udp_rtt_p50")
    for v in [*t.aggs, t.native, t.baseline]:
        assert v.values["wire_pkts"] == _value(v.label, "wire_pkts_per_inner_at_80pct_ndr_100")
        assert v.values["wire_bytes"] == _value(v.label,
                                                "wire_bytes_per_inner_byte_at_80pct_ndr_100")
        assert v.values["pps"] == _value(v.label, "rfc2544_pps_100")
        assert v.values["cpu"] == _value(v.label, "cpu_per_mpps_at_80pct_ndr_100")
        if v.kind == "agg":   # tbagg's own CPU; a kernel datapath has no daemon to read
            assert v.values["dp_cpu"] == _value(v.label,
                                                "datapath_cpu_per_mpps_at_80pct_ndr_100")
        else:
            assert "dp_cpu" not in v.values
        assert v.values["add_p50"] == pytest.approx(_value(v.label, "udp_rtt_p50") - native_p50)
        assert v.values["add_p99_load"] == pytest.approx(
            _value(v.label, "lat_p99_us_at_80pct_ndr_100")
            - _value("native", "lat_p99_us_at_80pct_ndr_100"))
    # what the run measured, as physics says it must come out: no aggregation at flush 0
    # (one datagram per packet, like vxlan), several packets per datagram above it, and the
    # wire bytes per inner byte of 100 B packets: native 114/100, vxlan 164/100
    zero, *waiting = t.aggs
    assert zero.values["wire_pkts"] == pytest.approx(1.0, abs=0.01)
    assert all(v.values["wire_pkts"] < 0.5 for v in waiting)
    assert t.native.values["wire_bytes"] == pytest.approx(1.14, abs=0.01)
    assert t.baseline.values["wire_bytes"] == pytest.approx(1.64, abs=0.01)


def test_one_flush_timeout_or_none_is_no_tradeoff() -> None:
    c = data.load(DATA)
    one = [r for r in c.cases if r.tunnel.kind != "agg" or r.tunnel.params["flush_us"] == 50]
    assert tradeoff.find(data.Campaign(c.root, c.index, one)) == []
    assert tradeoff.find(data.load(DATA.parents[1] / "campaigns" / "loss")) == []


def test_latency_cases_alone_give_the_latency_panels(tmp_path: Path) -> None:
    """Without a loss search only what was measured is drawn: the two latency panels."""
    c = data.load(DATA)
    lat = [r for r in c.cases if r.workload.name == "latency"]
    sub = data.Campaign(c.root, c.index, lat)
    (t,) = tradeoff.find(sub)
    assert t.size is None and t.goal is None and t.rtt == "udp_rtt"
    assert all("pps" not in v.values and "add_p50" in v.values for v in t.aggs)
    (fig,) = tradeoff_figures(sub, tmp_path, Palette(sub.tunnels()))
    assert "None" not in fig.title and fig.overlaps == ()
    svg = fig.svg.read_text()
    assert "added latency p99" in svg and "wire packets per inner packet" not in svg
    assert takeaways.agg_tradeoff(sub) == []   # no packet rates: nothing to weigh


def test_the_report_has_the_figure_the_table_and_the_takeaway(report: Page) -> None:
    figs = {f.name: f for f in report.figures}
    fig = figs["agg-tradeoff-1500"]
    assert fig.png.stat().st_size > 10_000 and fig.overlaps == ()
    svg = fig.svg.read_text()
    for _, title, *_ in tradeoff.METRICS:   # one panel per metric, x axis the flush timeout
        assert title in svg
    assert svg.count("flush timeout (µs)") == len(tradeoff.METRICS)
    page = report.html.read_text()
    assert '<figure id="agg-tradeoff-1500">' in page and "<h3 id=agg-tradeoff>" in page
    labels = _labels()
    vx_pps = _value("vxlan", "rfc2544_pps_100")
    for flush in FLUSHES:
        pps = _value(labels[flush], "rfc2544_pps_100")
        row = (f"<tr><td>{labels[flush]} (flush {flush} µs)</td>"
               f"<td>{_value(labels[flush], 'wire_pkts_per_inner_at_80pct_ndr_100'):.3f}")
        assert row in page
        assert f"{pps:,.0f} ({pps / vx_pps:.2f}× vxlan)" in page
    # the take-away: the shortest timeout within 5 % of the best rate, against vxlan
    best = max(_value(labels[f], "rfc2544_pps_100") for f in FLUSHES if f)
    knee = min(f for f in FLUSHES if f and _value(labels[f], "rfc2544_pps_100") >= 0.95 * best)
    pps = _value(labels[knee], "rfc2544_pps_100")
    wb = (_value(labels[knee], "wire_bytes_per_inner_byte_at_80pct_ndr_100")
          / _value("vxlan", "wire_bytes_per_inner_byte_at_80pct_ndr_100"))
    add = _value(labels[knee], "udp_rtt_p50") - _value("native", "udp_rtt_p50")
    take = next(t for t in report.takeaways if t.topic == "agg-tradeoff")
    assert take.facts["flush_us"] == knee
    for part in (f"agg at {knee} µs", f"{pps / vx_pps:.2f}× vxlan's packets/s at 0.1% loss",
                 f"{wb:.2f}× its wire bytes per inner byte", f"{add:+,.0f} µs p50 udp_rtt"):
        assert part in take.text
        assert html.escape(part) in page


def _as_other_kind(root: Path) -> Path:
    """The recorded campaign as if another aggregating kind had run it: the agg cases renamed
    'pack' with their flush timeout under 'hold_us', declared against 'geneve', and the vxlan
    cases renamed 'geneve'; every measured value stays as recorded."""
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        t = d["case"]["tunnel"]
        if t["kind"] == "agg":
            t["params"]["hold_us"] = t["params"].pop("flush_us")
            t.update(kind="pack", label=t["label"].replace("agg", "pack"),
                     display=t["label"].replace("agg", "pack"),
                     aggregation={"param": "hold_us", "baseline": "geneve"})
        elif t["kind"] == "vxlan":
            t.update(kind="geneve", label="geneve", display="geneve")
        p.write_text(json.dumps(d))
    return root


def test_any_aggregating_kind_that_records_the_metrics_has_the_tradeoff(
        tmp_path: Path) -> None:
    """The kind comes from the records (its declared flush parameter and baseline), not from
    a kind name in the report: the same recorded values under another aggregating kind give
    the same trade-off, table and take-away, named after that kind and its baseline."""
    import shutil
    root = _as_other_kind(Path(shutil.copytree(DATA, tmp_path / "c",
                                               ignore=shutil.ignore_patterns("report"))))
    (a,), (b,) = tradeoff.find(data.load(DATA)), tradeoff.find(data.load(root))
    assert b.kind == "pack" and b.baseline is not None and b.baseline.label == "geneve"
    assert [v.flush_us for v in b.aggs] == FLUSHES
    assert [v.values for v in b.aggs] == [v.values for v in a.aggs]
    assert a.baseline is not None and b.baseline.values == a.baseline.values
    assert [cells for _, cells in tradeoff.rows(b)] == [
        [x.replace("× vxlan", "× geneve") for x in cells] for _, cells in tradeoff.rows(a)]
    (text, facts), = tradeoff.takeaway_texts(data.load(root))
    assert text.startswith(f"pack at {facts['flush_us']} µs") and "geneve's packets/s" in text
    page = tradeoff.section_html(data.load(root))
    assert "<h3 id=pack-tradeoff>pack flush-timeout trade-off" in page
    # a kind whose records declare no aggregation has none, whatever its parameters say
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        d["case"]["tunnel"]["aggregation"] = None
        p.write_text(json.dumps(d))
    assert tradeoff.find(data.load(root)) == []
