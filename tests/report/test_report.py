"""Reports rendered from campaigns recorded by a real `tunbench run`, opened in Chromium."""

from __future__ import annotations

import html
import io
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import paired_ref
import pyarrow.parquet as pq
import pytest
from PIL import Image

from jumbo_checks import check_jumbo
from jumbo_checks import overlap as _overlap
from jumbo_checks import values as _values
from tunbench.report import build, data, headlines
from tunbench.results.records import CaseRecord

TB = [sys.executable, "-m", "tunbench"]


def _not_blank(png: bytes) -> None:
    im = Image.open(io.BytesIO(png)).convert("RGB")
    assert im.width > 300 and im.height > 200
    colours = im.getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 50, "screenshot is (nearly) one colour"


def test_basic_report_figures_html_and_exports(built: Callable[[str], build.Report],
                                               browser: Callable) -> None:
    rep = built("basic")
    root = rep.html.parent.parent
    names = {f.name for f in rep.figures}
    # what the data holds is drawn; what it does not hold (latency, sweeps, NDR, MTUs) is not
    assert {"pct-native-stream-throughput", "series-throughput-stream-1500", "cpu-stream",
            "cores-stream-1500", "metrics-stream"} == names
    for f in rep.figures:
        assert f.png.stat().st_size > 5000 and f.svg.read_text().startswith("<?xml")
        _not_blank(f.png.read_bytes())
    page = rep.html.read_text()
    assert "Content-Security-Policy" in page and "<script" not in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "external reference in the page"
    for case in (root / "cases").glob("*.json"):
        assert f'href="../cases/{case.name}"' in page
        assert (rep.html.parent / f"../cases/{case.name}").resolve().exists()
    assert page.count("data:image/svg+xml;base64,") == len(rep.figures)
    env = json.loads((root / "index.json").read_text())["env"]
    assert env["kernel"] in page and env["tools"]["iperf3"] in page

    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    assert load.title.startswith("tunbench report")
    _not_blank(load.screenshot)
    sel = headlines.select(rep.takeaways)
    for t in sel.top:                       # the selected few are on the page as shown
        assert t.text in load.text
    for t in sel.top + sel.rest:            # every one is there, the rest folded
        assert html.escape(t.text, quote=True) in page

    # exports: one row per case x metric, identical in CSV and Parquet
    n_metrics = sum(len(json.loads(p.read_text())["metrics"])
                    for p in (root / "cases").glob("*.json"))
    lines = rep.csv.read_text().splitlines()
    assert lines[0].startswith("case_id,tunnel,kind,workload,workload_params,mtu,offloads,"
                               "repeat,metric,metric_base,dims,unit,value")
    assert len(lines) == 1 + n_metrics
    table = pq.read_table(rep.parquet)
    assert table.num_rows == n_metrics
    tput = [r for r in table.to_pylist() if r["metric"] == "throughput"
            and r["tunnel"] == "vxlan"]
    assert sorted(r["value"] for r in tput) == sorted(_values(root, "vxlan", "throughput"))


def test_takeaways_match_the_numbers(built: Callable[[str], build.Report]) -> None:
    rep = built("basic")
    root = rep.html.parent.parent
    texts = {t.topic: t.text for t in rep.takeaways}
    # the paired per-round share, as the tables, the summary and the figure show it
    pct, lo, hi = paired_ref.of(root, "vxlan", "throughput")
    assert lo is not None and hi is not None
    share = texts["share-of-native"]
    assert f"vxlan keeps {pct:.1f}% of native throughput" in share
    assert f"95% CI {lo:.1f}–{hi:.1f}%" in share
    assert "indistinguishable" not in share
    row = next(r for r in data.load(root).rows if (r.tunnel, r.metric) == ("vxlan", "throughput"))
    assert row.pct_of_native == pytest.approx(pct)
    x, _, _ = paired_ref.of(root, "vxlan", "cpu_per_gbit", scale=1.0)
    assert f"vxlan needs {x:.2f}× native's CPU" in texts["cpu-per-gbit"]


def test_mtu_campaign_draws_mtu_bars_and_jumbo_takeaway(built: Callable[[str], build.Report],
                                                        browser: Callable) -> None:
    rep = built("mtu")
    root = rep.html.parent.parent
    check_jumbo(root, rep)      # shared with the live jumbo campaign (tests/jumbo_checks.py)
    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    _not_blank(load.screenshot)


