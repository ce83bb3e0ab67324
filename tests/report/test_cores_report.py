"""The site-size report on a campaign recorded by a real `tunbench run` of native, wireguard
(impl go) and vxlan, stream, `cpus_per_site = [1, 2]`, 2 rounds of 2 s, on this host's
namespaces (tests/data/campaigns/cores; 2 CPUs, so the campaign's one layout is shared: at 1
core both sites on CPU 0, at 2 both on 0-1): each case's confinement and layout as it recorded
it, the section's sentence saying which layout and why, the "Site size in cores" table's
means, CPU per Gbit/s and paired 1-core shares computed here again from the case files, the
figure of throughput and CPU per Gbit/s against cores per method, and the page in Chromium."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path

import paired_ref

from tunbench.report import build, data, sitesize
from tunbench.results import records

NAME = "cores"
METHODS = ("native", "wireguard (go)", "vxlan")
CORES = (1, 2)


def _docs(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]


def _method(d: dict) -> str:
    """The method as the report names it ('wireguard (go)')."""
    return str(records.identity(d["case"]["tunnel"])["display"])


def test_each_case_ran_confined_to_its_count(built: Callable[[str], build.Report]) -> None:
    root = built(NAME).html.parent.parent
    docs = _docs(root)
    assert len(docs) == 3 * 2 * 2 and all(d["status"] == "ok" for d in docs)
    assert json.loads((root / "index.json").read_text())["experiment"]["cpus_per_site"] \
        == list(CORES)
    # rounds outer, then the count, native first at each
    assert [(d["case"]["repeat"], d["case"]["cpus_per_site"], _method(d)) for d in docs] \
        == [(r, k, m) for r in (1, 2) for k in CORES for m in METHODS]
    for d in docs:
        k, rec = d["case"]["cpus_per_site"], d["testbed"]["cores"]
        assert d["testbed"]["cpus_per_site"] == rec["cpus_per_site"] == k
        assert rec["cpus"] == ({"a": "0", "b": "0"} if k == 1 else {"a": "0-1", "b": "0-1"})
        # one layout for the campaign: 2 x 2 cores per site do not fit in 2 CPUs
        assert rec["layout"] == "shared" and rec["apart"] is False and rec["axis"] == [1, 2]
        assert rec["layout_reason"].startswith("2 x 2 cores per site do not fit in the 2 CPUs")
        assert d["case"]["id"].endswith(f"-cpu{k}-r{d['case']['repeat']}")


def test_section_is_the_case_files_means_and_paired_shares(
        built: Callable[[str], build.Report]) -> None:
    rep = built(NAME)
    root = rep.html.parent.parent
    docs = _docs(root)
    (s,) = sitesize.scalings(data.load(root))
    assert (s.workload, s.metric, s.cores) == ("stream", "throughput", list(CORES))
    assert [m.tunnel for m in s.methods] == list(METHODS)
    page = rep.html.read_text()
    assert "<h2 id=site-size>Site size in cores</h2>" in page
    assert s.layout == "shared"
    reason = docs[0]["testbed"]["cores"]["layout_reason"]
    assert f"<p class=layout>Layout: shared ({reason}).</p>" in page
    for m in s.methods:
        mine = [d for d in docs if _method(d) == m.tunnel]
        row = [m.tunnel]
        for metric, got, fmt in (("throughput", m.head, "{:,.0f}"),
                                 ("cpu_per_gbit", m.cpu, "{:,.1f}")):
            for k in CORES:
                want = statistics.fmean(d["metrics"][metric]["value"] for d in mine
                                        if d["case"]["cpus_per_site"] == k)
                assert math.isclose(statistics.fmean(got[k]), want, rel_tol=1e-12)
                row.append(fmt.format(want))
        by = {(d["case"]["repeat"], d["case"]["cpus_per_site"]): paired_ref.paired(
            d, "throughput") for d in mine}
        ratios = [by[(r, 1)] / by[(r, 2)] for r in (1, 2)]
        gm = math.exp(statistics.fmean(math.log(x) for x in ratios))
        sh = m.share(1, 2)
        assert sh is not None and math.isclose(sh[0], gm, rel_tol=1e-12) and sh[3] == 2
        row.append(f"{100 * gm:.1f}% ({100 * min(ratios):.1f}-{100 * max(ratios):.1f}; n=2)")
        assert "<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" in page, row


def test_figure_draws_throughput_and_cpu_per_gbit_against_cores(
        built: Callable[[str], build.Report], browser: Callable) -> None:
    rep = built(NAME)
    (fig,) = [f for f in rep.figures if f.name.startswith("sweep-")]
    assert fig.name == "sweep-stream-cpus_per_site-1500" and not fig.overlaps
    assert fig.png.stat().st_size > 0 and "Site size in cores" in fig.caption
    svg = fig.svg.read_text()
    texts = set(re.findall(r">([^<>]{1,60})</text>", svg))
    assert {"cores per site", "Throughput", "CPU per Gbit/s", *METHODS} <= texts, texts
    load = browser(rep.html)
    assert load.console_errors == [] and load.requests == []
    assert "Site size in cores" in load.text and fig.title in load.text
