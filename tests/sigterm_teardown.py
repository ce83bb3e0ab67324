"""pytest plugin: SIGTERM or SIGHUP ends a test session the way Ctrl-C does, so every fixture
is torn down (namespaces, links, sshd "hosts", daemons: their ledgers close) before pytest
exits. Without it a CI timeout, a closed terminal or `kill` left a module's test hosts behind
(tb-<rid>-m, -h1, -h2, the root link tb<rid>m0 and two sshd) until `tunbench cleanup`.

The first signal raises KeyboardInterrupt in the main thread; later ones are ignored, so they
cannot cut the teardown short (a SIGKILL still can: `tunbench cleanup` replays the journals).
tests/conftest.py installs it; a child pytest loads it with `-p sigterm_teardown`."""

from __future__ import annotations

import signal
from types import FrameType

import pytest

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stop(signum: int, frame: FrameType | None) -> None:
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: tearing the fixtures down")


def install() -> None:
    """Take SIGTERM and SIGHUP where nobody else handles them (main thread only)."""
    for sig in SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _stop)


def pytest_configure(config: pytest.Config) -> None:
    install()
