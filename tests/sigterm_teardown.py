"""pytest plugin: SIGTERM or SIGHUP ends a test session the way Ctrl-C does, so every fixture
is torn down (namespaces, links, sshd "hosts", daemons: their ledgers close) before pytest
exits. Without it a CI timeout, a closed terminal or `kill` left a module's test hosts behind
(tb-<rid>-m, -h1, -h2, the root link tb<rid>m0 and two sshd) until `tunbench cleanup`.

The first signal raises KeyboardInterrupt in the main thread; later ones are ignored, so they
cannot cut the teardown short (a SIGKILL still can: `tunbench cleanup` replays the journals).
tests/conftest.py installs it; a child pytest loads it with `-p sigterm_teardown`."""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_SESSION_PID: list[int] = []   # the pytest process the handler is for


def _stop(signum: int, frame: FrameType | None) -> None:
    if os.getpid() not in _SESSION_PID:
        # a forked child of the session (pyroute2 forks to enter a namespace) inherits the
        # handler: it must die as before, never run the session's teardown (it would undo
        # the parent's ledgers: namespaces vanished under running cases)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: tearing the fixtures down")


def _child_default() -> None:
    for sig in SIGNALS:
        if signal.getsignal(sig) is _stop:
            signal.signal(sig, signal.SIG_DFL)


def install() -> None:
    """Take SIGTERM and SIGHUP where nobody else handles them (main thread only); forked
    children get the default disposition back."""
    if _SESSION_PID:
        return
    _SESSION_PID.append(os.getpid())
    os.register_at_fork(after_in_child=_child_default)
    for sig in SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _stop)


def pytest_configure(config: pytest.Config) -> None:
    install()
