"""The results store, schedules and trend with real campaigns: a foreground schedule runs
three campaigns that land in the store; a firing that would overlap a running campaign is
skipped and recorded; a tbf rate really changed between campaigns (200 -> 50 mbit) is found
by the trend as one regression of the right size, and repeated identical campaigns are not
flagged; a campaign is pushed to a real Prometheus Pushgateway and read back."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.store import db
from tunbench.store.copies import retimed
from tunbench.testbed.base import Testbed

pytestmark = [pytest.mark.correctness, pytest.mark.beside]

TB = [sys.executable, "-m", "tunbench"]
SHORT = ["--tunnels", "native", "--duration", "1", "--warmup", "0", "--repeats", "1",
         "--no-report", "--quiet"]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "TUNBENCH_DB": str(tmp / "results.db"),
            "TUNBENCH_SCHEDULE_DIR": str(tmp / "schedules"), **extra}


def test_foreground_schedule_runs_three_campaigns_into_the_store(tmp_path: Path) -> None:
    env = _env(tmp_path, TUNBENCH_SCHEDULE_MIN_SECONDS="1")
    r = subprocess.run([*TB, "schedule", "add", "tb-three", "--every", "2s", "--foreground",
                        "--runs", "3", "--results", str(tmp_path / "res"), "--", *SHORT],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    conn = db.connect(tmp_path / "results.db", create=False)
    ran = conn.execute("SELECT campaign_path FROM schedule_run WHERE schedule='tb-three' AND "
                       "status='ran'").fetchall()
    assert len(ran) == 3
    stored = [p for (p,) in conn.execute("SELECT path FROM campaign")]
    assert sorted(stored) == sorted(p for (p,) in ran)
    for p in stored:
        assert (Path(p) / "index.json").exists()
        assert json.loads((Path(p) / "index.json").read_text())["state"] == "complete"
    n = conn.execute("SELECT count(*) FROM \"case\" k JOIN metric m ON m.case_row = k.id "
                     "WHERE m.name='throughput' AND k.status='ok'").fetchone()[0]
    assert n == 3
    # runs took longer than 2 s: the slots that passed meanwhile are recorded as skipped
    skipped = conn.execute("SELECT reason FROM schedule_run WHERE status='skipped'").fetchall()
    assert all("still running" in s for (s,) in skipped)
    listed = subprocess.run([*TB, "schedule", "list"], env=env, capture_output=True,
                            text=True, check=True).stdout
    assert "tb-three: every 2s" in listed and "no timer (foreground)" in listed
    subprocess.run([*TB, "schedule", "remove", "tb-three"], env=env, check=True,
                   capture_output=True)
    assert not list((tmp_path / "schedules").glob("tb-three*"))


def test_overlapping_firing_is_skipped_and_recorded(tmp_path: Path) -> None:
    env = _env(tmp_path, TUNBENCH_SCHEDULE_MIN_SECONDS="1")
    # --duration 10: the first run must still hold the lock when the second CLI has started
    # and read it, which beside a test suite can take a few seconds of Python start-up alone;
    # at a shaped 10 mbit, so its traffic does not load the tests running beside it
    at = SHORT.index("--duration") + 1
    long = [*SHORT[:at], "10", *SHORT[at + 1:], "--rate", "10mbit"]
    subprocess.run([*TB, "schedule", "add", "tb-ovl", "--every", "1h", "--no-timer",
                    "--results", str(tmp_path / "res"), "--", *long],
                   env=env, check=True, capture_output=True, timeout=60)
    first = subprocess.Popen([*TB, "schedule", "run", "tb-ovl", "--no-slip"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = tmp_path / "schedules" / "tb-ovl.lock"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (lock.exists() and lock.read_text().strip()):
            time.sleep(0.05)
        holder = lock.read_text().strip()
        second = subprocess.run([*TB, "schedule", "run", "tb-ovl", "--no-slip"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 0
        assert "skipped" in second.stderr and f"PID {holder}" in second.stderr
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.terminate()
            first.wait(timeout=60)
    assert first.returncode == 0, err
    assert holder == str(first.pid)
    conn = db.connect(tmp_path / "results.db", create=False)
    rows = conn.execute("SELECT status, reason FROM schedule_run WHERE schedule='tb-ovl' "
                        "ORDER BY id").fetchall()
    assert [s for s, _ in rows] == ["skipped", "ran"]
    assert f"PID {holder}" in rows[0][1]
    assert db.counts(conn)["campaign"] == 1


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Path]]]:
    """Two real campaigns at --rate 200mbit, then two at 50mbit, recorded by `run` itself
    into a store (the hook), in that order (two of each give the trend the run-to-run spread
    of a setup; a third of each, until issue 27, added ~7 s and no other check)."""
    tmp = tmp_path_factory.mktemp("shaped")
    dirs = []
    for i, rate in enumerate(["200mbit"] * 2 + ["50mbit"] * 2):
        out = tmp / f"c{i}-{rate}"
        subprocess.run([*TB, "run", *SHORT, "--rate", rate, "--out", str(out)],
                       env=_env(tmp), check=True, capture_output=True, timeout=300)
        dirs.append(out)
    yield tmp, dirs


def test_run_records_each_campaign(shaped: tuple[Path, list[Path]]) -> None:
    tmp, dirs = shaped
    conn = db.connect(tmp / "results.db", create=False)
    stored = {p for (p,) in conn.execute("SELECT path FROM campaign")}
    assert stored == {str(d.resolve()) for d in dirs}
    rates = [r for (r,) in conn.execute('SELECT rate FROM "case" k JOIN campaign c ON '
                                        "c.id = k.campaign_id ORDER BY c.created")]
    assert rates == ["200mbit"] * 2 + ["50mbit"] * 2


def _series(tmp: Path, dirs: list[Path], name: str) -> list[Path]:
    """The real campaigns plus copies (moved in time, values untouched) for a longer series:
    A1 A2 A1' A2' A1" A2" then B1 B2 B1' B2' B1" B2" (A: 200mbit, B: 50mbit), six hours
    apart."""
    order = dirs[:2] * 3 + dirs[2:] * 3
    t0 = time.time() - 30 * 86400
    return [retimed(src, tmp / name / f"s{i:02d}", t0 + i * 6 * 3600)
            for i, src in enumerate(order)]


def test_trend_keeps_a_real_tbf_step_apart_as_two_setups(shaped: tuple[Path, list[Path]]) -> None:
    """A tbf rate step (200 -> 50 mbit) is a change of setup, not a regression: trend keeps
    one series per setup (the campaigns' fingerprints, as compare checks them), reports no
    change across the step, and draws both setups in its figure. Finding a change point
    within one setup is tested on recorded campaigns (unit/test_store.py)."""
    tmp, dirs = shaped
    series = _series(tmp, dirs, "step")
    r = subprocess.run([*TB, "trend", "--json", "--metric", "throughput",
                        "--out", str(tmp / "fig"), *map(str, series)],
                       capture_output=True, text=True, check=True, timeout=120)
    doc = json.loads(r.stdout)
    assert doc["campaigns"] == 12
    assert doc["changes"] == [], doc["changes"]
    native = [s for s in doc["series"] if (s["tunnel"], s["metric"]) == ("native", "throughput")]
    labels = [doc["setups"][s["setup"]]["label"] for s in native]
    assert len(native) == 2, labels
    assert any("rate 200mbit" in x for x in labels) and any("rate 50mbit" in x for x in labels)
    by_setup = {doc["setups"][s["setup"]]["label"]: {p["campaign"] for p in s["points"]}
                for s in native}
    step = {str(p.resolve()) for p in series[6:]}
    assert [c for c in by_setup.values() if c == step], by_setup   # the 50mbit half alone
    assert (tmp / "fig" / "trend-stream-throughput.png").stat().st_size > 10_000
    # the same-rate halves alone: one setup each, no change point
    for half in (series[:6], series[6:]):
        r = subprocess.run([*TB, "trend", "--json", "--metric", "throughput",
                            *map(str, half)], capture_output=True, text=True, check=True)
        assert json.loads(r.stdout)["changes"] == []


@pytest.mark.skipif(not shutil.which("prometheus-pushgateway"), reason="prometheus-pushgateway "
                    "not installed (apt-get install prometheus-pushgateway)")
def test_push_to_a_real_pushgateway(testbed: Testbed, shaped: tuple[Path, list[Path]]) -> None:
    """The gateway runs in the testbed's site b namespace (on its loopback, a random port) and
    is stopped by the testbed's ledger; export runs in that namespace too."""
    tmp, dirs = shaped
    port = random.randint(20000, 60000)
    url = f"http://127.0.0.1:{port}"
    gw = testbed.spawn(testbed.b, ["prometheus-pushgateway",
                                   f"--web.listen-address=127.0.0.1:{port}",
                                   f"--persistence.file={testbed.workdir / 'pg.data'}"],
                       label="pushgateway")
    proc.wait_ready(gw, ready_text="Listening on", timeout=30)
    ns = str(testbed.b.netns)
    r = proc.run([*TB, "db", "export", "--db", str(tmp / "results.db"), "--pushgateway", url,
                  "--campaign", str(dirs[0]), "--campaign", str(dirs[3])], netns=ns,
                 timeout=120)
    assert "pushed 2 campaign(s)" in r.stdout
    text = proc.run([sys.executable, "-c", "import sys, urllib.request; sys.stdout.write("
                     f"urllib.request.urlopen('{url}/metrics').read().decode())"],
                    netns=ns).stdout
    conn = sqlite3.connect(tmp / "results.db")
    for d in (dirs[0], dirs[3]):
        (value,) = conn.execute('SELECT m.value FROM metric m JOIN "case" k ON k.id = '
                                "m.case_row JOIN campaign c ON c.id = k.campaign_id WHERE "
                                "c.path = ? AND m.name = 'throughput'",
                                (str(d.resolve()),)).fetchone()
        line = next(x for x in text.splitlines() if x.startswith("tunbench_throughput{")
                    and f'campaign="{d.name}"' in x)
        assert float(line.rsplit(" ", 1)[1]) == pytest.approx(value, rel=1e-9)
        assert 'tunnel="native"' in line and 'unit="Mbit/s"' in line
    assert f'push_time_seconds{{campaign="{dirs[0].name}",instance="",job="tunbench"}}' in text
    # at run end: the hook pushes the campaign it records when TUNBENCH_PUSHGATEWAY is set
    hook = ("import sys; from pathlib import Path; from tunbench.store.commands import "
            "record_finished; record_finished(Path(sys.argv[1]), sys.argv[2])")
    r = proc.run([sys.executable, "-c", hook, str(dirs[2]), str(tmp / "hook.db")], netns=ns,
                 env={"TUNBENCH_PUSHGATEWAY": url}, timeout=120)
    assert r.stderr == ""
    text = proc.run([sys.executable, "-c", "import sys, urllib.request; sys.stdout.write("
                     f"urllib.request.urlopen('{url}/metrics').read().decode())"],
                    netns=ns).stdout
    assert any(x.startswith("tunbench_throughput{") and f'campaign="{dirs[2].name}"' in x
               for x in text.splitlines())
