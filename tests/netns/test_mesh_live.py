"""`tunbench run --testbed mesh --sites 3` end to end with real traffic: native and vxlan,
stream 1 s (these tests check correctness, not figures), between every pair of three site
namespaces on one underlay bridge. Every pair is measured once with its pair recorded, each
case built the bridge and its pair's two sites only, the cases ran one after another (no two
overlap in their recorded start and end), the report carries the N x N grid with its worst
pair and links to each cell's cases, and nothing with the project's prefix is left:
namespaces, links in the root namespace, state folders.

And six sites (`--sites 6`, pairs = all: 15 pairs in 5 colours, 30 cases): every pair once
per kind in the schedule's order, no two cases overlapping, a 6 x 6 grid in the
report (vxlan's share of native per pair), nothing left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tunbench import proc, runner
from tunbench import spec as exp_spec
from tunbench.capabilities import root_missing
from tunbench.plan import Case
from tunbench.progress import PhaseEvent
from tunbench.report import build
from tunbench.runner import SilentReporter, run_campaign
from tunbench.testbed import names, netlink
from tunbench.testbed.ledger import STATE_DIR

pytestmark = pytest.mark.correctness

TB = [sys.executable, "-m", "tunbench"]
PAIRS = [["s1", "s2"], ["s1", "s3"], ["s2", "s3"]]
# the failed-pair test: how long a case waits for the ping through its tunnel (runner.
# wait_reachable) in the pair that is cut (no reply ever comes) and in the healthy pairs
CUT_PING_S = 4.0
HEALTHY_PING_S = 10.0


def ours() -> tuple[set[str], set[str]]:
    return ({n for n in netlink.list_netns() if names.is_ours_netns(n)},
            {n for n in netlink.link_names(None) if names.is_ours_link(n)})


def run_mesh(out: Path, sites: int, timeout: int
             ) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """`tunbench run --testbed mesh --sites N`, native and vxlan, stream 1 s, one round: the
    finished process (exit 0 asserted) and its case documents in file order."""
    r = subprocess.run(TB + ["run", "--testbed", "mesh", "--sites", str(sites), "--tunnels",
                             "native,vxlan", "--workloads", "stream", "--duration", "1",
                             "--warmup", "0", "--repeats", "1", "--out", str(out),
                             "--db", "off"],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r, [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]


@pytest.mark.skipif(root_missing() is not None, reason="needs root")
def test_a_three_site_mesh_measures_every_pair_once_in_turn(
        tmp_path: Path, root_unchanged: None) -> None:
    before = ours()
    out = tmp_path / "mesh"
    _, docs = run_mesh(out, 3, timeout=600)
    assert len(docs) == 6
    for d in docs:
        assert d["status"] == "ok", (d["case"]["id"], d["error"])
        assert d["case"]["pair"] == d["mesh"]["pair"] == d["testbed"]["mesh"]["pair"]
        assert d["mesh"]["parallel"] is False and d["testbed"]["kind"] == "local-mesh"
        # the case built its pair's two sites only (as a and b), each at its place in the mesh
        a, b = d["mesh"]["pair"]
        site_ns = d["testbed"]["mesh"]["site_netns"]
        assert set(site_ns) == {a, b}
        assert site_ns[a].endswith(f"-{a}") and site_ns[b].endswith(f"-{b}")
        assert d["testbed"]["sites"]["a"]["underlay4"] == f"198.18.0.{a[1:]}"
        assert d["testbed"]["sites"]["b"]["underlay4"] == f"198.18.0.{b[1:]}"
        assert d["testbed"]["sites"]["a"]["netns"] == site_ns[a]
        assert d["testbed"]["sites"]["b"]["netns"] == site_ns[b]
        assert d["raw"]["iperf3"]["bytes_received"] > 0   # traffic crossed the pair
    # every pair measured exactly once per kind, native and vxlan of a pair together
    for kind in ("native", "vxlan"):
        got = sorted(d["mesh"]["pair"] for d in docs if d["case"]["tunnel"]["kind"] == kind)
        assert got == PAIRS, kind
    assert [d["case"]["tunnel"]["kind"] for d in docs] == ["native", "vxlan"] * 3
    assert all(docs[i]["mesh"]["pair"] == docs[i + 1]["mesh"]["pair"] for i in (0, 2, 4))
    # one after another: each case ended before the next one started
    spans = sorted((d["started"], d["ended"]) for d in docs)
    assert all(s < e for s, e in spans)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False)), spans
    # the schedule the dry run prints is the order the cases ran in
    index = json.loads((out / "index.json").read_text())
    assert [c["pair"] for c in index["cases"]] == [d["mesh"]["pair"] for d in docs]
    # the report: the grid, its worst pair, links from cells to the cases
    rep = (out / "report" / "index.html").read_text()
    assert "<h2 id=mesh>Mesh: every pair</h2>" in rep
    assert "<table class=meshgrid>" in rep and "worst pair s" in rep
    for d in docs:
        if d["case"]["tunnel"]["kind"] == "vxlan":
            a, b = d["mesh"]["pair"]
            assert f"data-pair='{a}-{b}'" in rep
            assert f'href="../cases/{d["case"]["id"]}.json"' in rep
    assert (out / "report" / "mesh-vxlan-stream-1500.svg").exists()
    # nothing left: namespaces and root links of this project, state folders
    assert ours() == before
    for d in docs:
        rid = d["case"]["run_id"]
        assert not (STATE_DIR / rid).exists() and not (STATE_DIR / f"{rid}.jsonl").exists()


def grid_rows(page: str, tunnel: str) -> list[list[str]]:
    """The cells (their class) of each row of one mesh grid of the report, by its tunnel."""
    part = page.split(f"<h3 id='mesh-{tunnel}-stream-1500'>")[1]
    table = part.split("<table class=meshgrid>")[1].split("</table>")[0]
    head, *rows = table.split("<tr>")[1:]
    assert head.count("<th>") == len(rows)   # a column per site (after "from \\ to")
    return [[td.split(">")[0].split()[0].strip("'").removeprefix("class=").strip("'")
             for td in row.split("<td ")[1:]] for row in rows]


@pytest.mark.skipif(root_missing() is not None, reason="needs root")
def test_a_six_site_mesh_measures_its_15_pairs_in_5_colours(
        tmp_path: Path, root_unchanged: None) -> None:
    before = ours()
    out = tmp_path / "mesh6"
    _, docs = run_mesh(out, 6, timeout=900)
    assert len(docs) == 30
    sites = [f"s{i}" for i in range(1, 7)]
    every = sorted([a, b] for i, a in enumerate(sites) for b in sites[i + 1:])
    for d in docs:
        assert d["status"] == "ok", (d["case"]["id"], d["error"])
        a, b = d["mesh"]["pair"]
        assert set(d["testbed"]["mesh"]["site_netns"]) == {a, b}
        assert d["raw"]["iperf3"]["bytes_received"] > 0
    for kind in ("native", "vxlan"):
        assert sorted(d["mesh"]["pair"] for d in docs
                      if d["case"]["tunnel"]["kind"] == kind) == every, kind
    # the schedule: 5 colours of 3 disjoint pairs (6 sites: the round robin's N - 1), run in
    # its order, native then vxlan of a pair together
    colours: dict[int, set[tuple[str, ...]]] = {}
    for d in docs:
        colours.setdefault(d["mesh"]["colour"], set()).add(tuple(d["mesh"]["pair"]))
    assert sorted(colours) == [0, 1, 2, 3, 4]
    for pairs in colours.values():
        assert len(pairs) == 3 and len({s for p in pairs for s in p}) == 6
    assert [d["case"]["tunnel"]["kind"] for d in docs] == ["native", "vxlan"] * 15
    assert [d["mesh"]["colour"] for d in docs] == sorted(d["mesh"]["colour"] for d in docs)
    # one after another: no two cases overlap
    spans = sorted((d["started"], d["ended"]) for d in docs)
    assert all(s < e for s, e in spans)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False)), spans
    # the report: vxlan's 6 x 6 grid (native is the reference of every cell: no grid of its
    # own), every pair's cell a share of native, the diagonal a site with itself
    rep = (out / "report" / "index.html").read_text()
    rows = grid_rows(rep, "vxlan")
    assert len(rows) == 6 and all(len(row) == 6 for row in rows), rows
    assert [row[i] for i, row in enumerate(rows)] == ["meshself"] * 6
    assert sum(row.count("meshcell") for row in rows) == 15
    assert "<h3 id='mesh-native-" not in rep
    for d in docs:
        if d["case"]["tunnel"]["kind"] == "vxlan":
            a, b = d["mesh"]["pair"]
            assert f"data-pair='{a}-{b}'" in rep
    assert ours() == before
    for d in docs:
        rid = d["case"]["run_id"]
        assert not (STATE_DIR / rid).exists() and not (STATE_DIR / f"{rid}.jsonl").exists()


class DownAtPing(SilentReporter):
    """Listens to the campaign; at every case's ping through its tunnel notes the namespaces
    of the project that exist (the case's testbed, built by then), and in a case of pair
    `pair` sets the underlay link of the pair's second site down in that case's namespace
    (`ip link set tb<rid>mu<i> down`): the site is cut off for that pair only (every case
    builds its own pair)."""

    def __init__(self, pair: tuple[str, str], before: set[str]) -> None:
        self.pair, self.before = pair, before
        self.case: Case | None = None
        self.downed: list[str] = []
        self.built: dict[str, list[str]] = {}   # case id -> its namespaces' suffixes

    def case_start(self, case: Case) -> None:
        self.case = case

    def phase(self, event: PhaseEvent) -> None:
        if self.case is None or not event.detail.startswith("ping through"):
            return
        made = [n for n in netlink.list_netns() if names.is_ours_netns(n)
                and n not in self.before]
        self.built[self.case.case_id] = sorted(n.split("-", 2)[2] for n in made)
        if self.case.pair != self.pair:
            return
        site = self.pair[1]
        (ns,) = [n for n in made if n.endswith(f"-{site}")]
        link = names.link_name(ns.split("-")[1], f"mu{site[1:]}")
        proc.run(["ip", "link", "set", link, "down"], netns=ns, timeout=10)
        self.downed.append(self.case.case_id)


@pytest.mark.skipif(root_missing() is not None, reason="needs root")
def test_a_failed_pair_is_marked_the_others_complete_and_resume_reruns_only_it(
        tmp_path: Path, root_unchanged: None, monkeypatch: pytest.MonkeyPatch) -> None:
    before = ours()
    out = tmp_path / "mesh"
    exp = exp_spec.build({"testbed": {"kind": "mesh", "sites": 3},
                          "tunnel": [{"kind": "native"}, {"kind": "vxlan"}],
                          "workload": [{"name": "stream"}],
                          "experiment": {"duration": 1, "warmup": 0, "repeats": 1}},
                         "mesh-fail.toml")
    cut = DownAtPing(("s1", "s3"), before[0])
    # the cut pair's two cases each wait CUT_PING_S for the ping that never comes (15 s by
    # default): the same failure, sooner; the healthy pairs keep a busy host's margin
    real_wait = runner.wait_reachable

    def wait_reachable(tb: Any, ep: Any, family: int, timeout: float | None = None) -> None:
        cut_pair = cut.case is not None and cut.case.pair == cut.pair
        real_wait(tb, ep, family, CUT_PING_S if cut_pair else HEALTHY_PING_S)

    monkeypatch.setattr(runner, "wait_reachable", wait_reachable)
    outcome = run_campaign(exp, out, cut)
    docs = {p.stem: json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))}
    assert len(docs) == 6
    # each case built the bridge and its own pair's two sites, not the third site
    assert set(cut.built) == set(docs)
    for k, made in cut.built.items():
        assert made == sorted(["m", *docs[k]["mesh"]["pair"]]), (k, made)
    failed = {k for k, d in docs.items() if d["status"] == "failed"}
    assert failed == set(cut.downed) == set(outcome.failed)
    assert sorted(docs[k]["case"]["tunnel"]["kind"] for k in failed) == ["native", "vxlan"]
    for k in failed:   # the system's reason: the far end does not answer through the tunnel
        assert docs[k]["mesh"]["pair"] == ["s1", "s3"]
        assert "does not answer ping through it" in docs[k]["error"], docs[k]["error"]
    for k, d in docs.items():   # the campaign went on: the other pairs measured
        if k not in failed:
            assert d["status"] == "ok" and d["mesh"]["pair"] != ["s1", "s3"], d["error"]
            assert d["raw"]["iperf3"]["bytes_received"] > 0
    index = json.loads((out / "index.json").read_text())
    assert index["state"] == "complete"
    page = build.build(out).html.read_text()
    cell = page.split("title='failed: ")[1].split("</td>")[0]
    assert cell.startswith(next(k for k in failed if "vxlan" in k))
    assert page.count("<td class=meshcell style=") == 2      # s1-s2 and s2-s3 have a share
    assert ours() == before
    kept = {k: (out / "cases" / f"{k}.json").read_bytes() for k in docs if k not in failed}

    # resume: the failed pair's cases run again (nothing cuts them now), nothing else does
    r = subprocess.run(TB + ["run", "--resume", str(out), "--db", "off", "--no-report"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    again = {p.stem: json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))}
    assert set(again) == set(docs)
    for k in kept:   # byte for byte as the first run wrote them
        assert (out / "cases" / f"{k}.json").read_bytes() == kept[k], k
    for k in failed:
        d = again[k]
        assert d["status"] == "ok", d["error"]
        assert d["started"] > max(x["ended"] for x in docs.values())
        assert d["raw"]["iperf3"]["bytes_received"] > 0
        assert any(n.startswith("run again by --resume; it had failed: tunnel is up but")
                   for n in d["notes"]), d["notes"]
    index = json.loads((out / "index.json").read_text())
    assert index["state"] == "complete" and {c["status"] for c in index["cases"]} == {"ok"}
    page = build.build(out).html.read_text()
    assert "title='failed: " not in page and page.count("<td class=meshcell style=") == 3
    assert "data-pair='s1-s3'" in page
    assert ours() == before
    for d in list(docs.values()) + list(again.values()):
        rid = d["case"]["run_id"]
        assert not (STATE_DIR / rid).exists() and not (STATE_DIR / f"{rid}.jsonl").exists()
