"""Join a cgroup, then become the program (exec; same PID).

Used as `python -S cgjoin.py PROCS_FILE -- ARGV...` (testbed/sitecores.py): it writes its own
PID to PROCS_FILE (a cgroup's `cgroup.procs`) and execs ARGV, so the program and every thread
and child it makes are in the cgroup from their first instruction. Run as a file (no package
import, no site): it costs a few ms. Inside `ip netns exec`, which remounts /sys, PROCS_FILE
is reached through /proc/<tunbench's PID>/root (the orchestrator's view of the mounts).
Standard library only, on purpose.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: cgjoin.py PROCS_FILE -- ARGV...\n")
        return 2
    procs, cmd = argv[0], argv[2:]
    try:
        with open(procs, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    except OSError as exc:
        sys.stderr.write(f"cgjoin: cannot join {procs}: {exc}\n")
        return 126
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        sys.stderr.write(f"cgjoin: cannot run {cmd[0]}: {exc}\n")
        return 127
    return 0   # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