def test_compare_exit_code_on_a_real_regression(tmp_path: Path) -> None:
    """basic vs shaped (recorded with --rate 200mbit): refused as incomparable (exit 2); forced,
    the absolute view sees native and vxlan drop ~98% with non-overlapping CIs."""
    data = Path(__file__).parent.parent / "data" / "campaigns"
    a, b = data / "basic", data / "shaped"      # b was recorded with --rate 200mbit
    refused = subprocess.run(TB + ["compare", str(a), str(b)], capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 2 and "underlay rate" in refused.stderr
    r = subprocess.run(TB + ["compare", str(a), str(b), "--json", "--threshold", "5",
                             "--force"], capture_output=True, text=True, timeout=120)
    doc = json.loads(r.stdout)
    assert r.returncode == doc["exit_code"], r.stderr
    for tun in ("native", "vxlan"):
        before, after = _values(a, tun, "throughput"), _values(b, tun, "throughput")
        assert not _overlap(before, after) and statistics.fmean(after) < statistics.fmean(before)
        e = next(e for e in doc["entries"] if (e["tunnel"], e["metric"]) == (tun, "throughput"))
        assert e["absolute_verdict"] == "regressed"
        assert e["change_pct"] == __import__("pytest").approx(
            100 * (statistics.fmean(after) / statistics.fmean(before) - 1))
    # lower-is-better metric that went down is an improvement, never a regression
    cpu = next(e for e in doc["entries"] if (e["tunnel"], e["metric"]) ==
               ("native", "iperf3_cpu_client"))
    assert cpu["absolute_verdict"] == "improved"
    same = subprocess.run(TB + ["compare", str(a), str(a)], capture_output=True, text=True,
                          timeout=120)
    assert same.returncode == 0 and "no significant regression" in same.stdout


def test_jumpavg_on_per_second_series() -> None:
    from tunbench.report import compare
    data = Path(__file__).parent.parent / "data" / "campaigns"

    def series(root: Path, tun: str) -> list[float]:
        out: list[float] = []
        for p in sorted((root / "cases").glob("*.json")):
            d = json.loads(p.read_text())
            if d["case"]["tunnel"]["label"] == tun:
                out += d["series"]["throughput"]
        return out

    a, b = series(data / "basic", "vxlan"), series(data / "shaped", "vxlan")
    assert len(a) >= compare.JUMPAVG_MIN and len(b) >= compare.JUMPAVG_MIN
    assert compare.judge(a, b, True) == (True, "jumpavg", compare.REGRESSED)
    assert compare.judge(b, a, True) == (True, "jumpavg", compare.IMPROVED)
    assert compare.judge(a, a, True) == (False, "jumpavg", compare.SAME)


def test_streams_sweep_figure_and_scaling_takeaway(built: Callable[[str], build.Report]) -> None:
    """tests/data/campaigns/sweep: the stream workload at 1, 4 and 16 streams (a real run of
    tests/data/experiments/streams-sweep.toml)."""
    rep = built("sweep")
    root = rep.html.parent.parent
    assert "sweep-stream-streams-1500" in {f.name for f in rep.figures}
    by: dict[tuple[str, int], list[float]] = {}
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        by.setdefault((d["case"]["tunnel"]["label"], d["case"]["workload"]["params"]["streams"]),
                      []).append(d["metrics"]["throughput"]["value"])
    for tun in ("native", "vxlan"):
        t = next(t for t in rep.takeaways if t.topic == "scaling" and t.facts["tunnel"] == tun)
        means = {x: statistics.fmean(v) for (tt, x), v in by.items() if tt == tun}
        peak = max(means, key=means.__getitem__)
        assert t.facts["peak_x"] == peak and t.facts["last_x"] == 16
        assert f"{means[peak]:,.0f} Mbit/s" in t.text
        if peak == 16:
            assert "keeps scaling" in t.text
        elif _overlap(by[(tun, peak)], by[(tun, 16)]):
            assert "indistinguishable" in t.text
        else:
            assert "stops scaling" in t.text
    # tables never mix stream counts: one scenario per count
    page = rep.html.read_text()
    for n in (1, 4, 16):
        assert f"stream streams={n} — underlay MTU 1500" in page


def test_loss_search_report_marks_lower_bounds(built: Callable[[str], build.Report],
                                               browser: Callable) -> None:
    """tests/data/campaigns/loss: `tunbench run --tunnels native,vxlan,srv6 --workloads
    loss-search --duration 2 --repeats 1`. Searches that reached the generator's top rate (or
    stopped because the sender could not offer more) recorded their figures as lower bounds:
    the table prints them with ≥ and the take-away says what the ratio then means; dozens of
    metrics make a table with one row per metric; the case notes are listed."""
    rep = built("loss")
    root = rep.html.parent.parent
    assert "ndr-loss-search-1500" in {f.name for f in rep.figures}
    docs = {d["case"]["tunnel"]["label"]: d for d in
            (json.loads(p.read_text()) for p in (root / "cases").glob("*.json"))}
    share = next(t for t in rep.takeaways if t.topic == "share-of-native")
    metric = share.facts["metric"]
    bounded = [t for t in ("native", share.facts["best"])
               if docs[t]["metrics"][metric].get("bound") == "lower"]
    assert bounded, "the recorded native run reached the generator's top rate"
    assert share.facts["lower_bounds"] == bounded
    caveat = ("Both figures are lower bounds" if len(bounded) == 2 else
              "Native's figure is a lower bound" if bounded == ["native"] else
              f"{bounded[0]}'s figure is a lower bound")
    assert caveat in share.text
    page = rep.html.read_text()
    shown = data.load(root).display(metric)   # named from its record: 'NDR, IMIX'
    assert shown == "NDR, IMIX" or "_" not in shown
    assert (f'<td class=l title="{metric}">{html.escape(shown)} ↑'
            "</td>") in page   # one row per metric
    for tun, d in docs.items():
        for name, m in d["metrics"].items():
            if m.get("bound") == "lower":
                assert name.split("_")[0] in ("rfc2544", "ndr", "pdr")
                assert f"≥{m['value']:,.0f} (n=1)" in page, (tun, name)
    # case notes: how loss was counted (grouped over the tunnels counted alike), lower bounds,
    # and SRv6's search that found no rate for IMIX with the sizes it lost
    notes = data.case_notes(CaseRecord.from_doc(d) for d in docs.values())
    where = {note: tuns for _, note, tuns in notes if note.startswith("loss counted")}
    assert sorted(sum(where.values(), [])) == sorted(docs), where
    assert any(tuns == ["native", "vxlan"] and "tunnel device" in note
               for note, tuns in where.items()), where
    assert any(tuns == ["srv6"] and "UDP sockets" in note for note, tuns in where.items())
    lost = [note for _, note, tuns in notes if tuns == ["srv6"] and "no passing rate" in note]
    assert lost and "100.0% of the 1500 B packets" in lost[0], notes
    for _, note, _ in notes:
        assert html.escape(note) in page
    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    shown = headlines.select(rep.takeaways)
    on_page = [t for t in shown.top + shown.rest if t.topic == share.topic
               and t.facts == share.facts]     # as shown: the single-run caveat said once
    assert on_page and html.escape(on_page[0].text, quote=True) in page
    assert shown.caveats and shown.caveats[0] in load.text
    assert "Notes on cases" in load.text
    _not_blank(load.screenshot)


def test_a_sweep_gets_one_sentence_per_topic(built: Callable[[str], build.Report]) -> None:
    """Share of native and CPU per Gbit/s over 1, 4 and 16 streams: one sentence each for the
    whole sweep (not one per stream count), with every count's winner and every tunnel's
    range of CPU multiples taken from the recorded numbers."""
    rep = built("sweep")
    root = rep.html.parent.parent
    share = [t for t in rep.takeaways if t.topic == "share-of-native"]
    cpu = [t for t in rep.takeaways if t.topic == "cpu-per-gbit"]
    assert len(share) == 1 and len(cpu) == 1
    assert share[0].facts["sweep"] == "streams" and set(share[0].facts["by_value"]) == {1, 4, 16}
    for n in (1, 4, 16):   # vxlan is the only tunnel: it is each count's best
        pct, _, _ = paired_ref.of(root, "vxlan", "throughput", streams=n)
        assert f"{n}: vxlan {pct:.1f}%" in share[0].text
    ratios = [paired_ref.of(root, "vxlan", "cpu_per_gbit", streams=n, scale=1.0)[0]
              for n in (1, 4, 16)]
    assert f"vxlan {min(ratios):.2f}-{max(ratios):.2f}×" in cpu[0].text
    # two repeats per count: the merged sentences do not claim single runs
    assert not any("One run each" in t.text for t in share + cpu)
    page = rep.html.read_text()
    assert all(html.escape(t.text, quote=True) in page for t in share + cpu)


def test_single_runs_are_never_called_indistinguishable(campaign: Callable[[str], Path]) -> None:
    """The sweep campaign cut to its first repeat: a tunnel that does not peak at the last
    stream count is described with its numbers and 'significance not tested', never as
    indistinguishable (one run has no confidence interval)."""
    root = campaign("sweep")
    for p in (root / "cases").glob("*.json"):
        if json.loads(p.read_text())["case"]["repeat"] != 1:
            p.unlink()
    rep = build.build(root)
    scaling = [t for t in rep.takeaways if t.topic == "scaling"]
    assert scaling
    for t in scaling:
        assert "indistinguishable" not in t.text
        if t.facts["peak_x"] != t.facts["last_x"]:
            assert t.facts["stops"] is None and "significance not tested" in t.text
            assert f"{100 * t.facts['last'] / t.facts['peak']:.0f}% of its peak" in t.text
