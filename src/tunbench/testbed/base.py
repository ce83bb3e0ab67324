"""The two sites of a testbed and the testbed itself, as seen by tunnels and workloads.

A tunnel driver or workload never asks how a site is reached: it calls `site.run(argv)` or
`testbed.spawn(site, argv)`. The local testbed reaches a site with `ip netns exec`; a remote
testbed would reach it over SSH behind the same two calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from .ledger import Ledger


@dataclass(frozen=True)
class Site:
    name: str            # "a" (client side) or "b" (server side)
    netns: str | None    # network namespace, None for the root namespace of a host
    underlay_if: str     # the interface facing the other site
    underlay4: str       # underlay IPv4 address of this site (no prefix length)
    underlay6: str       # underlay IPv6 address of this site
    host: str | None = None   # the machine this site runs on; None: this host (namespaces)

    def run(self, argv: list[str], **kw: Any) -> proc.Completed:
        return proc.run(argv, netns=self.netns, **kw)


@dataclass
class Testbed:
    __test__ = False  # not a pytest test class
    kind: str
    run_id: str
    a: Site
    b: Site
    underlay_mtu: int
    ledger: Ledger
    workdir: Path                 # private (0700) directory for this case: logs, keys, configs
    rate: str | None = None       # underlay shaping (tbf), e.g. "500mbit"
    shares_cpus: bool = True      # both sites run on the same CPUs (true for namespaces)
    prefix4: int = 24
    prefix6: int = 64
    notes: dict[str, Any] = field(default_factory=dict)

    def sites(self) -> tuple[Site, Site]:
        return self.a, self.b

    def other(self, site: Site) -> Site:
        return self.b if site is self.a else self.a

    def spawn(self, site: Site, argv: list[str], label: str, *,
              env: dict[str, str] | None = None, grace: float = 3.0,
              split_stderr: bool = False) -> proc.Process:
        """Start a process in a site, logging to the workdir, registered in the ledger."""
        log_path = self.workdir / f"{label}.log"
        p = proc.spawn(argv, netns=site.netns, log_path=log_path, env=env, label=label,
                       split_stderr=split_stderr)
        self.ledger.process(p, grace=grace)
        return p

    def write_secret(self, name: str, data: str | bytes) -> Path:
        """Write a secret (key, PSK) mode 0600 in the private workdir; removed at teardown."""
        path = self.workdir / name
        raw = data.encode() if isinstance(data, str) else data
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        self.ledger.path(path)
        return path

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "run_id": self.run_id, "underlay_mtu": self.underlay_mtu,
            "rate": self.rate, "shares_cpus": self.shares_cpus,
            "sites": {s.name: {"netns": s.netns, "underlay_if": s.underlay_if,
                               "underlay4": s.underlay4, "underlay6": s.underlay6}
                      for s in self.sites()},
            **self.notes,
        }
