"""The mesh report on a mesh campaign recorded by a real `tunbench run --testbed mesh --sites
3 --tunnels native,vxlan --workloads stream --duration 2 --repeats 2` (tests/data/campaigns/
mesh): one 3 x 3 grid whose cells are each pair's share of its own native, computed here again
from the case files; the worst pair named; each cell linked to its four cases; the heat map
written; the grid shown in Chromium; `advise` per pair and for every pair."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import paired_ref

import cli_inproc
from tunbench.report import advise, build, data, mesh

PAIRS = [("s1", "s2"), ("s1", "s3"), ("s2", "s3")]


def _docs(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / "cases").glob("*.json"))]


def _shares(root: Path) -> dict[tuple[str, str], float]:
    """Each pair's share of native from the case files: per round vxlan / native of the same
    pair, then the geometric mean of the rounds."""
    val: dict[tuple[str, str, int, str], float] = {}
    for d in _docs(root):
        a, b = d["mesh"]["pair"]
        val[(a, b, d["case"]["repeat"], d["case"]["tunnel"]["kind"])] = \
            paired_ref.paired(d, "throughput")
    out = {}
    for a, b in PAIRS:
        logs = [math.log(val[(a, b, r, "vxlan")] / val[(a, b, r, "native")]) for r in (1, 2)]
        out[(a, b)] = 100 * math.exp(sum(logs) / len(logs))
    return out


def test_the_grid_is_each_pairs_share_of_its_own_native(
        built: Callable[[str], build.Report], browser: Callable) -> None:
    rep = built("mesh")
    root = rep.html.parent.parent
    docs = _docs(root)
    assert len(docs) == 12 and all(d["status"] == "ok" for d in docs)
    (g,) = mesh.grids(data.load(root))
    assert (g.tunnel, g.workload, g.mtu, g.metric) == ("vxlan", "stream", 1500, "throughput")
    assert g.sites == ["s1", "s2", "s3"] and set(g.cells) == set(PAIRS)
    want = _shares(root)
    for p, cell in g.cells.items():
        assert cell.rounds == 2 and not cell.failed
        assert cell.share is not None and math.isclose(cell.share, want[p], rel_tol=1e-9)
        assert len(cell.cases) == 4                     # vxlan and native of both rounds
    worst = min(want, key=lambda p: want[p])
    assert g.worst is not None and g.worst[0] == worst

    page = rep.html.read_text()
    assert "<h2 id=mesh>Mesh: every pair</h2>" in page
    assert f"worst pair {worst[0]} -&gt; {worst[1]}: {want[worst]:.1f}% of native" in page
    for (a, b), cell in g.cells.items():
        assert f"data-pair='{a}-{b}'><b>{want[(a, b)]:.1f}%</b>" in page
        for _, path in cell.cases:
            assert f'href="../{path}"' in page and (root / path).exists()
    fig = next(f for f in rep.figures if f.name == "mesh-vxlan-stream-1500")
    assert fig.png.stat().st_size > 0 and "worst pair" in fig.caption

    load = browser(rep.html, probe="Array.from(document.querySelectorAll("
                                   "'table.meshgrid td.meshcell')).map(td => [td.dataset.pair,"
                                   " getComputedStyle(td).backgroundColor])")
    assert load.console_errors == [] and load.requests == []
    shown = dict(load.probe)
    assert set(shown) == {f"{a}-{b}" for a, b in PAIRS}
    assert all(c.startswith("rgb(") for c in shown.values())   # the colour scale is drawn


def test_advise_ranks_per_pair_and_for_every_pair(campaign: Callable[[str], Path]) -> None:
    root = campaign("mesh")
    want = _shares(root)
    pa = mesh.advise_pairs(data.load(root))
    assert pa is not None and set(pa.per_pair) == set(PAIRS)
    for p, adv in pa.per_pair.items():
        ((rank, m, fig),) = adv.ranked
        assert m.label == "vxlan" and math.isclose(fig.est.mean, want[p], rel_tol=1e-6)
    worst = min(want, key=lambda p: want[p])
    ((label, share, pair),) = pa.every
    assert label == "vxlan" and pair == worst and math.isclose(share or 0, want[worst],
                                                                rel_tol=1e-6)
    # a constraint no pair meets: nothing for every pair, vxlan named on each
    enc = mesh.advise_pairs(data.load(root), advise.Constraints(need_encryption=True))
    assert enc is not None and enc.every == [] and list(enc.not_every) == ["vxlan"]
    assert sorted(enc.not_every["vxlan"]) == PAIRS
    r = cli_inproc.tunbench("advise", root)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "per pair (each against its own native):" in lines
    for a, b in PAIRS:
        assert f"  {a}->{b}: 1. vxlan {want[(a, b)]:.1f}%" in lines
    assert (f"for every pair: vxlan (worst {worst[0]}->{worst[1]}: {want[worst]:.1f}%)"
            in lines)
    r = cli_inproc.tunbench("advise", root, "--json")
    doc = json.loads(r.stdout)["mesh"]
    assert set(doc["per_pair"]) == {f"{a}-{b}" for a, b in PAIRS}
    assert doc["every_pair"][0]["worst_pair"] == list(worst)


def test_a_failed_pair_is_marked_and_the_others_keep_their_share(
        campaign: Callable[[str], Path]) -> None:
    """One pair's vxlan cases failed (as a tunnel that does not come up records them): its
    cell says failed and links the failed cases, the other pairs keep their shares, the worst
    pair is named among those measured, and advise leaves it out of 'for every pair'."""
    root = campaign("mesh")
    want = _shares(root)
    for p in (root / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        if d["mesh"]["pair"] == ["s1", "s3"] and d["case"]["tunnel"]["kind"] == "vxlan":
            d.update(status="failed", error="tunnel is up but 10.0.0.2 does not answer ping",
                     metrics={})
            p.write_text(json.dumps(d))
    (g,) = mesh.grids(data.load(root))
    bad = g.cells[("s1", "s3")]
    assert bad.share is None and len(bad.failed) == 2
    assert {round(g.cells[p].share or 0, 6) for p in [("s1", "s2"), ("s2", "s3")]} == {
        round(want[p], 6) for p in [("s1", "s2"), ("s2", "s3")]}
    assert g.worst is not None and g.worst[0] != ("s1", "s3")
    page = build.build(root).html.read_text()
    cell = page.split("title='failed: ")[1].split("</td>")[0]
    assert cell.count("href=") == 2 and "vxlan r1" in cell and "vxlan r2" in cell
    pa = mesh.advise_pairs(data.load(root))
    assert pa is not None and pa.every == [] and pa.not_every == {"vxlan": [("s1", "s3")]}
