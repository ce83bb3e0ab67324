"""The signal a run received, for the places its exception could not reach.

The CLI's SIGINT/SIGTERM handler (install_handlers, below) raises `Interrupted` wherever the
main thread happens to be.
When that is inside library code that catches `Exception` (pyroute2's netlink attribute
decoder logs and re-raises it as NetlinkNLADecodeError), the interruption arrives as another
error, or not at all, and the campaign would go on. The handler therefore also records the
signal here, and the runner asks `check()` wherever it handles a case's error or result: a
received signal then always ends the run as an interruption.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

from .errors import Interrupted

_received: str | None = None


def mark(signame: str) -> None:
    global _received
    _received = signame


def clear() -> None:
    global _received
    _received = None


def check() -> None:
    """Raise Interrupted if a signal was received (whatever became of its exception)."""
    if _received is not None:
        raise Interrupted(_received)


_MAIN_PID = 0
_LAST_SIGNUM = signal.SIGINT


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _LAST_SIGNUM
    if os.getpid() != _MAIN_PID:
        # A forked helper (pyroute2 opens namespace sockets from a child) inherits this
        # handler; it must die as by default, never run tunbench's code on.
        os._exit(128 + signum)
    if signum != signal.SIGALRM:
        _LAST_SIGNUM = signal.Signals(signum)
    mark(_LAST_SIGNUM.name)
    raise Interrupted(_LAST_SIGNUM.name)


def _unraisable(u: Any) -> None:
    """A signal that lands while Python runs an at-fork callback (logging registers one; the
    pyroute2 netns helpers fork often) raises Interrupted where Python can only print and
    ignore it: the campaign would go on. Deliver it again a moment later, from a one-shot
    timer, when the main code runs."""
    if isinstance(u.exc_value, Interrupted) and os.getpid() == _MAIN_PID:
        signal.setitimer(signal.ITIMER_REAL, 0.005)
        return
    sys.__unraisablehook__(u)


def install_handlers() -> None:
    """The CLI's handlers: SIGINT, SIGTERM (and the re-delivery timer's SIGALRM) raise
    Interrupted in the main process and are recorded here."""
    global _MAIN_PID
    _MAIN_PID = os.getpid()
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGALRM, _interrupt)
    sys.unraisablehook = _unraisable
