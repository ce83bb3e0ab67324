"""Test tiers: unit/ (no root), netns/ (root: real namespaces and traffic), vmlab (full kernel).

Tests that cannot run here are skipped with the specific reason, and pytest's -ra summary lists
every skip with it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import physics
import sigterm_teardown

DATA = Path(__file__).parent / "data"
# Campaigns run by tests are not recorded in the user's results store; the store's own tests
# name a temporary one (--db or TUNBENCH_DB).
os.environ.setdefault("TUNBENCH_DB", "off")


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces (run make test as root)"
    if not shutil.which("ip"):
        return "iproute2 is not installed (apt-get install iproute2)"
    if not os.path.exists("/proc/self/ns/net"):
        return "kernel without network namespaces"
    return None


# make test's phases (scripts/test_phases.py): "pure" keeps the pure tiers (tests/unit,
# tests/report) that may share the cores with each other (pytest-xdist); "vm" the VM lab tiers
# and "remote" the sshd-hosts tier (correctness only: they run beside the pure tiers);
# "beside" the netns tests marked `beside` (correctness tests that look only at their own
# run's objects and judge no figure: they run beside the pure tiers too); "live"
# keeps the rest (tests/netns, where the physics tests are) plus the pure-tier tests marked
# `serial` (they time something, or check that nothing appeared on the host, which a test
# running beside them would falsify). A comma list keeps several ("live,beside,remote,vm":
# make test-repeat). Unset: everything.
PHASE_ENV = "TUNBENCH_TEST_PHASE"
PHASE_LIST_ENV = "TUNBENCH_TEST_PHASE_LIST"   # a file: each test's phase written there
PURE_TIERS = ("unit", "report")
VM_TIERS = ("vmlab", "vmlab_bridge", "vmlab_sites")   # vmlab: the guest side


def _tier(item: pytest.Item) -> str:
    return Path(str(item.path)).relative_to(Path(__file__).parent).parts[0]


def phase_of(item: pytest.Item) -> str:
    tier = _tier(item)
    if tier in PURE_TIERS and item.get_closest_marker("serial") is None:
        return "pure"
    if tier in VM_TIERS:
        return "vm"
    if tier == "remote":
        return "remote"
    if (tier == "netns" and item.get_closest_marker("beside") is not None
            and item.get_closest_marker("physics") is None):
        return "beside"
    return "live"


def pytest_configure(config: pytest.Config) -> None:
    sigterm_teardown.install()   # a killed session tears its fixtures down like Ctrl-C
    config.addinivalue_line("markers", "serial: a pure-tier test make test runs alone, in its "
                                       "live phase (it times something or watches the host)")
    config.addinivalue_line("markers", "beside: a netns correctness test make test runs beside "
                                       "the pure, VM lab and remote tiers: it looks only at its "
                                       "own run's namespaces, links and processes (never every "
                                       "namespace of ours, never `tunbench cleanup`), asserts "
                                       "no figure but that traffic flowed, and watches no CPU")
    config.addinivalue_line("markers", "correctness: a live test that asserts what the system "
                                       "did, never a rate, latency or ratio bound")
    config.addinivalue_line("markers", "physics(*figures): a live test that compares figures "
                                       "with a model within their recorded spread "
                                       "(tests/physics.py, tests/data/physics/)")


KINDS = ("correctness", "physics")


def is_live(item: pytest.Item) -> bool:
    """Live tiers: everything outside tests/unit and tests/report."""
    return _tier(item) not in PURE_TIERS


def test_kind_problem(item: pytest.Item) -> str | None:
    """Why a live test cannot run as it is marked (None when it can): it must say whether it is
    a correctness or a physics test, and a physics test's figures need their recorded spread."""
    if not is_live(item):
        return None
    # the test's own marker, else its class's or module's
    own = {m.name for m in getattr(item, "own_markers", []) if m.name in KINDS}
    kinds = own or {m.name for m in item.iter_markers() if m.name in KINDS}
    if len(kinds) != 1:
        return (f"{item.nodeid} must be marked either @pytest.mark.correctness or "
                f"@pytest.mark.physics(FIGURE, ...) (tests/physics.py says which is which)")
    marker = item.get_closest_marker("physics")
    if "physics" not in kinds or marker is None:
        return None
    if not marker.args:
        return f"{item.nodeid}: @pytest.mark.physics needs the figures it checks"
    for figure in marker.args:
        why = physics.problem(figure)
        if why:
            return why
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    why = test_kind_problem(item)
    if why:
        pytest.fail(why, pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _netns_unavailable()
    for item in items:
        if "netns" in str(item.path.parent.name) or item.get_closest_marker("netns"):
            item.add_marker(pytest.mark.netns)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    physics.forget({f for i in items for m in i.iter_markers("physics") for f in m.args})
    listing = os.environ.get(PHASE_LIST_ENV)
    if listing:   # test_test_phases: every collected test and the phase make test gives it
        Path(listing).write_text("".join(f"{i.nodeid}\t{phase_of(i)}\n" for i in items))
    phase = os.environ.get(PHASE_ENV)
    if phase:
        wanted = set(phase.split(","))
        keep = [i for i in items if phase_of(i) in wanted]
        dropped = [i for i in items if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def data_dir() -> Path:
    return DATA
