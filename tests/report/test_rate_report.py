"""The underlay-rate report on a campaign recorded by a real `tunbench run --rates
100mbit,1gbit --tunnels native,vxlan --workloads stream --duration 2 --warmup 0 --repeats 2`
on this host's namespaces (tests/data/campaigns/rate; tbf is in this kernel): each case's tbf
rate as the case recorded it, the table's means and shares of native computed here again
from the case files, the figure, the page in Chromium, and the decision summary reading one
rate."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tunbench.report import axes, build, data

NAME = "rate"
RATES = ("100mbit", "1gbit")


def _docs(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]


def _values(root: Path) -> dict[tuple[str, str, int], float]:
    return {(d["case"]["tunnel"]["kind"], d["case"]["rate"], d["case"]["repeat"]):
            d["metrics"]["throughput"]["value"] for d in _docs(root)}


def test_each_case_ran_on_its_rate(built: Callable[[str], build.Report]) -> None:
    root = built(NAME).html.parent.parent
    docs = _docs(root)
    assert len(docs) == 2 * 2 * 2 and all(d["status"] == "ok" for d in docs)
    index = json.loads((root / "index.json").read_text())
    assert index["experiment"]["rate"] == list(RATES)
    kinds = [c["kind"] for c in index["cases"]]
    assert kinds[::2] == ["native"] * 4 and kinds[1::2] == ["vxlan"] * 4   # native first
    for d in docs:
        assert d["testbed"]["rate"] == d["case"]["rate"] in RATES, d["testbed"]
        assert d["case"]["id"].endswith(f"-rate{d['case']['rate']}-r{d['case']['repeat']}")


def test_table_is_the_case_files_means_and_paired_shares(
        built: Callable[[str], build.Report]) -> None:
    rep = built(NAME)
    root = rep.html.parent.parent
    val = _values(root)
    (s,) = axes.rate_alongs(data.load(root))
    assert s.values == list(RATES) and [m.tunnel for m in s.methods] == ["native", "vxlan"]
    page = rep.html.read_text()
    assert "<h2 id=rate>Underlay rate</h2>" in page
    vx = s.methods[1]
    for rate in RATES:
        for m in s.methods:
            want = statistics.fmean(val[(m.tunnel, rate, r)] for r in (1, 2))
            got = m.mean(rate)
            assert got is not None and math.isclose(got, want, rel_tol=1e-12)
        ratios = [val[("vxlan", rate, r)] / val[("native", rate, r)] for r in (1, 2)]
        gm = math.exp(statistics.fmean(math.log(x) for x in ratios))
        sh = s.share(vx, rate)
        assert sh is not None and math.isclose(sh[0], gm, rel_tol=1e-12)
        assert f"{100 * gm:.1f}% ({100 * min(ratios):.1f}-{100 * max(ratios):.1f}; n=2)" \
            in page


def test_figure_and_the_page(built: Callable[[str], build.Report], browser: Callable) -> None:
    rep = built(NAME)
    (fig,) = [f for f in rep.figures if f.name.startswith("rate-")]
    assert fig.name == "rate-stream-1500" and fig.png.stat().st_size > 0 and not fig.overlaps
    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    assert "Underlay rate" in load.text and "against rate" in load.text


def test_advise_reads_the_highest_rate(campaign: Callable[[str], Path]) -> None:
    """The decision summary does not pool a method's figures over the rates: it reads
    1gbit, says so, and its share is vxlan's paired share there."""
    root = campaign(NAME)
    val = _values(root)
    ratios = [val[("vxlan", "1gbit", r)] / val[("native", "1gbit", r)] for r in (1, 2)]
    want = 100 * math.exp(statistics.fmean(math.log(x) for x in ratios))
    r = subprocess.run([sys.executable, "-m", "tunbench", "advise", str(root)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert ("note: figures at rate=1gbit; measured: 100mbit, 1gbit (the report's \"Underlay "
            "rate\" has each)") in lines, lines
    assert any(line.startswith(f"  1. vxlan: {want:.1f}% (n=2") for line in lines), lines


def test_rate_axis_reads_as_the_user_spelled_it(built: Callable[[str], build.Report],
                                                campaign: Callable[[str], Path]) -> None:
    """The rate axis in the report's environment and in compare's refusal is the rates as
    given to --rates, comma-separated like the RTT and loss axes and the MTUs, never
    Python's list text (['100mbit', '1gbit'])."""
    page = built(NAME).html.read_text()
    assert ("<th class=l>underlay MTUs</th><td class=l>1500</td></tr>"
            "<tr><th class=l>rate (tbf shaping)</th><td class=l>100mbit, 1gbit</td>") in page
    assert "&#x27;100mbit" not in page
    other = campaign("rtt-loss")   # recorded on the RTT and loss axes, unshaped
    r = subprocess.run([sys.executable, "-m", "tunbench", "compare", str(campaign(NAME)),
                        str(other)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r
    (line,) = r.stderr.strip().splitlines()
    for want in ("RTT axis: A none, B 0ms, 10ms, 40ms",
                 "underlay rate: A 100mbit, 1gbit, B none",
                 "underlay loss: A none, B 0%, 1%"):
        assert want in line, line
    assert "[" not in line and "'" not in line, line
