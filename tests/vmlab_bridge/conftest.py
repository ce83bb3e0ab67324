"""Host side of the VM lab tier: boot the VM once per session, report each guest test here.

Guest tests (tests/vmlab) are listed on the host with `pytest --collect-only` (nothing runs),
so each becomes one parametrized host test `test_guest[<file>::<test>]`. The first of them to
run boots the VM (session fixture) and runs exactly the selected guest tests inside; each host
test then passes, fails or skips as its guest twin did, with the guest's output.

If the lab cannot be built or booted here (missing qemu, mirror unreachable, disk full, not
root), the tests skip with that one-line reason. TUNBENCH_VMLAB=0 skips the tier.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

from tunbench import proc
from tunbench.errors import TunbenchError
from tunbench.vmlab.qemu import GuestJobError
from tunbench.vmlab.tier import GuestTestResult, run_tier

ROOT = Path(__file__).resolve().parents[2]
GUEST_DIR = "tests/vmlab"
ENABLE_ENV = "TUNBENCH_VMLAB"  # "0": skip the VM tier
TIMEOUT_ENV = "TUNBENCH_VMLAB_TIMEOUT"  # seconds for the whole guest pytest run (default 900)
PARAM = "guest_nodeid"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vmlab: runs in the full-kernel VM lab (qemu)")


@functools.lru_cache(maxsize=1)
def list_guest_tests() -> tuple[list[str], str]:
    """Node ids of the guest tests as pytest collects them (on the host, nothing is run)."""
    pythonpath = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH"))
                                 if p)
    r = proc.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                  "no:cacheprovider", "-p", "no:warnings", f"--rootdir={ROOT}", GUEST_DIR],
                 cwd=ROOT, check=False, timeout=120,
                 env={"TUNBENCH_VMLAB_COLLECT": "1", "PYTHONPATH": pythonpath})
    ids = []
    for line in r.stdout.splitlines():  # node ids come first, up to the first blank line
        if not line.strip():
            break
        if line.startswith(GUEST_DIR + "/") and "::" in line and " " not in line.split("[")[0]:
            ids.append(line.strip())
    if r.returncode not in (0, 5):
        last = (r.stdout.strip().splitlines() or r.stderr.strip().splitlines() or [""])[-1]
        return ids, f"listing the guest tests failed (exit {r.returncode}): {last}"
    return ids, ""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if PARAM not in metafunc.fixturenames:
        return
    ids, error = list_guest_tests()
    if error:
        ids = [f"<listing error> {error}"]
    metafunc.parametrize(PARAM, ids, ids=[i.removeprefix(GUEST_DIR + "/") for i in ids])


class TierOutcome:
    """Results of the one boot, or why there are none (skip or fail reason)."""

    def __init__(self, results: dict[str, GuestTestResult] | None = None,
                 skip: str = "", fail: str = "", complete: bool = False,
                 listed: list[str] | None = None) -> None:
        self.results = results or {}
        self.listed = set(listed or [])
        self.skip = skip
        self.fail = fail
        self.complete = complete  # every guest test ran (no -k / node selection)


@pytest.fixture(scope="session")
def vmlab_tier(request: pytest.FixtureRequest) -> TierOutcome:
    if os.environ.get(ENABLE_ENV) == "0":
        return TierOutcome(skip=f"VM lab tier disabled ({ENABLE_ENV}=0)")
    selected = sorted({item.callspec.params[PARAM] for item in request.session.items
                       if hasattr(item, "callspec") and PARAM in item.callspec.params})
    selected = [s for s in selected if not s.startswith("<listing error>")]
    if not selected:
        return TierOutcome(skip="no guest test selected: nothing to boot for")
    all_ids = list(list_guest_tests()[0])
    complete = set(selected) == set(all_ids)
    timeout = float(os.environ.get(TIMEOUT_ENV, "900"))
    try:
        results = run_tier(GUEST_DIR, timeout, select=None if complete else selected)
    except GuestJobError as exc:
        return TierOutcome(fail=f"{exc.one_line()}\n{exc.output}")
    except TunbenchError as exc:
        return TierOutcome(skip=f"VM lab unavailable: {exc.one_line()}")
    return TierOutcome({r.nodeid: r for r in results}, complete=complete, listed=all_ids)
