"""A real two-namespace testbed for root tests (conftest's `testbed` fixture, and tests that
need several at once)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tunbench import tunnels
from tunbench.capabilities import root_missing
from tunbench.testbed import local
from tunbench.testbed.base import Testbed
from tunbench.workloads import loadgen


def until(what: str, done: Callable[[], object], timeout: float = 10.0) -> None:
    """Poll `done` until it holds (a busy host sends, counts, prints and captures late: a
    fixed sleep or a single reading was a guess); fails with `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            pytest.fail(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


def agg_unavailable() -> str | None:
    """Why the agg tests cannot run here (root, TUN and tbagg, the load generator), or None."""
    if root_missing():
        return "needs root"
    drv = tunnels.get("agg")
    missing = drv.requirements(drv.default_params())
    if missing:
        return missing[0].one_line()
    return None if loadgen.find_binary() else f"tunbench-loadgen is not built ({loadgen.BUILD_FIX})"


@contextmanager
def fresh_testbed(mtu: int = 1500) -> Iterator[Testbed]:
    """A real two-namespace testbed with a run id no other is using (local.scratch): on exit
    its ledger undoes everything without error and no namespace of it is left, or it raises.
    Tests that need several at once enter it several times."""
    with local.scratch(mtu) as tb:
        yield tb
