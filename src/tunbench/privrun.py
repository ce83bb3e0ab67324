"""Run a daemon with private runtime directories, then become it (exec; same PID).

Used as `ip netns exec NS python -m tunbench.privrun --tmpfs /run --mkdir /run/sshd -- ARGV`.
`ip netns exec` already gives the command its own mount namespace with slave propagation, so
a tmpfs mounted here is seen by this daemon only and never by the host or the other site.
Daemons whose pid/socket paths are compiled in (charon, sshd) can then run once per site.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import proc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tunbench.privrun")
    p.add_argument("--tmpfs", action="append", default=[], help="mount a private tmpfs here")
    p.add_argument("--mkdir", action="append", default=[], help="create this directory")
    p.add_argument("--keep", action="append", default=[],
                   help="a directory under a --tmpfs path that stays visible (bind-mounted "
                        "back on top of the tmpfs), e.g. the case's workdir under /run")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given after --")
    if os.getpid() == 1 or not os.path.exists("/proc/self/ns/mnt"):
        p.error("refusing to mount outside a private mount namespace")
    # Hold the kept directories open: their /proc/self/fd links still reach them once the
    # tmpfs hides their path, so they can be bind-mounted back at the same place.
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in args.keep]
    for path in args.tmpfs:
        proc.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "tunbench", path],
                 timeout=10)
    for path, fd in kept:
        os.makedirs(path, mode=0o700, exist_ok=True)
        proc.run(["mount", "--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", path], timeout=10)
        os.close(fd)
    for path in args.mkdir:
        os.makedirs(path, mode=0o755, exist_ok=True)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
