"""Runs INSIDE the VM lab guest (Debian's python3), started by the guest init.

Reads the job the host wrote (results share, job.json), loads kernel modules, picks the
PYTHONPATH (host virtualenv site-packages over 9p if they import here, else Debian's own
packages), runs the command with a timeout and writes status.json next to the job.
Only the standard library and tunbench.proc are used: the host's site-packages may be unusable.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

SRC = "/mnt/tb/src"
sys.path.insert(0, SRC)

from tunbench import proc  # noqa: E402
from tunbench.errors import CommandFailed  # noqa: E402

# What the host site-packages must provide for tunbench to run in the guest.
PROBE = "import pyroute2, pytest"


def say(msg: str) -> None:
    print(f"tunbench-vmlab: {msg}", flush=True)


def load_modules(names: list[str]) -> tuple[list[str], list[str]]:
    """Load all in one modprobe (one process start is slow under TCG); report by /sys/module."""
    if names:
        proc.run(["modprobe", "-a", *names], timeout=120, check=False)
    loaded = [n for n in names if Path(f"/sys/module/{n.replace('-', '_')}").exists()]
    return loaded, [n for n in names if n not in loaded]


def pick_pythonpath(site: str | None) -> tuple[str, str]:
    """(PYTHONPATH, why): host site-packages if they import in this Python, else src only."""
    if site and Path(site).is_dir() and any(Path(site).iterdir()):
        path = f"{SRC}:{site}"
        r = proc.run([sys.executable, "-c", PROBE], env={"PYTHONPATH": path}, timeout=120,
                     check=False)
        if r.ok:
            return path, "host site-packages"
        say(f"host site-packages unusable here ({(r.stderr.strip().splitlines() or [''])[-1]});"
            " falling back to Debian packages")
    return SRC, "debian packages"


def main(job_path: str) -> int:
    t0 = time.monotonic()
    job = json.loads(Path(job_path).read_text())
    results = Path(job_path).parent
    loaded, failed = load_modules(job.get("modules", []))
    t_modules = time.monotonic()
    say(f"modules loaded: {len(loaded)}; not available: {' '.join(failed) or 'none'}")
    pythonpath, why = pick_pythonpath(job.get("site"))
    t_probe = time.monotonic()
    say(f"PYTHONPATH from {why}")
    env = {"PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1", "TUNBENCH_IN_VMLAB": "1",
           "PYTHONUNBUFFERED": "1", **job.get("env", {})}
    status: dict[str, object] = {"modules_loaded": loaded, "modules_failed": failed,
                                 "pythonpath": pythonpath, "python_source": why,
                                 "kernel": platform.release(), "python": platform.python_version()}
    log = results / "job.log"
    say(f"running: {' '.join(job['command'])}")
    p = proc.spawn(job["command"], log_path=log, env=env, cwd=job.get("cwd", "/mnt/tb"),
                   label="guest job")
    try:
        rc: int | None = p.wait(timeout=float(job.get("timeout", 600)))
    except CommandFailed:
        rc = None
        status["timed_out"] = True
        say("job timed out; stopping it")
    finally:
        p.stop()
    status["exit_code"] = rc
    status["seconds"] = round(time.monotonic() - t0, 2)
    status["phase_seconds"] = {"modules": round(t_modules - t0, 2),
                               "pythonpath_probe": round(t_probe - t_modules, 2),
                               "command": round(time.monotonic() - t_probe, 2)}
    (results / "status.json").write_text(json.dumps(status, indent=2) + "\n")
    say(f"job exit code {rc} after {status['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
