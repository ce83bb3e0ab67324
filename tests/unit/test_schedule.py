"""Schedule definitions: parsing (bad input is one line, exit 2, nothing saved), the window
and days rule, the systemd units (checked by systemd-analyze verify where it runs), and the
refusal to install a timer where systemd is not running. The timer firing under a real
systemd (PID 1 of a container): tests/remote/test_schedule_systemd.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from tunbench.errors import SpecError
from tunbench.schedule import spec, systemd

TB = [sys.executable, "-m", "tunbench"]


def test_parsing() -> None:
    assert spec.parse_duration("3h", "--every") == 10800
    assert spec.parse_duration("1.5m", "--slip") == 90
    assert spec.parse_days("mon-fri") == ["mon", "tue", "wed", "thu", "fri"]
    assert spec.parse_days("fri-mon") == ["mon", "fri", "sat", "sun"]
    assert spec.parse_days("sat,sun") == ["sat", "sun"]
    assert spec.parse_window("8:00-20:00") == ("08:00", "20:00")
    for bad in (lambda: spec.parse_duration("3 hours", "--every"),
                lambda: spec.parse_days("mon-fry"), lambda: spec.parse_window("8-20"),
                lambda: spec.parse_window("25:00-26:00"), lambda: spec.parse_until("soon"),
                lambda: spec.check_name("Bad Name")):
        with pytest.raises(SpecError):
            bad()
    day = datetime(2026, 11, 2)   # a Monday
    assert spec.parse_until("2026-11-02") == datetime(2026, 11, 3).timestamp()
    assert spec.parse_until("2026-11-02T18:00") == day.replace(hour=18).timestamp()


def test_window_and_days() -> None:
    s = spec.Schedule("x", 3600, [], "/tmp", ("08:00", "20:00"), spec.parse_days("mon-fri"))
    mon = datetime(2026, 11, 2)
    assert s.allows(mon.replace(hour=8)) and s.allows(mon.replace(hour=19, minute=59))
    assert not s.allows(mon.replace(hour=20)) and not s.allows(mon.replace(hour=7))
    assert not s.allows(datetime(2026, 11, 7, 12))      # Saturday
    night = spec.Schedule("n", 3600, [], "/tmp", ("22:00", "06:00"))
    assert night.allows(mon.replace(hour=23)) and night.allows(mon.replace(hour=5))
    assert not night.allows(mon.replace(hour=12))


def test_units(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNBENCH_SCHEDULE_DIR", str(tmp_path / "sched"))
    monkeypatch.setenv("PYTHONPATH", "/opt/tb checkout/src")
    (tmp_path / "res").mkdir()
    s = spec.Schedule("nightly", 10800, ["--tunnels", "native"], str(tmp_path / "res"),
                      ("08:00", "20:00"), spec.parse_days("mon-fri"), None, 600)
    timer, service = systemd.write_units(s, tmp_path / "units")
    assert timer.name == "tb-schedule-nightly.timer"
    t = timer.read_text().splitlines()
    assert "OnUnitActiveSec=10800s" in t and "RandomizedDelaySec=600s" in t
    assert "Unit=tb-schedule-nightly.service" in t and "WantedBy=timers.target" in t
    sv = service.read_text().splitlines()
    assert "Type=oneshot" in sv
    assert f"ExecStart={sys.executable} -m tunbench schedule run nightly --no-slip" in sv
    assert f"Environment=TUNBENCH_SCHEDULE_DIR={tmp_path / 'sched'}" in sv
    assert "Environment='PYTHONPATH=/opt/tb checkout/src'" in sv   # the code that added it
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed (apt-get install systemd): units not "
                    "verified")
    ok = subprocess.run(["systemd-analyze", "verify", timer.name, service.name],
                        cwd=timer.parent, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    broken = tmp_path / "units" / "tb-schedule-broken.timer"
    broken.write_text(timer.read_text().replace("OnUnitActiveSec=10800s",
                                                "OnUnitActiveSec=often"))
    bad = subprocess.run(["systemd-analyze", "verify", broken.name], cwd=broken.parent,
                         capture_output=True, text=True, timeout=60)
    assert "often" in bad.stderr    # verify really reads what tunbench writes


def _add(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TUNBENCH_SCHEDULE_DIR": str(tmp_path / "sched")}
    return subprocess.run([*TB, "schedule", "add", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path)


@pytest.mark.parametrize(("args", "says"), [
    (["s1", "--every", "3 h", "--", "--tunnels", "native"], "--every"),
    (["s1", "--every", "10s", "--", "--tunnels", "native"], "minimum"),
    (["s1", "--every", "1h", "--days", "someday", "--", "--tunnels", "native"], "--days"),
    (["s1", "--every", "1h", "--", "--out", "x"], "--out"),
    (["s1", "--every", "1h", "--", "--duration", "fast"], "invalid run options"),
    (["s1", "--every", "1h", "--", "--tunnels", "nosuchkind"], "nosuchkind"),
])
def test_bad_schedule_is_one_line_and_saves_nothing(tmp_path: Path, args: list[str],
                                                    says: str) -> None:
    r = _add(tmp_path, *args)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert not (tmp_path / "sched").exists()


def test_no_systemd_refuses_the_timer_and_points_at_foreground(tmp_path: Path) -> None:
    why = systemd.systemd_missing()
    if why is None:
        pytest.skip("systemd runs here: the refusal path is not reachable")
    r = _add(tmp_path, "s1", "--every", "1h", "--", "--tunnels", "native")
    assert r.returncode == 2 and "--foreground" in r.stderr and "systemd is not running" \
        in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert not (tmp_path / "sched").exists()
    assert not Path("/etc/systemd/system/tb-schedule-s1.timer").exists()

