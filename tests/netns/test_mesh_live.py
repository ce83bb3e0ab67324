"""`tunbench run --testbed mesh --sites 3` end to end with real traffic: native and vxlan,
stream 2 s, between every pair of three site namespaces on one underlay bridge. Every pair is
measured once with its pair recorded, the cases ran one after another (no two overlap in
their recorded start and end), the report carries the N x N grid with its worst pair and
links to each cell's cases, and nothing with the project's prefix is left: namespaces, links
in the root namespace, state folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunbench.capabilities import root_missing
from tunbench.testbed import names, netlink
from tunbench.testbed.ledger import STATE_DIR

pytestmark = pytest.mark.correctness

TB = [sys.executable, "-m", "tunbench"]
PAIRS = [["s1", "s2"], ["s1", "s3"], ["s2", "s3"]]


def ours() -> tuple[set[str], set[str]]:
    return ({n for n in netlink.list_netns() if names.is_ours_netns(n)},
            {n for n in netlink.link_names(None) if names.is_ours_link(n)})


@pytest.mark.skipif(root_missing() is not None, reason="needs root")
def test_a_three_site_mesh_measures_every_pair_once_in_turn(
        tmp_path: Path, root_unchanged: None) -> None:
    before = ours()
    out = tmp_path / "mesh"
    r = subprocess.run(TB + ["run", "--testbed", "mesh", "--sites", "3", "--tunnels",
                             "native,vxlan", "--workloads", "stream", "--duration", "2",
                             "--warmup", "0", "--repeats", "1", "--out", str(out),
                             "--db", "off"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    docs = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    assert len(docs) == 6
    for d in docs:
        assert d["status"] == "ok", (d["case"]["id"], d["error"])
        assert d["case"]["pair"] == d["mesh"]["pair"] == d["testbed"]["mesh"]["pair"]
        assert d["mesh"]["parallel"] is False and d["testbed"]["kind"] == "local-mesh"
        # the pair's own namespaces were sites a and b (the others existed beside them)
        a, b = d["mesh"]["pair"]
        site_ns = d["testbed"]["mesh"]["site_netns"]
        assert set(site_ns) == {"s1", "s2", "s3"}
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
