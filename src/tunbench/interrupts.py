"""The signal a run received, for the places its exception could not reach.

The CLI's SIGINT/SIGTERM handler raises `Interrupted` wherever the main thread happens to be.
When that is inside library code that catches `Exception` (pyroute2's netlink attribute
decoder logs and re-raises it as NetlinkNLADecodeError), the interruption arrives as another
error, or not at all, and the campaign would go on. The handler therefore also records the
signal here, and the runner asks `check()` wherever it handles a case's error or result: a
received signal then always ends the run as an interruption.
"""

from __future__ import annotations

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
