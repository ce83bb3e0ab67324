"""A real two-namespace testbed for root tests (conftest's `testbed` fixture, and tests that
need several at once)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tunbench import tunnels
from tunbench.capabilities import root_missing
from tunbench.testbed import local, names, netlink
from tunbench.testbed.base import Testbed
from tunbench.testbed.ledger import Ledger
from tunbench.workloads import loadgen


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
    """A real two-namespace testbed with a run id no other is using; on exit its ledger undoes
    everything without error and no namespace of it is left. Tests that need several at once
    enter it several times."""
    taken = {n.split("-")[1] for n in netlink.list_netns() if names.is_ours_netns(n)}
    rid = names.new_run_id(taken)
    ledger = Ledger(rid)
    try:
        yield local.build(rid, ledger, mtu=mtu)
    finally:
        errors = ledger.close()
        left = [n for n in netlink.list_netns() if n.startswith(f"tb-{rid}-")]
        local.sweep(rid)
        assert not errors, errors
        assert not left, f"namespaces left behind: {left}"
