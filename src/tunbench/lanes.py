"""Lanes: cases that run at the same time, one thread per lane, each lane's cases in order
(the mesh's disjoint pairs of one colour, with its sites on hosts and `parallel = true`;
runner._run_cases asks the topology's `steps` and runs a step of several lanes here).

Each lane runs the runner's own per-case path (`run_one`: bring-up, measurement, teardown
under the case's own ledger, the case recorded) in a thread of its own; the step ends when
every lane has ended, so the next colour starts only then. What that path shares is kept
sound so:

- the campaign's records: the runner writes a case's file and index.json under its lock
  (runner._BOOKS), one case at a time;
- the reporter (the progress display, a test's listener): told as for one case at a time.
  `Together` passes the first lane's case start, phases and end as they happen; the other
  lanes' cases are told (start and end together) when they end, or, while the first lane's
  case runs, right after it. The done count and every case's result line stay right; the
  display follows the first lane; the estimate counts only the first lane's cases as taking
  time (runner.case_plans: `alongside` for the others);
- signals: SIGINT and SIGTERM reach the main thread only, which is waiting here for the
  lanes. It records the signal (interrupts.mark, by the handler) and waits on; each lane
  sees it at its case's next phase (interrupts.check in `Together.phase`: at the latest when
  the command under way returns, e.g. the measurement), ends that case through the runner's
  own Interrupted path, which tears the case down, and runs no further case. Then the step
  raises Interrupted, as one case does. The teardown itself is never cut short: the runner
  announces it through a guard that swallows the check, and the ledger blocks signals.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from . import interrupts
from .errors import Interrupted
from .progress import PhaseEvent


class Together:
    """The reporter as the lanes of one step see it (see the module docstring): lane 0's
    cases told as they happen, the others' when they end (or after lane 0's running case)."""

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter
        self.lock = threading.RLock()
        self.shown_running = False
        self.held: list[tuple[Any, dict[str, Any]]] = []

    def lane(self, index: int) -> LaneReporter:
        return LaneReporter(self, index)

    def flush(self) -> None:
        """Tell the held cases (start and end); lane 0's case is not running."""
        with self.lock:
            held, self.held = self.held, []
            for case, doc in held:
                self.reporter.case_start(case)
                self.reporter.case_end(case, doc)


class LaneReporter:
    """One lane's reporter (runner.Reporter's case_start, phase, case_end)."""

    def __init__(self, together: Together, index: int) -> None:
        self.together, self.index = together, index

    def case_start(self, case: Any) -> None:
        if self.index == 0:
            with self.together.lock:
                self.together.shown_running = True
                self.together.reporter.case_start(case)

    def phase(self, event: PhaseEvent) -> None:
        interrupts.check()   # a signal the main thread received: end this lane's case
        if self.index == 0:
            with self.together.lock:
                self.together.reporter.phase(event)

    def case_end(self, case: Any, doc: dict[str, Any]) -> None:
        t = self.together
        with t.lock:
            if self.index == 0:
                t.shown_running = False
                t.reporter.case_end(case, doc)
                t.flush()
            elif t.shown_running:
                t.held.append((case, doc))
            else:
                t.reporter.case_start(case)
                t.reporter.case_end(case, doc)


def run_lanes(lanes: Sequence[Sequence[Any]], reporter: Any,
              run_one: Callable[[Any, Any], None]) -> None:
    """Run each lane's cases in order, the lanes at the same time (one thread each), and
    return when all have ended. `run_one(case, lane_reporter)`: the runner's per-case path.
    A lane that raised (Interrupted, or an error that ends the campaign) runs no further
    case; the others end theirs (an interruption: at their next phase). Then the first such
    exception is raised here, an interruption before any other."""
    together = Together(reporter)
    raised: list[BaseException | None] = [None] * len(lanes)
    # each lane says it ended through an Event: a Thread.join interrupted by the signal's
    # exception can take a thread still running for stopped (Python 3.11's
    # _wait_for_tstate_lock releases the lock the running thread holds), an Event's wait not
    ended = [threading.Event() for _ in lanes]

    def lane(i: int) -> None:
        view = together.lane(i)
        try:
            # the mask it started with is the main thread's while starting the lanes; its
            # processes must not inherit SIGINT and SIGTERM held off (their stop needs them)
            signal.pthread_sigmask(signal.SIG_SETMASK, unmasked)
            for case in lanes[i]:
                interrupts.check()
                run_one(case, view)
        except BaseException as exc:   # handed to the main thread, raised there
            raised[i] = exc
        finally:
            ended[i].set()

    threads = [threading.Thread(target=lane, args=(i,), name=f"tunbench-lane{i}")
               for i in range(len(lanes))]
    signalled: Interrupted | None = None
    try:
        # started with SIGINT and SIGTERM held off, so every lane starts (each restores the
        # mask first thing); one that came meanwhile is raised on release, caught here
        unmasked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for t in threads:
                t.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unmasked)
    except Interrupted as exc:   # the lanes see it at their next phase
        signalled = exc
    for t, done in zip(threads, ended, strict=True):
        while not done.is_set():
            try:
                # in slices: a signal the kernel gave a lane thread (it picks another thread
                # while this one holds SIGINT off, starting the lanes) leaves this thread's
                # wait asleep; its handler runs here when the wait returns
                done.wait(0.2)
            except Interrupted as exc:   # recorded by the handler; wait for the lanes' ends
                signalled = signalled or exc
        while t.is_alive():   # the lane's last step, after its Event
            try:
                t.join(timeout=0.1)
            except Interrupted as exc:
                signalled = signalled or exc
    together.flush()
    if signalled is not None:
        raise signalled
    first = next((e for e in raised if isinstance(e, Interrupted)), None) \
        or next((e for e in raised if e is not None), None)
    if first is not None:
        raise first
