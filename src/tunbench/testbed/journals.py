"""Replay of crashed runs' journals (`tunbench cleanup`).

A journal may hold any ledger kind, and each kind's undo handler is registered by the module
that makes it (testbed/ledger.py): this module imports every such owner, so a replay finds a
handler for every kind a run can have written. A new owner of a kind is added here (a unit
test, tests/unit/test_import_layers.py, names any `register_undo` kind missing after import).
"""

from __future__ import annotations

from ..tbtun import loader
from . import bpfdrop, remote, sitecores
from .ledger import replay_journals

# The owners of the kinds the ledger does not know itself: loader (bpffs, bpfpins,
# tbtun-tc), bpfdrop (bpfdrop), remote (remote, remote_agent), sitecores (cgroup).
OWNERS = (loader, bpfdrop, remote, sitecores)


def replay(only: str | None = None) -> list[str]:
    """Undo what crashed runs journaled (`only`: that run's journal alone); what was undone."""
    return replay_journals(only)
