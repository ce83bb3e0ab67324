"""The distance-and-loss report on a campaign recorded by a real `tunbench run --rtts
0ms,10ms,40ms --losses 0%,1% --tunnels native,vxlan --workloads stream --duration 2 --warmup 0
--repeats 2` inside the VM lab guest (tests/data/campaigns/rtt-loss, written by
scripts/record_vmlab_campaign.py: the host kernel has no netem; TCG figures, so they show the
report's shape on real data, not the methods'): each scenario's netem as the case recorded
it, the tables' means and shares of native computed here again from the case files, the
Mathis row, both figures, the page in Chromium, and the decision summary reading one scenario."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import cli_inproc
from tunbench.report import build, data, distance

NAME = "rtt-loss"
RTTS, LOSSES = ("0ms", "10ms", "40ms"), ("0%", "1%")


def _docs(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]


def _values(root: Path) -> dict[tuple[str, str, str, int], float]:
    return {(d["case"]["tunnel"]["kind"], d["case"]["rtt"], d["case"]["loss"],
             d["case"]["repeat"]): d["metrics"]["throughput"]["value"] for d in _docs(root)}


def test_each_case_ran_on_its_scenarios_netem(built: Callable[[str], build.Report]) -> None:
    root = built(NAME).html.parent.parent
    docs = _docs(root)
    assert len(docs) == 2 * 3 * 2 * 2 and all(d["status"] == "ok" for d in docs)
    index = json.loads((root / "index.json").read_text())
    assert index["experiment"]["rtt"] == list(RTTS)
    assert index["experiment"]["loss"] == list(LOSSES)
    kinds = [c["kind"] for c in index["cases"]]
    assert kinds[::2] == ["native"] * 12 and kinds[1::2] == ["vxlan"] * 12   # native first
    for d in docs:
        rtt, loss = d["case"]["rtt"], d["case"]["loss"]
        netem = d["testbed"].get("netem") or {}
        half = {"0ms": None, "10ms": "5ms", "40ms": "20ms"}[rtt]
        assert netem.get("delay") == half and netem.get("loss") == (None if loss == "0%"
                                                                     else loss), d["testbed"]


def test_tables_are_the_case_files_means_and_paired_shares(
        built: Callable[[str], build.Report]) -> None:
    rep = built(NAME)
    root = rep.html.parent.parent
    val = _values(root)
    (s,) = distance.sweeps(data.load(root))
    assert (s.rtts, s.losses) == (list(RTTS), list(LOSSES))
    page = rep.html.read_text()
    assert "<h2 id=distance>Distance and loss</h2>" in page
    vx = next(m for m in s.methods if m.tunnel == "vxlan")
    for rtt in RTTS:
        for loss in LOSSES:
            for kind in ("native", "vxlan"):
                m = next(x for x in s.methods if x.tunnel == kind)
                want = statistics.fmean(val[(kind, rtt, loss, r)] for r in (1, 2))
                got = m.mean((rtt, loss))
                assert got is not None and math.isclose(got, want, rel_tol=1e-12)
            ratios = [val[("vxlan", rtt, loss, r)] / val[("native", rtt, loss, r)]
                      for r in (1, 2)]
            gm = math.exp(statistics.fmean(math.log(x) for x in ratios))
            sh = s.share(vx, (rtt, loss))
            assert sh is not None and math.isclose(sh[0], gm, rel_tol=1e-12)
            assert f"{100 * gm:.1f}% ({100 * min(ratios):.1f}-{100 * max(ratios):.1f}; n=2)" \
                in page
    titles = [t for t, _ in distance.tables(s)]
    assert titles == ["against RTT, loss 0%", "against RTT, loss 1%", "against loss, RTT 0ms",
                      "against loss, RTT 10ms", "against loss, RTT 40ms"]


def test_mathis_row_where_loss_and_rtt_are_above_zero(
        built: Callable[[str], build.Report]) -> None:
    root = built(NAME).html.parent.parent
    (s,) = distance.sweeps(data.load(root))
    assert s.methods[0].tunnel == "native" and s.methods[0].mss == 1500 - 52
    tables = dict(distance.tables(s))
    # against RTT at 1 %: none at 0 ms, MSS/RTT x sqrt(3/2)/sqrt(0.01) at 10 and 40 ms
    row = tables["against RTT, loss 1%"][-1]
    want = [8 * 1448 / (ms / 1000) * math.sqrt(1.5) / math.sqrt(0.01) / 1e6 for ms in (10, 40)]
    assert row[0].startswith("Mathis model") and row[1] == "-"
    assert [float(v) for v in row[2:4]] == [round(w, 1) for w in want], row
    assert not tables["against RTT, loss 0%"][-1][0].startswith("Mathis")
    assert not tables["against loss, RTT 0ms"][-1][0].startswith("Mathis")


def test_figures_and_the_page(built: Callable[[str], build.Report], browser: Callable) -> None:
    rep = built(NAME)
    figs = {f.name: f for f in rep.figures if f.name.startswith("distance-")}
    assert set(figs) == {"distance-stream-RTT-1500", "distance-stream-loss-1500"}
    for f in figs.values():
        assert f.png.stat().st_size > 0 and "Mathis model" in f.caption and not f.overlaps
    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    assert "Distance and loss" in load.text and "Mathis model" in load.text


def test_advise_reads_the_scenario_of_the_lowest_rtt_and_loss(
        campaign: Callable[[str], Path]) -> None:
    """The decision summary does not pool a method's figures over RTT and loss: it reads
    0 ms / 0 %, says so, and its share is vxlan's paired share there."""
    root = campaign(NAME)
    val = _values(root)
    ratios = [val[("vxlan", "0ms", "0%", r)] / val[("native", "0ms", "0%", r)] for r in (1, 2)]
    want = 100 * math.exp(statistics.fmean(math.log(x) for x in ratios))
    r = cli_inproc.tunbench("advise", root)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert ("note: figures at rtt=0ms loss=0%; measured 6 RTT/loss scenarios (the report's "
            "\"Distance and loss\" has each)") in lines, lines
    assert any(line.startswith(f"  1. vxlan: {want:.1f}% (n=2") for line in lines), lines
