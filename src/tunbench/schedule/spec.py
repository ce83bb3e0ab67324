"""A schedule: an experiment (the `tunbench run` options) plus when to repeat it.

`every` is the period; `window` (HH:MM-HH:MM, may wrap midnight) and `days` (mon-fri,
sat,sun) restrict the slots that run; `until` ends the schedule; `slip` delays each start by a
random 0..slip so runs do not align with other periodic load (perfSONAR pScheduler's
repeat/slip). Saved as JSON, one file per schedule, in the schedules folder.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Any

from ..errors import SpecError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DUR = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
DEFAULT_MIN_SECONDS = 60.0


def min_interval() -> float:
    """The shortest --every: a minute, lowered only by tests (TUNBENCH_SCHEDULE_MIN_SECONDS)."""
    try:
        return float(os.environ.get("TUNBENCH_SCHEDULE_MIN_SECONDS", DEFAULT_MIN_SECONDS))
    except ValueError:
        return DEFAULT_MIN_SECONDS


def parse_duration(text: str, flag: str) -> float:
    m = _DUR.match(text.strip().lower())
    if not m:
        raise SpecError(f"{flag} {text!r} is not a duration", f"e.g. {flag} 3h, 30m, 90s, 1d")
    return float(m[1]) * _UNIT[m[2]]


def parse_window(text: str) -> tuple[str, str]:
    m = re.match(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$", text.strip())
    if not m or int(m[1]) > 24 or int(m[3]) > 24 or int(m[2]) > 59 or int(m[4]) > 59:
        raise SpecError(f"--window {text!r} is not HH:MM-HH:MM", "e.g. --window 08:00-20:00")
    a, b = f"{int(m[1]):02d}:{m[2]}", f"{int(m[3]):02d}:{m[4]}"
    if a == b:
        raise SpecError(f"--window {text!r} is empty", "leave --window out for all day")
    return a, b


def parse_days(text: str) -> list[str]:
    out: list[str] = []
    for part in text.lower().replace(" ", "").split(","):
        ends = part.split("-")
        if not part or len(ends) > 2 or any(e not in DAYS for e in ends):
            raise SpecError(f"--days {text!r} is not a list of days",
                            "e.g. --days mon-fri or --days sat,sun")
        i, j = DAYS.index(ends[0]), DAYS.index(ends[-1])
        span = range(i, j + 1) if i <= j else [*range(i, 7), *range(0, j + 1)]
        out += [DAYS[k] for k in span]
    return [d for d in DAYS if d in out]


def parse_until(text: str) -> float:
    """An ISO date (the whole day included) or date-time, local time, as epoch seconds."""
    try:
        if re.match(r"^\d{4}-\d{2}-\d{2}$", text.strip()):
            day = datetime.fromisoformat(text.strip())
            return (day + timedelta(days=1)).timestamp()
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise SpecError(f"--until {text!r} is not a date", "e.g. --until 2026-12-31 or "
                        "--until 2026-12-31T18:00") from None


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise SpecError(f"schedule name {name!r} is not valid", "use 1-32 characters a-z, "
                        "0-9, - and _, starting with a letter or digit")
    return name


@dataclass
class Schedule:
    name: str
    every: float
    run_args: list[str]
    results: str                      # campaigns go to <results>/<name>/<timestamp>
    window: tuple[str, str] | None = None
    days: list[str] = field(default_factory=lambda: list(DAYS))
    until: float | None = None
    slip: float = 0.0
    db: str | None = None
    created: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Schedule:
        w = d.get("window")
        return cls(**{**d, "window": tuple(w) if w else None})

    def allows(self, when: datetime) -> bool:
        """Whether a slot at local time `when` may run (day of week and window)."""
        if DAYS[when.weekday()] not in self.days:
            return False
        if self.window is None:
            return True
        a, b = (_clock(x) for x in self.window)
        t = when.time()
        return a <= t < b if a < b else (t >= a or t < b)

    def expired(self, when: float) -> bool:
        return self.until is not None and when >= self.until

    def describe(self) -> str:
        parts = [f"every {_fmt(self.every)}"]
        if self.window:
            parts.append(f"{self.window[0]}-{self.window[1]}")
        if self.days != list(DAYS):
            parts.append(",".join(self.days))
        if self.slip:
            parts.append(f"slip {_fmt(self.slip)}")
        if self.until:
            parts.append("until " + datetime.fromtimestamp(self.until).isoformat(" ", "minutes"))
        return ", ".join(parts)


def _clock(hhmm: str) -> time:
    h, m = (int(x) for x in hhmm.split(":"))
    return time(23, 59, 59, 999999) if h == 24 else time(h, m)


def _fmt(sec: float) -> str:
    for u in ("d", "h", "m"):
        if sec >= _UNIT[u] and sec % _UNIT[u] == 0:
            return f"{int(sec // _UNIT[u])}{u}"
    return f"{sec:g}s"


def schedules_dir() -> Path:
    env = os.environ.get("TUNBENCH_SCHEDULE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tunbench" / "schedules"


def path_of(name: str) -> Path:
    return schedules_dir() / f"{check_name(name)}.json"


def save(s: Schedule) -> Path:
    from ..results.store import write_json_atomic
    p = path_of(s.name)
    write_json_atomic(p, s.to_dict())
    return p


def load(name: str) -> Schedule:
    p = path_of(name)
    if not p.exists():
        raise SpecError(f"no schedule named {name!r} ({p})",
                        "tunbench schedule list shows them; add one with tunbench schedule add")
    return Schedule.from_dict(json.loads(p.read_text()))


def names() -> list[str]:
    d = schedules_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []
