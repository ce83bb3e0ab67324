"""compare on real recorded campaigns (tests/data/campaigns), damaged and partial result
folders, and the report's layout measured in headless Chromium. Every campaign is a copy in
a temporary folder; the fixtures themselves are never changed.

idle and busy: `tunbench run --tunnels native,vxlan --duration 3 --repeats 3`, the same
settings on the same host; busy ran with four CPU-bound processes beside it (host drift).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import paired_ref
import pytest

import cli_inproc
from tunbench.report import build, data
from tunbench.results import fingerprint

CAMPAIGNS = Path(__file__).parent.parent / "data" / "campaigns"


def tb(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tunbench ARGS` in this process (cli_inproc): what it prints and returns;
    test_report.py's test_compare_exit_code_on_a_real_regression runs the real compare,
    test_missing_case_file_is_reported_not_dropped the real report."""
    return cli_inproc.tunbench(*args)


def _copy(tmp_path: Path, name: str, as_name: str) -> Path:
    """A second copy of a recorded campaign under another name."""
    return Path(shutil.copytree(CAMPAIGNS / name, tmp_path / as_name,
                                ignore=shutil.ignore_patterns("report")))


def _keep(root: Path, keep: Callable[[dict], bool]) -> Path:
    """Drop the cases `keep` rejects from a campaign copy (files and index), as a campaign
    that ran only those cases would look."""
    index = json.loads((root / "index.json").read_text())
    kept = []
    for entry in index["cases"]:
        path = root / entry["file"]
        if keep(entry):
            kept.append(entry)
        else:
            path.unlink()
    index["cases"] = kept
    (root / "index.json").write_text(json.dumps(index, indent=1))
    return root


def _one_line_error(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], lines[0]


# -- compare ---------------------------------------------------------------------------------

def test_compare_refuses_shaped_vs_unshaped_and_force_marks_every_line(
        campaign: Callable[[str], Path]) -> None:
    a, b = campaign("basic"), campaign("shaped")     # b was recorded with --rate 200mbit
    r = tb("compare", a, b, "--threshold", "5")
    _one_line_error(r, "not comparable", "underlay rate: A none, B 200mbit", "--force")
    assert r.stdout == ""

    forced = tb("compare", a, b, "--json", "--force")
    doc = json.loads(forced.stdout)
    assert doc["comparable"] is False and doc["forced"] is True
    assert doc["differences"] == ["underlay rate: A none, B 200mbit"]
    assert doc["entries"] and all(e["warnings"] == ["underlay rate"] for e in doc["entries"])
    assert forced.returncode == doc["exit_code"] == (1 if doc["regressions"] else 0)
    # the absolute view sees a -98% "regression"; vxlan's verdict rests on its share of
    # native, which shaping raised (both hit the same 200 Mbit/s ceiling)
    vx = next(e for e in doc["entries"] if (e["tunnel"], e["metric"]) == ("vxlan", "throughput"))
    assert vx["absolute_verdict"] == "regressed" and vx["basis"] == "share of native"
    assert vx["share_b"] > vx["share_a"] and vx["verdict"] != "regressed"
    nat = next(e for e in doc["entries"] if (e["tunnel"], e["metric"]) ==
               ("native", "throughput"))
    assert nat["reference"] and "native/stream/mtu1500/throughput" not in doc["regressions"]
    text = tb("compare", a, b, "--force")     # every entry shown, each marked ⚠
    assert text.stdout.count("⚠") >= len(doc["entries"])
    assert "WARNING (--force)" in text.stdout and "not comparable" in text.stdout
    wide = tb("compare", a, b, "--force", "--wide")
    assert wide.stdout.count("not comparable") >= len(doc["entries"])


