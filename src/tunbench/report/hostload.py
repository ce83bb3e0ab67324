"""Other work on the host during a campaign's measurements (cpu.other_pct_of_one_core, see
runner.other_work): one note for the decision summary when it was large enough to move the
figures. A share of native is a ratio of two cases measured minutes apart; CPU the host gave
to other work in one of them and not the other moves the ratio, and placing both iperf3 ends
on one CPU (the scheduler does that more often beside other work) moves it more."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

BUSY_PCT = 25.0   # % of one core of other work: above it a case counts as measured beside it


def recorded_other_work(cpu: dict[str, Any]) -> float | None:
    """The figure a case recorded (None for cases recorded before it existed)."""
    v = cpu.get("other_pct_of_one_core")
    return float(v) if isinstance(v, (int, float)) else None


def note(cpus: Iterable[dict[str, Any]]) -> str | None:
    """'other work on this host during 20 of 26 cases (median 98 % of a core) ...' or None
    when no case (or no case that recorded it) ran beside more than BUSY_PCT."""
    vals = [v for v in map(recorded_other_work, cpus) if v is not None]
    busy = [v for v in vals if v > BUSY_PCT]
    if not busy:
        return None
    return (f"other work on this host during {len(busy)} of {len(vals)} cases (median "
            f"{statistics.median(busy):.0f} % of a core besides the measurement's own "
            "processes): its shares of native move with it, run on a quiet host to settle "
            "them (docs/methodology.md, \"Other work on the host\")")
