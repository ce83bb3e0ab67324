"""Daemons that implement a datapath (wireguard-go, charon, ovs-vswitchd, sshd, ...).

Shared by every kind that needs one: start it in a site with private runtime paths, register
its PID in the ledger, await readiness with a timeout (a check, never a sleep), and on failure
raise an error carrying the daemon's last log lines. Stopping is the ledger's job.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..proc import Process, wait_ready
from ..testbed.base import Site, Testbed


def private_run_argv(argv: list[str], tmpfs: tuple[str, ...] = ("/run",),
                     mkdirs: tuple[str, ...] = (), keep: tuple[str, ...] = ()) -> list[str]:
    """argv that runs `argv` with private tmpfs mounts (see tunbench.privrun); `keep` lists
    directories under them that stay visible (e.g. the case's workdir in /run/tunbench)."""
    out = [sys.executable, "-m", "tunbench.privrun"]
    for t in tmpfs:
        out += ["--tmpfs", t]
    for d in mkdirs:
        out += ["--mkdir", d]
    for k in keep:
        out += ["--keep", k]
    return out + ["--", *argv]


def start(tb: Testbed, site: Site, argv: list[str], label: str, *,
          ready: Callable[[], bool] | None = None, ready_text: str | None = None,
          timeout: float = 15.0, env: dict[str, str] | None = None,
          private_run: tuple[str, ...] = (), mkdirs: tuple[str, ...] = (),
          keep: tuple[str, ...] = (), grace: float = 3.0) -> Process:
    """Start a daemon in `site` and return once it is ready (or raise with its log tail).

    `ready` is a check called until it returns True; `ready_text` waits for a line in the log.
    `private_run` lists directories that get a private tmpfs (e.g. ("/run",)).
    """
    if private_run:
        argv = private_run_argv(argv, private_run, mkdirs, keep)
    p = tb.spawn(site, argv, f"{label}-{site.name}", env=env, grace=grace)
    wait_ready(p, ready=ready, ready_text=ready_text, timeout=timeout)
    return p