def test_compare_disjoint_campaigns_is_nothing_comparable(
        campaign: Callable[[str], Path], tmp_path: Path) -> None:
    """A measured only native, B only vxlan (both cut from the same recorded campaign, so
    their settings agree): no tunnel, workload, MTU and metric in common."""
    a = _keep(campaign("basic"), lambda e: e["tunnel"] == "native")
    b = _keep(_copy(tmp_path, "basic", "basic-vx"), lambda e: e["tunnel"] == "vxlan")
    r = tb("compare", a, b, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["entries"] == [] and doc["exit_code"] == 2
    assert any("nothing comparable" in line for line in doc["summary"])
    assert doc["unmatched"]


def test_compare_single_runs_are_untested_not_a_pass(campaign: Callable[[str], Path],
                                                     tmp_path: Path) -> None:
    a = _keep(campaign("basic"), lambda e: e["repeat"] == 1)
    b = _keep(_copy(tmp_path, "basic", "basic-r2"), lambda e: e["repeat"] == 2)
    r = tb("compare", a, b, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 2, r.stderr
    assert doc["regressions"] == [] and len(doc["untested"]) == len(
        [e for e in doc["entries"] if not e["reference"]]) > 0
    assert all(e["verdict"] == "untested" for e in doc["entries"])
    text = tb("compare", a, b)
    assert "untested" in text.stdout and "--allow-untested" in text.stdout
    assert tb("compare", a, b, "--allow-untested").returncode == 0


def test_compare_same_campaign_passes(campaign: Callable[[str], Path]) -> None:
    a = campaign("basic")
    r = tb("compare", a, a)
    assert r.returncode == 0 and "no significant regression" in r.stdout


def test_compare_host_drift_pair_rests_on_share_of_native(
        campaign: Callable[[str], Path]) -> None:
    a, b = campaign("idle"), campaign("busy")
    r = tb("compare", a, b, "--json")
    doc = json.loads(r.stdout)
    assert doc["comparable"] and r.returncode == doc["exit_code"] in (0, 1)
    vx = next(e for e in doc["entries"] if (e["tunnel"], e["metric"]) == ("vxlan", "throughput"))
    assert vx["basis"] == "share of native"
    # the paired per-round share on the log scale, as the report's tables show it
    for side, root in (("a", a), ("b", b)):
        mean, lo, hi = paired_ref.of(root, "vxlan", "throughput")
        assert vx[f"share_{side}"] == pytest.approx(mean)
        assert vx[f"share_ci_{side}"] == pytest.approx([lo, hi])
        row = next(r for r in data.load(root).rows
                   if (r.tunnel, r.metric) == ("vxlan", "throughput"))
        assert row.pct_of_native == pytest.approx(mean)
    for key in doc["regressions"]:      # every regression is named in the summary
        assert any(key in line for line in doc["summary"])


def test_compare_uniform_host_slowdown_cancels(campaign: Callable[[str], Path]) -> None:
    """B: basic with every throughput halved, as a host twice as slow for all alike would
    record: the absolute view calls vxlan regressed, its share of native is unchanged."""
    a = campaign("basic")
    b = shutil.copytree(a, a.parent / "slow")
    for p in (b / "cases").glob("*.json"):
        d = json.loads(p.read_text())
        d["metrics"]["throughput"]["value"] /= 2
        d["series"]["throughput"] = [x / 2 for x in d["series"]["throughput"]]
        p.write_text(json.dumps(d))
    r = tb("compare", a, b, "--json")
    doc = json.loads(r.stdout)
    vx = next(e for e in doc["entries"] if (e["tunnel"], e["metric"]) == ("vxlan", "throughput"))
    assert vx["absolute_verdict"] == "regressed"
    assert vx["share_verdict"] == "no significant change" and vx["share_change_pct"] == \
        pytest.approx(0, abs=1e-9)
    assert r.returncode == 0 and doc["regressions"] == []


def test_fingerprint_recorded_at_write_time_matches_the_derived_one() -> None:
    index = json.loads((CAMPAIGNS / "idle" / "index.json").read_text())
    assert index["fingerprint"] == fingerprint.derive(index["experiment"], index["env"])
    old = json.loads((CAMPAIGNS / "basic" / "index.json").read_text())
    assert "fingerprint" not in old
    diffs = fingerprint.differences(fingerprint.of_index(old), fingerprint.of_index(index))
    assert any(d.startswith("duration (s): A 2, B 3") for d in diffs), diffs


# -- damaged and partial folders -------------------------------------------------------------

def test_truncated_case_and_index_are_one_line_naming_the_file(
        campaign: Callable[[str], Path]) -> None:
    root = campaign("basic")
    case = sorted((root / "cases").glob("*.json"))[3]
    case.write_text(case.read_text()[:400])
    for cmd in (["report", root], ["compare", root, CAMPAIGNS / "basic"]):
        _one_line_error(tb(*cmd), str(case), "not valid JSON", "truncated")
    idx = campaign("mtu") / "index.json"
    idx.write_text(idx.read_text()[:-30])
    _one_line_error(tb("report", idx.parent), str(idx), "not valid JSON")


def test_newer_format_version_is_refused(campaign: Callable[[str], Path]) -> None:
    root = campaign("basic")
    index = json.loads((root / "index.json").read_text())
    index["format_version"] = 99
    (root / "index.json").write_text(json.dumps(index))
    _one_line_error(tb("report", root), "format version 99", "upgrade tunbench")


def test_missing_case_file_is_reported_not_dropped(campaign: Callable[[str], Path]) -> None:
    root = campaign("basic")
    gone = sorted((root / "cases").glob("*.json"))[3]
    gone.unlink()
    r = subprocess.run([sys.executable, "-m", "tunbench", "report", str(root)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"case {gone.stem} is listed" in r.stderr and "missing" in r.stderr
    assert data.load(root).missing == [gone.stem]
    page = (root / "report" / "index.html").read_text()
    assert "case file(s) missing" in page and gone.stem in page


def _cut_short(root: Path, pending: int) -> list[str]:
    """The index a campaign interrupted before its last `pending` cases leaves behind."""
    index = json.loads((root / "index.json").read_text())
    index["state"] = "interrupted"
    index.pop("finished", None)
    cut = index["cases"][len(index["cases"]) - pending:]
    for entry in cut:
        entry["status"] = "pending"
        (root / entry["file"]).unlink()
    (root / "index.json").write_text(json.dumps(index, indent=1))
    return [e["id"] for e in cut]


@pytest.mark.parametrize("pending", [2, 6])
def test_campaign_cut_short_is_labelled_with_its_resume_command(
        campaign: Callable[[str], Path], pending: int) -> None:
    root = campaign("basic")
    ids = _cut_short(root, pending)
    r = tb("report", root)
    assert r.returncode == 0, r.stderr
    assert "incomplete" in r.stderr and f"tunbench run --resume {root}" in r.stderr
    assert all(i in r.stderr for i in ids)
    page = (root / "report" / "index.html").read_text()
    assert "Incomplete campaign" in page and f"tunbench run --resume {root}" in page
    assert all(i in page for i in ids)
    assert "Tunnels: native, vxlan." in page and "Workloads: stream." in page
    c = data.load(root)
    assert c.folder.incomplete and c.pending == ids


# -- the page's layout in Chromium -----------------------------------------------------------

@pytest.mark.parametrize("name", ["idle", "loss", "srv6-gateways", "cores"])
def test_report_has_no_sideways_scroll_at_1400_and_390(
        built: Callable[[str], build.Report], browser: Callable, name: str) -> None:
    rep = built(name)
    for width, mobile in ((1400, False), (390, True)):
        load = browser(rep.html, width=width, mobile=mobile)
        assert load.console_errors == [] and load.requests == []
        assert 0 < load.scroll_width <= load.client_width, (width, load.scroll_width)
    page = rep.html.read_text()
    assert "cpu_busy_max</" not in page and " us<" not in page and "(us)" not in page


def test_every_recorded_metric_has_a_display_name_and_unit() -> None:
    """Named from each metric's record (base + dims, as the reader upgrades v1 files)."""
    from tunbench.report import metrics
    from tunbench.results import reader
    from tunbench.results.model import metric_records
    seen = {}
    for root in CAMPAIGNS.iterdir():
        for doc in reader.read_campaign(root).cases:
            seen.update(metric_records(doc))
    assert len(seen) > 40
    for name, rec in seen.items():
        assert "_" not in metrics.display_name(name, rec), name
        assert metrics.unit_label(name, rec.unit, rec) not in ("us", "%"), (name, rec.unit)
    assert metrics.unit_label("cpu_busy", "%") == "% of all cores"
    assert metrics.unit_label("lat_p50_us_at_ndr_361", "us", seen["lat_p50_us_at_ndr_361"]) \
        == "µs"


def test_cpu_whiskers_stay_within_what_is_possible() -> None:
    from tunbench.report import figures
    c = data.load(CAMPAIGNS / "idle")
    rows = [r for r in c.rows if r.metric.startswith("cpu_busy")]
    assert any(r.stats.ci95_high > 100 for r in rows), "fixture has a CI past 100%"
    for r in rows:
        lo, hi = figures._err(r.stats, figures._ceiling(c, r.metric, r.unit))
        assert r.stats.mean + hi <= 100 + 1e-9 and r.stats.mean - lo >= 0
