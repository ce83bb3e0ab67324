"""The results store on recorded real campaigns (tests/data/campaigns, copied, never edited):
idempotent import, duplicates, replacement, queries and their formats, a SIGKILLed import,
the Pushgateway exposition, the trend's time-of-day grouping and change detection."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

import cli_inproc
from tunbench.errors import SpecError
from tunbench.store import db, pushgw, query
from tunbench.store.copies import retimed
from tunbench.trend import analysis

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"
BASIC = CAMPAIGNS / "basic"
TB = [sys.executable, "-m", "tunbench"]


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hours and weekdays below are UTC, whatever the host's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def _expected_rows(root: Path) -> tuple[int, int]:
    cases = list((root / "cases").glob("*.json"))
    return len(cases), sum(len(json.loads(p.read_text()).get("metrics") or {})
                           for p in cases)


def test_import_twice_and_copies_do_not_duplicate(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "r.db")
    first = db.import_many(conn, db.campaign_dirs([CAMPAIGNS]))
    assert {r.action for r in first} == {"added"}
    n_cases = sum(_expected_rows(d)[0] for d in db.campaign_dirs([CAMPAIGNS]))
    n_metrics = sum(_expected_rows(d)[1] for d in db.campaign_dirs([CAMPAIGNS]))
    before = db.counts(conn)
    assert (before["case"], before["metric"]) == (n_cases, n_metrics)
    again = db.import_many(conn, db.campaign_dirs([CAMPAIGNS]))
    assert {r.action for r in again} == {"unchanged"}
    import shutil
    shutil.copytree(BASIC, tmp_path / "copy")
    dup = db.import_campaign(conn, tmp_path / "copy")
    assert dup.action == "duplicate" and str(BASIC.resolve()) in dup.note
    assert db.counts(conn) == before


def test_changed_folder_replaces_its_rows(tmp_path: Path) -> None:
    src = retimed(BASIC, tmp_path / "c", 1_800_000_000.0)
    conn = db.connect(tmp_path / "r.db")
    assert db.import_campaign(conn, src).action == "added"
    keep = {"0000-native-stream-mtu1500-r1", "0001-vxlan-stream-mtu1500-r1"}
    retimed(BASIC, tmp_path / "c2", 1_800_000_000.0, keep=keep)
    (src / "index.json").write_text((tmp_path / "c2" / "index.json").read_text())
    for p in (src / "cases").glob("*.json"):
        if p.stem not in keep:
            p.unlink()
    res = db.import_campaign(conn, src)
    assert res.action == "replaced" and res.cases == 2
    assert db.counts(conn)["case"] == 2 and db.counts(conn)["campaign"] == 1


def test_query_filters_and_formats(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "r.db")
    db.import_many(conn, db.campaign_dirs([CAMPAIGNS]))
    rows = query.rows(conn, query.Filters(tunnels=["vxlan"], metrics=["throughput"]))
    assert rows and {r["kind"] for r in rows} == {"vxlan"}
    assert {r["metric"] for r in rows} == {"throughput"}
    start = min(r["started"] for r in rows)
    later = query.rows(conn, query.Filters(tunnels=["vxlan"], metrics=["throughput"],
                                           since=start + 1))
    assert len(later) == len(rows) - 1
    conn.close()
    db_path = str(tmp_path / "r.db")
    pq = tmp_path / "t.parquet"
    cli_inproc.tunbench("db", "query", "--db", db_path, "--tunnel", "vxlan", "--metric",
                        "throughput", "--format", "parquet", "-o", str(pq), check=True)
    import pyarrow.parquet as papq
    table = papq.read_table(pq).to_pylist()
    assert [r["value"] for r in table] == [r["value"] for r in rows]
    out = cli_inproc.tunbench("db", "query", "--db", db_path, "--metric", "throughput", "--format",
                              "json", check=True)
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert lines and all(x["metric"] == "throughput" for x in lines)
    bad = cli_inproc.tunbench("db", "query", "--db", db_path, "--since", "yesterday")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--since" in bad.stderr


def test_query_of_missing_store_is_one_line(tmp_path: Path) -> None:
    r = cli_inproc.tunbench("db", "query", "--db", str(tmp_path / "none.db"))
    assert r.returncode == 2 and "no results store" in r.stderr
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(SpecError):
        db.connect(tmp_path)   # a directory


def test_killed_import_leaves_the_store_consistent(tmp_path: Path) -> None:
    """SIGKILL while the importer is inside a campaign's transaction: every campaign in the
    store is whole (all its cases and metrics), the partial one is absent, and importing
    again completes the store without duplicates."""
    dirs = [retimed(BASIC, tmp_path / f"c{i}", 1_800_000_000.0 + i * 3600) for i in range(4)]
    store = tmp_path / "r.db"
    env = {**os.environ, "TUNBENCH_DB_TEST_SLOW_CASE": "0.8"}
    p = subprocess.Popen([*TB, "db", "import", "--db", str(store), *map(str, dirs)],
                         env=env, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    line = p.stderr.readline()          # "[1/4] added: ..." : the first campaign committed
    assert line.startswith("[1/4] added"), line
    time.sleep(0.7)                     # well inside the second campaign's 6 x 0.8 s
    p.send_signal(signal.SIGKILL)
    p.wait()
    conn = db.connect(store)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    per = conn.execute('SELECT c.n_cases, count(k.id) FROM campaign c LEFT JOIN "case" k '
                       "ON k.campaign_id = c.id GROUP BY c.id").fetchall()
    assert len(per) == 1 and all(n == m for n, m in per)
    db.import_many(conn, dirs)
    n_cases, n_metrics = _expected_rows(BASIC)
    assert db.counts(conn)["campaign"] == 4
    assert db.counts(conn)["case"] == 4 * n_cases
    assert db.counts(conn)["metric"] == 4 * n_metrics


def test_pushgateway_exposition_is_grouped_and_escaped() -> None:
    rows = [{"campaign": "/r/a", "metric": "tcp_rtt_p99.9", "value": 12.5, "tunnel":
             'wire"guard (go)', "unit": "µs"},
            {"campaign": "/r/a", "metric": "throughput", "value": 900.0, "tunnel": "native"},
            {"campaign": "/r/a", "metric": "tcp_rtt_p99.9", "value": 11.0, "tunnel": "native"}]
    text = pushgw.exposition(rows)
    lines = text.splitlines()
    assert lines[0] == "# HELP tunbench_tcp_rtt_p99_9 tunbench case metric (see the unit label)"
    assert lines[1] == "# TYPE tunbench_tcp_rtt_p99_9 gauge"
    assert lines[2].startswith('tunbench_tcp_rtt_p99_9{campaign="a",case_id="",'
                               'tunnel="wire\\"guard (go)"')
    assert lines[2].endswith(" 12.5") and lines[3].endswith(" 11.0")
    assert lines[5] == "# TYPE tunbench_throughput gauge"
    with pytest.raises(SpecError):
        pushgw.group_url("localhost:9091", "x")


def _hour_campaigns(tmp: Path) -> tuple[list[Path], dict[int, list[float]]]:
    """Six copies of the recorded 'basic' campaign at known UTC times: Monday 08:00 and 14:00,
    Tuesday 08:00, and so on; and the vxlan share of native expected per hour, from the files."""
    base = datetime(2026, 11, 2, 0, 0).timestamp()   # a Monday, UTC
    when = [base + 8 * 3600, base + 14 * 3600, base + 86400 + 8 * 3600,
            base + 86400 + 14 * 3600, base + 2 * 86400 + 8 * 3600, base + 4 * 86400 + 20 * 3600]
    dirs = [retimed(BASIC, tmp / f"c{i}", t) for i, t in enumerate(when)]
    docs = [json.loads(p.read_text()) for p in sorted((BASIC / "cases").glob("*.json"))]
    nat = [d["metrics"]["throughput"]["value"] for d in docs
           if d["case"]["tunnel"]["kind"] == "native"]
    vx = [(d["started"] - json.loads((BASIC / "index.json").read_text())["created"],
           d["metrics"]["throughput"]["value"]) for d in docs
          if d["case"]["tunnel"]["kind"] == "vxlan"]
    share = [100 * v / (sum(nat) / len(nat)) for _, v in vx]
    expected: dict[int, list[float]] = {}
    for t in when:
        for (off, _), s in zip(vx, share, strict=True):
            expected.setdefault(datetime.fromtimestamp(t + off).hour, []).append(s)
    return dirs, expected


def test_time_of_day_grouping_on_recorded_cases(tmp_path: Path) -> None:
    import statistics
    dirs, expected = _hour_campaigns(tmp_path)
    conn = db.connect(":memory:")
    db.import_many(conn, dirs)
    t = analysis.build(query.rows(conn, query.Filters(metrics=["throughput"])))
    key = ("vxlan", "stream", "throughput")
    assert t.views[key] == analysis.SHARE and t.views[("native", "stream", "throughput")] \
        == analysis.ABSOLUTE
    hours = analysis.by_slot(t, "hour")[key]
    assert sorted(hours) == sorted(expected) == [8, 14, 20]
    for h, vals in expected.items():
        assert hours[h].n == len(vals)
        assert hours[h].mean == pytest.approx(statistics.fmean(vals))
        assert hours[h].std == pytest.approx(statistics.stdev(vals))
    days = analysis.by_slot(t, "weekday")[key]
    assert {d: c.n for d, c in days.items()} == {0: 6, 1: 6, 2: 3, 4: 3}


def test_trend_of_noise_has_no_change_points(tmp_path: Path) -> None:
    """Twelve campaigns, each one real repeat of the recorded campaign (r1, r2, r3 in turn):
    real run-to-run noise (±15 %), no step: nothing is flagged."""
    start = datetime(2026, 11, 2, 8, 0).timestamp()
    dirs = []
    for i in range(12):
        r = i % 3 + 1
        keep = {f"{2 * (r - 1):04d}-native-stream-mtu1500-r{r}",
                f"{2 * (r - 1) + 1:04d}-vxlan-stream-mtu1500-r{r}"}
        dirs.append(retimed(BASIC, tmp_path / f"c{i}", start + i * 3 * 3600, keep=keep))
    r = cli_inproc.tunbench("trend", "--json", "--metric", "throughput,cpu_busy", *map(str, dirs),
                            check=True)
    doc = json.loads(r.stdout)
    assert doc["campaigns"] == 12 and doc["changes"] == []


def test_trend_flags_a_step_with_its_size(tmp_path: Path) -> None:
    """The same recorded repeats, with vxlan's throughput cut to 60 % from the seventh
    campaign on (a synthetic step on real values; the netns test produces a real one)."""
    start = datetime(2026, 11, 2, 8, 0).timestamp()
    dirs = []
    for i in range(12):
        r = i % 3 + 1
        keep = {f"{2 * (r - 1):04d}-native-stream-mtu1500-r{r}",
                f"{2 * (r - 1) + 1:04d}-vxlan-stream-mtu1500-r{r}"}
        src = retimed(BASIC, tmp_path / f"s{i}", start + i * 3 * 3600, keep=keep)
        if i >= 6:
            for p in (src / "cases").glob("*vxlan*"):
                d = json.loads(p.read_text())
                d["metrics"]["throughput"]["value"] *= 0.6
                p.write_text(json.dumps(d))
        dirs.append(src)
    conn = db.connect(":memory:")
    db.import_many(conn, dirs)
    t = analysis.build(query.rows(conn, query.Filters(metrics=["throughput"])))
    changes = analysis.change_points(t)
    assert len(changes) == 1
    c = changes[0]
    assert (c.tunnel, c.metric, c.verdict, c.view) == ("vxlan", "throughput",
                                                       analysis.REGRESSION, analysis.SHARE)
    assert c.at == pytest.approx(start + 6 * 3 * 3600)
    assert c.change_pct == pytest.approx(-40.0, abs=8)


def test_recording_failure_is_one_warning_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from tunbench.store.commands import record_finished
    (tmp_path / "adir").mkdir()
    record_finished(BASIC, str(tmp_path / "adir"))     # a directory, not a store
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: campaign not recorded" in err
    assert f"tunbench db import {BASIC}" in err
    record_finished(BASIC, str(tmp_path / "ok.db"))
    assert capsys.readouterr().err == ""
    assert db.counts(db.connect(tmp_path / "ok.db"))["campaign"] == 1


def test_import_of_a_non_result_folder_is_one_line(tmp_path: Path) -> None:
    r = cli_inproc.tunbench("db", "import", "--db", str(tmp_path / "r.db"), str(tmp_path))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no tunbench result" in r.stderr
