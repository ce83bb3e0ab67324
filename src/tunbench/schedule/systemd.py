"""A schedule as a systemd timer + oneshot service: tb-schedule-<name>.timer/.service.

The timer fires every `every` (OnUnitActiveSec) with systemd's own random slip
(RandomizedDelaySec); the service runs `tunbench schedule run NAME --no-slip`, which checks
the window, days and --until itself (the same code as --foreground) and takes the schedule's
lock. A oneshot service is never started again while it runs, so systemd alone already
prevents overlap; the lock also covers a foreground loop or a by-hand `schedule run` of the
same schedule. The service gets the schedules folder and, when set (a source checkout), the
PYTHONPATH of the `schedule add` that wrote it, so it runs the same tunbench.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from .. import proc
from ..errors import UnavailableError
from .spec import Schedule, schedules_dir

PREFIX = "tb-schedule-"
UNIT_DIR = Path("/etc/systemd/system")


def unit_names(name: str) -> tuple[str, str]:
    return f"{PREFIX}{name}.timer", f"{PREFIX}{name}.service"


def systemd_missing() -> str | None:
    """Why systemd cannot run timers here (sd_booted(): /run/systemd/system exists), or None."""
    if os.path.isdir("/run/systemd/system"):
        return None
    try:
        init = Path("/proc/1/comm").read_text().strip()
    except OSError:
        init = "?"
    return f"systemd is not running on this host (PID 1 is {init!r})"


def _sec(x: float) -> str:
    return f"{int(x)}s" if x == int(x) else f"{x:g}s"


def timer_unit(s: Schedule) -> str:
    lines = ["[Unit]", f"Description=tunbench schedule {s.name} ({s.describe()})", "",
             "[Timer]", "OnActiveSec=1s", f"OnUnitActiveSec={_sec(s.every)}",
             "AccuracySec=1s"]
    if s.slip:
        lines.append(f"RandomizedDelaySec={_sec(s.slip)}")
    lines += [f"Unit={unit_names(s.name)[1]}", "", "[Install]", "WantedBy=timers.target", ""]
    return "\n".join(lines)


def service_unit(s: Schedule, python: str = sys.executable) -> str:
    env = [f"TUNBENCH_SCHEDULE_DIR={schedules_dir()}"]
    if os.environ.get("PYTHONPATH"):   # a source checkout: the timer runs the code that added it
        env.append(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    argv = [python, "-m", "tunbench", "schedule", "run", s.name, "--no-slip"]
    return "\n".join([
        "[Unit]", f"Description=tunbench campaign of schedule {s.name}",
        "After=network.target", "", "[Service]", "Type=oneshot",
        *(f"Environment={shlex.quote(e)}" for e in env),
        f"WorkingDirectory={Path(s.results).resolve()}",
        "ExecStart=" + " ".join(shlex.quote(a) for a in argv), ""])


def write_units(s: Schedule, unit_dir: Path = UNIT_DIR) -> list[Path]:
    unit_dir.mkdir(parents=True, exist_ok=True)
    timer, service = unit_names(s.name)
    out = [unit_dir / timer, unit_dir / service]
    out[0].write_text(timer_unit(s))
    out[1].write_text(service_unit(s))
    return out


def install(s: Schedule) -> list[Path]:
    why = systemd_missing()
    if why:
        raise UnavailableError(f"cannot install a systemd timer: {why}",
                               f"run it in the foreground instead: tunbench schedule add "
                               f"{s.name} --foreground ...")
    paths = write_units(s)
    proc.run(["systemctl", "daemon-reload"])
    proc.run(["systemctl", "enable", "--now", unit_names(s.name)[0]])
    return paths


def remove(name: str) -> list[str]:
    """Stop and delete the units of a schedule, if there are any; returns what was removed."""
    timer, service = unit_names(name)
    done = []
    present = [UNIT_DIR / u for u in (timer, service) if (UNIT_DIR / u).exists()]
    if present and not systemd_missing():
        proc.run(["systemctl", "disable", "--now", timer], check=False)
    for p in present:
        p.unlink()
        done.append(str(p))
    if present and not systemd_missing():
        proc.run(["systemctl", "daemon-reload"], check=False)
    return done


def timer_state(name: str) -> str:
    if not (UNIT_DIR / unit_names(name)[0]).exists():
        return "no timer (foreground)"
    if systemd_missing():
        return "timer installed, systemd not running"
    r = proc.run(["systemctl", "show", "-p", "ActiveState,NextElapseUSecRealtime",
                  unit_names(name)[0]], check=False)
    return " ".join(r.stdout.split()) or "unknown"
