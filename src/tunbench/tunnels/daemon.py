"""Daemons that implement a datapath (wireguard-go, charon, ovs-vswitchd, sshd, ...).

Shared by every kind that needs one: start it in a site with private runtime paths, register
its PID in the ledger, await readiness with a timeout (a check, never a sleep), and on failure
raise an error carrying the daemon's last log lines. Stopping is the ledger's job.
"""

from __future__ import annotations

from collections.abc import Callable

from ..proc import Process, wait_ready
from ..testbed.base import PrivateMounts, Site, Testbed


def start(tb: Testbed, site: Site, argv: list[str], label: str, *,
          ready: Callable[[], bool] | None = None, ready_text: str | None = None,
          timeout: float = 15.0, env: dict[str, str] | None = None,
          private_run: tuple[str, ...] = (), mkdirs: tuple[str, ...] = (),
          keep: tuple[str, ...] = (), grace: float = 3.0) -> Process:
    """Start a daemon in `site` and return once it is ready (or raise with its log tail).

    `ready` is a check called until it returns True; `ready_text` waits for a line in the log.
    `private_run` lists directories that get a private tmpfs (e.g. ("/run",)); the case
    directory on the site's host stays visible (Testbed.spawn), `keep` adds others.
    """
    private = PrivateMounts(private_run, mkdirs, keep) if private_run else None
    p = tb.spawn(site, argv, f"{label}-{site.name}", env=env, grace=grace, private=private)
    wait_ready(p, ready=ready, ready_text=ready_text, timeout=timeout)
    return p
