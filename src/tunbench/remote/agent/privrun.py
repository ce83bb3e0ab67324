"""Private runtime directories for a daemon on a remote site (this file runs THERE).

The remote twin of tunbench.privrun: `unshare --mount --propagation slave` gives the daemon
its own mount namespace (on a namespace site `ip netns exec` does that), then this module
mounts a private tmpfs on each `--tmpfs` path, bind-mounts the `--keep` directories back, makes
the `--mkdir` ones and execs the daemon (same PID). Daemons whose pid/socket paths are compiled
in (charon's /run/charon.*, sshd's /run/sshd) can then run beside the host's own. Standard
library only: it runs from the agent's zipapp with `python3 -m tbagent.privrun`.
"""

from __future__ import annotations

import os
import subprocess
import sys


def _mount(argv: list[str]) -> None:
    r = subprocess.run(["mount", *argv], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=10, check=False)
    if r.returncode != 0:
        sys.stderr.write(f"tbagent.privrun: mount {' '.join(argv)}: {r.stderr.strip()}\n")
        sys.exit(126)


def main(argv: list[str]) -> int:
    tmpfs: list[str] = []
    mkdirs: list[str] = []
    keep: list[str] = []
    outer: list[str] = []    # the agent's mount namespace: the one never to mount in
    opts = {"--tmpfs": tmpfs, "--mkdir": mkdirs, "--keep": keep, "--outer": outer}
    while argv and argv[0] != "--":
        if argv[0] not in opts or len(argv) < 2:
            sys.stderr.write(f"tbagent.privrun: bad option {argv[0]!r}\n")
            return 2
        opts[argv[0]].append(argv[1])
        argv = argv[2:]
    cmd = argv[1:]
    if not cmd:
        sys.stderr.write("tbagent.privrun: no command given after --\n")
        return 2
    if not outer or os.readlink("/proc/self/ns/mnt") in outer:
        sys.stderr.write("tbagent.privrun: refusing to mount in the agent's mount namespace "
                         "(not started through unshare --mount)\n")
        return 2
    held = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    for path in tmpfs:
        _mount(["-t", "tmpfs", "-o", "mode=0755,size=64m", "tunbench", path])
    for path, fd in held:
        os.makedirs(path, mode=0o700, exist_ok=True)
        _mount(["--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", path])
        os.close(fd)
    for path in mkdirs:
        os.makedirs(path, mode=0o755, exist_ok=True)
    os.execvp(cmd[0], cmd)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
