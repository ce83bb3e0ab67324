"""A case that measured native beside it (workloads/stream.py, `paired_native`: native's
bursts in turn with the method's, the tunnel up) pairs by its own share in every reader: the
tables, the decision summary, `compare`, and the sequential rule (results/model.own_share,
log_share; docs/methodology.md, "Native beside the method").

The data: tests/data/campaigns/slowed (a real `make run` stream campaign, whose native r1 the
host slowed for its whole window) with bursts written into vxlan's and ebpf-vxlan's cases:
known shares, one of them in round 1, which has no native to pair with, and one on a case
whose own window is slow enough to be left out were it paired by round."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path

import paired_ref
import pytest

from tunbench import sequential
from tunbench.report import advise, compare, data, stats
from tunbench.report.advise import Constraints
from tunbench.results import reader
from tunbench.results.model import log_share, own_share

ROOT = Path(__file__).resolve().parents[1] / "data" / "campaigns" / "slowed"
# per label, per round: the method's bursts and native's (Mbit/s), as the stream workload
# writes them
BURSTS = {
    "vxlan": {1: ([8000, 8200, 7900, 8100], [10000, 10100, 9900, 10000]),
              2: ([9000, 9500, 8800, 9100], [11000, 11800, 10900, 11300]),
              3: ([4000, 4100, 4200, 3900], [5000, 5300, 5200, 4900])},
    "ebpf-vxlan": {2: ([10500, 10800, 10400, 10600], [11000, 11500, 10800, 11100])},
}


def _with_bursts(tmp: Path) -> Path:
    root = tmp / "beside"
    shutil.copytree(ROOT, root)
    for path in sorted((root / "cases").glob("*.json")):
        doc = json.loads(path.read_text())
        c = doc["case"]
        got = BURSTS.get(c["tunnel"]["label"], {}).get(c["repeat"])
        if got is None:
            continue
        doc["paired_native"] = {"throughput": {
            "pairs": 4, "burst_s": 1.0, "order": ["method", "native", "native", "method"] * 2,
            "method": got[0], "native": got[1], "native_addr": "10.0.0.2"}}
        if c["tunnel"]["label"] == "vxlan" and c["repeat"] == 3:   # a window the host slowed
            doc["series"]["throughput"] = [x / 3 for x in doc["series"]["throughput"]]
        path.write_text(json.dumps(doc))
    return root


def _expected(label: str, rnd: int) -> float:
    m, n = BURSTS[label][rnd]
    return math.log(statistics.fmean(m) / statistics.fmean(n))


def test_the_rule() -> None:
    p = {"throughput": {"method": [8.0, 10.0], "native": [10.0, 10.0]}}
    assert own_share(p, "throughput") == pytest.approx(0.9)
    assert own_share(p, "tcp_rtt") is None and own_share(None, "throughput") is None
    assert own_share({"throughput": {"method": [0.0], "native": [5.0]}}, "throughput") is None
    assert own_share({"throughput": {"method": [], "native": [5.0]}}, "throughput") is None
    assert log_share(50.0, 100.0) == pytest.approx(math.log(0.5))
    assert log_share(50.0, 100.0, own=0.8) == pytest.approx(math.log(0.8))   # own wins
    assert log_share(None, None, own=0.8) == pytest.approx(math.log(0.8))
    assert log_share(50.0, None) is None and log_share(0.0, 100.0) is None


def test_the_reference_reads_the_bursts(tmp_path: Path) -> None:
    root = _with_bursts(tmp_path)
    logs = paired_ref.log_ratios(root, "vxlan", "throughput")
    for rnd in (1, 2, 3):
        assert logs[rnd] == pytest.approx(_expected("vxlan", rnd))
    plain = paired_ref.log_ratios(ROOT, "vxlan", "throughput")
    assert 1 not in plain                        # paired by round, round 1 had no native
    assert {r: v for r, v in logs.items() if r > 3} == pytest.approx(
        {r: v for r, v in plain.items() if r > 3})   # the rounds without bursts unchanged


def test_every_reader_pairs_by_the_case_own_share(tmp_path: Path) -> None:
    root = _with_bursts(tmp_path)
    c = data.load(root)
    assert not any(d.slowed for d in c.ok if d.tunnel.label == "vxlan" and d.repeat == 3)
    rows = {r.tunnel: r for r in stats.rows(c.ok) if r.metric == "throughput"}
    a = advise.build([c], Constraints())
    (series,) = sequential.series_from_docs(reader.read_campaign(root).cases).series
    scen = next(d.scenario for d in c.ok)
    for tun in ("vxlan", "ebpf-vxlan", "srv6"):
        ref_logs = paired_ref.log_ratios(root, tun, "throughput")
        ref = paired_ref.share(list(ref_logs.values()))
        share = rows[tun].share
        assert share is not None
        assert (share.mean, share.ci_low, share.ci_high) == pytest.approx(ref)    # tables
        m = next(m for m in a.methods if m.label == tun)
        assert m.share[1].est.mean == pytest.approx(ref[0])                       # summary
        assert compare.shares(c, tun, scen, "throughput") == pytest.approx(
            [ref_logs[r] for r in sorted(ref_logs)])                              # compare
        assert sequential.log_ratios(series.methods[tun], series.native,
                                     series.own.get(tun)) == pytest.approx(ref_logs)  # rule
    assert paired_ref.log_ratios(root, "vxlan", "throughput")[1] == pytest.approx(
        _expected("vxlan", 1))


def test_the_rule_ranks_by_it(tmp_path: Path) -> None:
    """The ranking the sequential rule makes from these rounds puts vxlan where its own
    shares say, whatever native's case in the same round did."""
    root = _with_bursts(tmp_path)
    (series,) = sequential.series_from_docs(reader.read_campaign(root).cases).series
    rk = sequential.rank(series)
    logs = {t: statistics.fmean(sequential.log_ratios(series.methods[t], series.native,
                                                      series.own.get(t)).values())
            for t in series.methods}
    assert [t for t in rk.order if t != "native"] == sorted(logs, key=lambda t: -logs[t])


def test_a_round_without_native_still_decides_against_native() -> None:
    """Native's case failed (or was slowed) in round 1; the method measured native beside
    it there: the pair native~x rests on all three rounds, as the tables' share does."""
    s = sequential.Series(("stream", 1500, "default"), "throughput", True,
                          native={2: 10.0, 3: 10.0}, methods={"x": {1: 5.0, 2: 5.0, 3: 5.0}},
                          own={"x": {1: 0.52}})
    rk = sequential.rank(s)
    (d,) = rk.decisions
    assert {d.a, d.b} == {"native", "x"} and d.n == 3
