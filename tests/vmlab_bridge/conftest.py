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
from tunbench.vmlab.tier import GuestTestResult, run_tier_full

ROOT = Path(__file__).resolve().parents[2]
GUEST_DIR = "tests/vmlab"
ENABLE_ENV = "TUNBENCH_VMLAB"  # "0": skip the VM tier
# seconds for the whole guest pytest run: a hang's limit, not a speed target (about 8 min
# here; 15+ min when the host is loaded beside make test)
TIMEOUT_ENV = "TUNBENCH_VMLAB_TIMEOUT"
TIMEOUT_DEFAULT = "1800"
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
        self.boot_seconds: float | None = None  # qemu start to "guest ready"
        self.run_seconds = 0.0  # qemu start to exit (boot + every guest test)


# The tier's outcome for the terminal summary (one session, one boot).
_OUTCOME: list[TierOutcome] = []


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
    timeout = float(os.environ.get(TIMEOUT_ENV, TIMEOUT_DEFAULT))
    try:
        tier = run_tier_full(GUEST_DIR, timeout, select=None if complete else selected)
    except GuestJobError as exc:
        return TierOutcome(fail=f"{exc.one_line()}\n{exc.output}")
    except TunbenchError as exc:
        return TierOutcome(skip=f"VM lab unavailable: {exc.one_line()}")
    outcome = TierOutcome({r.nodeid: r for r in tier.results}, complete=complete,
                          listed=all_ids)
    outcome.boot_seconds, outcome.run_seconds = tier.run.ready_seconds, tier.run.seconds
    _OUTCOME.append(outcome)
    return outcome


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the VM tier's time went: the host sees one long fixture setup, so the boot and
    the slowest guest tests (their call time, from the guest's JUnit XML) are printed here."""
    if not _OUTCOME:
        return
    o = _OUTCOME[0]
    boot = f"{o.boot_seconds:.0f} s" if o.boot_seconds is not None else "unknown"
    tests = sorted(o.results.values(), key=lambda r: -r.duration)
    terminalreporter.write_sep("-", f"VM lab tier: {o.run_seconds:.0f} s in the guest "
                                    f"(boot {boot}, {len(tests)} guest tests, "
                                    f"{sum(r.duration for r in tests):.0f} s in their calls)")
    for r in tests[:10]:
        terminalreporter.write_line(f"{r.duration:7.1f}s  {r.outcome:7}  "
                                    f"{r.nodeid.removeprefix(GUEST_DIR + '/')}")
