"""One host test per guest test of tests/vmlab (see conftest.py for how)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vmlab, pytest.mark.correctness]


def test_guest(guest_nodeid: str, vmlab_tier) -> None:
    if guest_nodeid.startswith("<listing error>"):
        pytest.fail(guest_nodeid, pytrace=False)
    if vmlab_tier.skip:
        pytest.skip(vmlab_tier.skip)
    if vmlab_tier.fail:
        pytest.fail(vmlab_tier.fail, pytrace=False)
    result = vmlab_tier.results.get(guest_nodeid)
    if result is None:
        pytest.fail(f"the guest did not report {guest_nodeid}", pytrace=False)
    if result.outcome in ("failed", "error"):
        pytest.fail(f"[guest {result.outcome}] {result.message}\n{result.output}",
                    pytrace=False)
    if result.output:
        print(result.output)  # shown with -rA or -s
    if result.outcome == "skipped":
        pytest.skip(f"[guest] {result.message}")
    assert result.outcome == "passed", result.outcome


def test_guest_reported_nothing_unexpected(vmlab_tier) -> None:
    """Guest results with no host twin (e.g. parametrized differently in the guest)."""
    if vmlab_tier.skip:
        pytest.skip(vmlab_tier.skip)
    if vmlab_tier.fail or not vmlab_tier.complete:
        pytest.skip("no complete guest run to compare")
    extra = sorted(set(vmlab_tier.results) - vmlab_tier.listed)
    assert not extra, f"guest reported tests the host did not list: {extra}"
