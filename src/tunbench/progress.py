"""Progress events and the campaign estimate, with no output of their own.

Progress flows one way: the runner and the workloads announce what they are doing as
`PhaseEvent`s through a plain callback (`Context.progress`), and whoever listens (the console's
reporter) decides how to show them. Nothing here prints or imports the console, so a workload
never knows whether anyone watches.

`Estimate` is the campaign's time estimate. It starts from each workload's
`expected_seconds` plus a guessed bring-up and teardown per case, and corrects itself from what
it measures: the bring-up and teardown times of each tunnel kind, and how long each workload
really ran against what it was expected to (a loss search that needs more trials than its
formula says makes every later loss-search case longer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

SETUP = "bring-up"
TEARDOWN = "teardown"
DEFAULT_OVERHEAD_S = 1.5   # bring-up + teardown of a case before any was measured


@dataclass(frozen=True)
class PhaseEvent:
    """One phase of a case starts: "bring-up", "teardown", or a workload's own ("server start",
    "measuring", "trial", ...). `site` names the site it runs on when it runs on one only ("a"
    or "b"), `host` the machine of that site (None: this host, as for namespaces), so a remote
    testbed shows where a phase runs. `expected_s` is this phase's own expected length;
    `remaining_s` what the workload expects to take from here on, this phase included (None:
    the phase's own length). The first `warmup_s` seconds of a measuring phase are warm-up.
    A loss-search trial carries its number, the number of trials expected in all (about) and
    its rate."""

    name: str
    detail: str = ""
    site: str | None = None
    host: str | None = None
    expected_s: float | None = None
    remaining_s: float | None = None
    warmup_s: float = 0.0
    trial: int | None = None
    trials_about: int | None = None
    rate_pps: float | None = None
    at: float = field(default_factory=time.monotonic)

    @property
    def stage(self) -> str:
        """setup, workload or teardown: the part of a case the estimate charges it to."""
        if self.name == SETUP:
            return "setup"
        return "teardown" if self.name == TEARDOWN else "workload"

    def label(self, now: float | None = None) -> str:
        """What a person reads, e.g. "trial 3 of about 25: rfc2544 361 B at 12,000 pps on
        site b" (a measuring phase still in its warm-up reads "warm-up")."""
        name = "warm-up" if self.in_warmup(time.monotonic() if now is None else now) \
            else self.name
        if self.trial is not None:
            name = f"trial {self.trial}" + (f" of about {self.trials_about}"
                                             if self.trials_about else "")
        text = f"{name}: {self.detail}" if self.detail else name
        if self.site:
            text += f" on site {self.site}" + (f" ({self.host})" if self.host else "")
        return text

    def in_warmup(self, now: float) -> bool:
        return self.warmup_s > 0 and now - self.at < self.warmup_s

    def own_left(self, now: float) -> float:
        """Seconds this phase still expects to take (0 when it has no expectation)."""
        return max((self.expected_s or 0.0) - (now - self.at), 0.0)

    def workload_left(self, now: float) -> float | None:
        """Seconds the workload still expects to take, as of `now`, when the workload said so
        (None: it did not; the estimate then uses what it expects of the workload)."""
        if self.remaining_s is None:
            return None
        return max(self.remaining_s - (now - self.at), self.own_left(now))


ProgressSink = Callable[[PhaseEvent], None]


def ignore(event: PhaseEvent) -> None:
    """The sink when nobody listens (tests, library use)."""


def rate_text(pps: float | None, mean_l3: float | None = None) -> str:
    """"12,000 pps (34.7 Mbit/s)": a trial's offered rate; unpaced when pps is None."""
    if pps is None:
        return "the generator's top rate (unpaced)"
    text = f"{pps:,.0f} pps"
    if mean_l3:
        text += f" ({pps * mean_l3 * 8 / 1e6:,.1f} Mbit/s)"
    return text


def clock(seconds: float) -> str:
    """0:07, 12:30, 1:02:03."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@dataclass
class CasePlan:
    kind: str            # tunnel kind: bring-up and teardown are learned per kind
    workload: str        # workload name: its actual/expected ratio is learned per workload
    workload_s: float    # the workload's own expected_seconds
    alongside: bool = False   # runs beside another case (lanes.py): no time of its own


@dataclass
class _Running:
    index: int
    started: float
    phase: PhaseEvent | None = None
    workload_started: float | None = None
    teardown_started: float | None = None


class Estimate:
    """The campaign's remaining time, learned as cases run (see the module docstring).

    Feed it `case_start(i)`, every `phase(event)` and `case_end(i)`; ask `remaining(now)`.
    All times are time.monotonic() seconds."""

    def __init__(self, cases: list[CasePlan], now: float | None = None) -> None:
        self.cases = cases
        self.t0 = time.monotonic() if now is None else now
        self.overhead: dict[str, list[float]] = {}     # kind -> measured setup + teardown s
        self.bring_up: dict[str, list[float]] = {}     # kind -> measured bring-up s
        self.ratio_sum: dict[str, list[float]] = {}    # workload -> [actual s, expected s]
        self.done: set[int] = set()
        self.current: _Running | None = None

    # what is fed in

    def case_start(self, index: int, now: float | None = None) -> None:
        self.current = _Running(index, time.monotonic() if now is None else now)

    def phase(self, event: PhaseEvent) -> None:
        cur = self.current
        if cur is None:
            return
        cur.phase = event
        if event.stage == "workload" and cur.workload_started is None:
            cur.workload_started = event.at
        elif event.stage == "teardown" and cur.teardown_started is None:
            cur.teardown_started = event.at

    def case_end(self, index: int, now: float | None = None) -> None:
        cur = self.current
        now = time.monotonic() if now is None else now
        self.done.add(index)
        self.current = None
        if cur is None or cur.index != index:
            return
        plan = self.cases[index]
        w0 = cur.workload_started
        w1 = cur.teardown_started or now
        if w0 is None:   # failed in bring-up: only its overhead says anything
            return
        self.bring_up.setdefault(plan.kind, []).append(w0 - cur.started)
        self.overhead.setdefault(plan.kind, []).append((w0 - cur.started) + (now - w1))
        acc = self.ratio_sum.setdefault(plan.workload, [0.0, 0.0])
        acc[0] += w1 - w0
        acc[1] += plan.workload_s

    # what is asked

    def overhead_s(self, kind: str) -> float:
        """Bring-up + teardown of a case of this kind: measured mean, else the mean over the
        kinds measured so far, else the default guess."""
        seen = self.overhead.get(kind)
        if seen:
            return sum(seen) / len(seen)
        every = [x for xs in self.overhead.values() for x in xs]
        return sum(every) / len(every) if every else DEFAULT_OVERHEAD_S

    def ratio(self, workload: str) -> float:
        """How much longer (>1) or shorter a workload runs than its expected_seconds."""
        actual, expected = self.ratio_sum.get(workload, (0.0, 0.0))
        return actual / expected if expected > 0 and actual > 0 else 1.0

    def case_s(self, index: int) -> float:
        p = self.cases[index]
        if p.alongside:   # its time passes while the case it runs beside does
            return 0.0
        return self.overhead_s(p.kind) + p.workload_s * self.ratio(p.workload)

    def case_left(self, now: float) -> float:
        """The running case's remaining seconds: from what its workload says while it runs,
        from the learned figures otherwise."""
        cur = self.current
        if cur is None:
            return 0.0
        plan = self.cases[cur.index]
        ev = cur.phase
        if cur.teardown_started is not None:
            return max(self._teardown_s(plan.kind) - (now - cur.teardown_started), 0.0)
        if ev is not None and ev.stage == "workload":
            left = ev.workload_left(now)
            if left is None:
                expected = plan.workload_s * self.ratio(plan.workload)
                left = max(expected - (now - (cur.workload_started or now)), ev.own_left(now))
            return left + self._teardown_s(plan.kind)
        return max(self.case_s(cur.index) - (now - cur.started), 0.0)

    def _teardown_s(self, kind: str) -> float:
        up = self.bring_up.get(kind) or [x for xs in self.bring_up.values() for x in xs]
        bring_up = sum(up) / len(up) if up else DEFAULT_OVERHEAD_S / 2
        return max(self.overhead_s(kind) - bring_up, 0.0)

    def remaining(self, now: float | None = None) -> float:
        """Seconds until the campaign ends: the running case's rest + every case not begun."""
        now = time.monotonic() if now is None else now
        running = self.current.index if self.current else None
        future = sum(self.case_s(i) for i in range(len(self.cases))
                     if i not in self.done and i != running)
        return self.case_left(now) + future

    def total(self, now: float | None = None) -> float:
        """The whole campaign's expected length: elapsed + remaining."""
        now = time.monotonic() if now is None else now
        return (now - self.t0) + self.remaining(now)

    def learned(self) -> str:
        """What the estimate has learned, in a few words (for the line that reprints it)."""
        parts = [f"{kind} bring-up {sum(v) / len(v):.1f} s" for kind, v in
                 sorted(self.bring_up.items())]
        for wl in sorted(self.ratio_sum):
            r = self.ratio(wl)
            if abs(r - 1) >= 0.1:
                parts.append(f"{wl} runs {r:.1f}x its expected time")
        return ", ".join(parts)


def moved_much(new: float, old: float, *, rel: float = 0.2, abs_s: float = 30.0) -> bool:
    """An estimate worth printing again: it moved by more than 20 % and more than 30 s."""
    return abs(new - old) > rel * old and abs(new - old) > abs_s

