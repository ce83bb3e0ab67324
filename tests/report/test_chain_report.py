"""The chain section of a report, from a campaign recorded by a real `tunbench run` through
router -> firewall(1000 rules) -> WAN(tbf 200 Mbit/s) -> router (tests/data/campaigns/chain):
the path with each hop's namespace, the per-hop drop table pointing at the WAN for the
loss searches, the routers the TTL counted; in the console too. A campaign without a chain
shows none of it."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from tunbench.report import build, hops
from tunbench.results import reader
from tunbench.results.records import CaseRecord

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"


def _cases(name: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((CAMPAIGNS / name / "cases").glob("*.json"))]


def _records(name: str) -> list[CaseRecord]:
    return reader.read_records(CAMPAIGNS / name).cases


def test_chain_section_in_the_html_report(built: Callable[[str], build.Report],
                                          browser: Callable) -> None:
    rep = built("chain")
    page = rep.html.read_text()
    assert "<h2 id=chain>Chain: per-hop figures</h2>" in page
    cases = _cases("chain")
    netns = cases[0]["chain"]["hops"][1]["netns"]
    assert f"fw (firewall, netns {netns})" in page
    for d in cases:
        ch = d["chain"]
        wan = [r for r in ch["drops"] if r["place"] == "wan"][0]
        if d["case"]["workload"]["name"] == "loss-search":
            # the searches overload the WAN: its tbf's drops, and it is named as the bottleneck
            assert ch["bottleneck"] == "wan" and wan["qdisc_drops"] > 0
            assert f"{wan['qdisc_drops']:,} (qdisc {wan['qdisc_drops']:,})" in page
        assert ch["probe"]["routers"] == 4 == ch["probe"]["expected_routers"]
    load = browser(rep.html)
    assert not load.console_errors and not load.requests
    assert "loss starts at" in load.text


def test_chain_table_in_the_console() -> None:
    buf = io.StringIO()
    hops.print_table(Console(file=buf, width=200), _records("chain"))
    out = buf.getvalue()
    assert "per-hop drops - a -> router1 -> fw -> wan -> router4 -> b" in out
    lines = [line for line in out.splitlines() if "loss-search" in line]
    assert len(lines) == 2 and all(line.rstrip(" │").endswith("wan") for line in lines), out


def test_no_chain_no_section() -> None:
    cases = _records("basic")
    assert hops.section_html(cases) == ""
    buf = io.StringIO()
    hops.print_table(Console(file=buf), cases)
    assert buf.getvalue() == ""


def test_sdwan_report_draws_the_chain_and_sets_it_against_direct(
        built: Callable[[str], build.Report], browser: Callable) -> None:
    """The sdwan preset's campaign (--scale 0.01, tests/data/campaigns/sdwan): the chain
    diagram with each hop's namespace and the gateways' tunnel, chain vs direct, and the
    take-away naming the hop where loss starts, in a page that renders offline."""
    rep = built("sdwan")
    page = rep.html.read_text()
    assert "<h2 id=chain-diagram>Chain</h2>" in page
    cases = _cases("sdwan")
    gwa = next(h for h in next(d for d in cases if "chain" in d)["chain"]["hops"]
               if h["name"] == "gwa")
    assert f"<td class=l>{gwa['netns']}</td>" in page
    assert "ipsec (libipsec) tunnel to gwb, encrypts; inner MTU 1400 over WAN MTU 1500" in page
    assert "Through the chain vs direct" in page and "chain % of direct" in page
    # its rows name each metric as the rest of the report does, not by its key
    # (rfc2544_pps_imix, throughput); the loss search's direct figure is a lower bound
    for wl, name in (("loss-search", "RFC 2544 rate, IMIX (packets/s)</td><td>≥"),
                     ("loss-search", "RFC 2544 rate, 361 B (packets/s)</td><td>≥"),
                     ("stream", "Throughput (Mbit/s)</td><td>4,586</td>")):
        assert f"<tr><td class=l>{wl}</td><td class=l>{name}" in page, name
    assert "<td class=l>rfc2544_pps_" not in page and "<td class=l>throughput (" not in page
    load = browser(rep.html)
    assert not load.console_errors and not load.requests
    assert "Loss starts at gwb (gateway, ipsec (libipsec))" in load.text
    assert "1.9%" in load.text   # stream through the chain: 86.7 of 4,586 Mbit/s direct


def test_native_through_the_chain_is_measured_against_direct_not_drawn_as_the_reference(
        built: Callable[[str], build.Report]) -> None:
    """Native through the chain is a measurement against native direct (stats.is_reference):
    the share-of-native figure draws one hatched reference bar (direct), and the tables mark
    only direct's row as native. Found in Chromium on a live srv6-gateways run, where the
    figure drew 'native via chain' as a second 100 % reference while the table said 2.14x."""
    import re
    rep = built("sdwan")   # read only: the report the sdwan test above reads
    svg = (rep.html.parent / "pct-native-stream-throughput.svg").read_text()
    assert len(re.findall(r">reference<", svg)) == 1, re.findall(r">[^<]{1,40}<", svg)
    page = rep.html.read_text()
    assert page.count('<tr class=native><td class="l t">native</td>') >= 1
    assert '<tr class=native><td class="l t">native via chain</td>' not in page
