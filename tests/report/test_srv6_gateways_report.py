"""The chain report on a campaign recorded by a real `tunbench run --preset srv6-gateways -t 1
--warmup 0 --repeats 2` on this host's namespaces (tests/data/campaigns/srv6-gateways): seed
004's plan, a -> gwa =srv6=> transit (End) =srv6=> gwb -> b and direct in the same round, TCP
and UDP throughput, RTT and hops. The chain diagram with the SRH and the transit End node,
the chain-vs-direct table's means (throughput, RTT, hop count) computed here again from the
case files, the take-aways, the figures and the page in Chromium."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path

from tunbench.report import build

NAME = "srv6-gateways"
WORKLOADS = ("stream", "udp-rate", "ping")


def _docs(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def test_each_round_ran_direct_then_through_the_gateways(
        built: Callable[[str], build.Report]) -> None:
    docs = _docs(built(NAME).html.parent.parent)
    assert len(docs) == 2 * 2 * 3 and all(d["status"] == "ok" for d in docs)
    assert [(d["case"]["repeat"], d["case"]["topology"], d["case"]["workload"]["name"])
            for d in docs] == [(r, t, w) for r in (1, 2) for t in ("direct", "chain")
                               for w in WORKLOADS]
    for d in docs:
        if d["case"]["topology"] == "direct":
            assert "chain" not in d
            continue
        gt = d["testbed"]["chain"]["gateway_tunnel"]
        assert gt["kind"] == "srv6" and gt["transit"] == ["transit"]
        assert d["chain"]["probe"]["routers"] == 1
        delta = d["chain"]["counters"]["delta"]
        assert delta["transit"]["function"]["srv6_end_packets"] > 0
        assert delta["gwb"]["function"]["srv6_end_dx4_packets"] > 0


def test_chain_section_sets_the_gateways_against_direct(
        built: Callable[[str], build.Report], browser: Callable) -> None:
    """Direct vs through the SRv6 gateways: TCP and UDP throughput, RTT and the hop count
    (0 direct, 1 through the gateways: the pair routes once, the End node only lowers the
    outer hop limit), each the mean of the case files, and the take-aways saying so."""
    rep = built(NAME)
    docs = _docs(rep.html.parent.parent)
    page = rep.html.read_text()
    assert "<h2 id=chain-diagram>Chain</h2>" in page
    assert "<code>a -&gt; gwa =srv6=&gt; transit =srv6=&gt; gwb -&gt; b</code>" in page
    assert "SRv6 transit End SID (outer hop limit - 1; inner TTL untouched)" in page
    segs = next(d for d in docs if "chain" in d)["testbed"]["chain"]["gateway_tunnel"][
        "srv6"]["segments_to_b4"]
    assert len(segs) == 2 and f"SRH [{', '.join(segs)}]" in page
    assert "<h3>Through the chain vs direct</h3>" in page
    means = {}
    # each metric by the name the rest of the report gives it, never its key
    for wl, metric, shown in (("stream", "throughput", "Throughput (Mbit/s)"),
                              ("udp-rate", "throughput", "Throughput (Mbit/s)"),
                              ("ping", "rtt_avg", "Ping RTT, average (µs)"),
                              ("ping", "hops", "Hops (hops)")):
        mine = [d for d in docs if d["case"]["workload"]["name"] == wl]
        direct, chain = (statistics.fmean(d["metrics"][metric]["value"] for d in mine
                                          if d["case"]["topology"] == t)
                         for t in ("direct", "chain"))
        means[wl, metric] = direct, chain
        pct = "–" if metric == "hops" else f"{100 * chain / direct:.1f}%"
        label = mine[0]["case"]["workload"]["label"]
        row = (f"<tr><td class=l>{label}</td><td class=l>{shown}</td>"
               f"<td>{_fmt(direct)}</td><td>{_fmt(chain)}</td><td>{pct}</td></tr>")
        assert row in page, row
    assert means["ping", "hops"] == (0, 1)
    assert not re.search(r"<td class=l>(throughput|rtt_avg|hops) \(", page)
    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    assert "Through the chain vs direct" in load.text
    rtt_direct, rtt_chain = means["ping", "rtt_avg"]
    said = [line for line in load.text.splitlines() if "RTT is" in line]
    assert said and said[0].startswith(f"Through the chain, ping's RTT is {_fmt(rtt_chain)} ")
    assert said[0].endswith(f"{_fmt(rtt_direct)} µs direct ({rtt_chain - rtt_direct:+,.0f} µs)"
                            ", +1 hop (from the replies' TTL).")
    d, c = means["stream", "throughput"]
    assert f"Through the chain, stream throughput is {100 * c / d:.1f}% of direct" in load.text


def test_figures_set_the_gateways_against_direct(built: Callable[[str], build.Report]) -> None:
    """The share-of-native figure draws direct native as the one reference and native through
    the SRv6 gateways against it."""
    rep = built(NAME)
    assert rep.figures and not [f.name for f in rep.figures if f.overlaps]
    svg = (rep.html.parent / "pct-native-stream-throughput.svg").read_text()
    assert len(re.findall(r">reference<", svg)) == 1
    assert ">native via chain<" in svg
