"""Progress of a running campaign, on stderr, with or without --json (only --quiet hides it).

It shows the campaign estimate at the start, then which case runs, its phase (bring-up, a
workload's own phases such as warm-up, measuring or "trial k of about N" with its rate,
teardown), and elapsed and remaining time for the case and the campaign. On a terminal one
live line redraws in place (rich Live, transient: nothing of it stays on the screen); anywhere
else (a pipe, a CI log) it prints plain lines at a calm rate: one per phase and trial, and one
every 10 s while a phase runs long, never an escape code. The estimate learns from what it
measures (progress.Estimate) and is printed again when it moves by much.

A sequential campaign (no fixed --repeats) also says, after each round from its planned
minimum on, which pairs of the ranking are still open and what the next round measures; the
live display keeps the open pairs under the case line.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..errors import Interrupted
from ..plan import Case
from ..progress import CasePlan, Estimate, PhaseEvent, clock, moved_much
from ..results.records import CaseRecord
from ..results.store import CampaignStore
from .console import headline

TICK_S = 0.5       # how often the reporter looks at the clock
CALM_S = 10.0      # plain output: a status line at least this often while a phase runs
REFRESH_HZ = 2     # terminal redraws per second (the CPU sampler sees tunbench's own work)


def span(seconds: float) -> str:
    """A duration in words: 45 s, 1.5 min, 2.1 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class ProgressReporter:
    """The runner's Reporter that shows progress (see the module docstring)."""

    def __init__(self, quiet: bool = False, console: Console | None = None) -> None:
        self.quiet = quiet
        self.console = console or Console(stderr=True)
        # a terminal that cannot move the cursor (TERM=dumb, an editor's shell) gets plain lines
        self.terminal = self.console.is_terminal and not self.console.is_dumb_terminal
        self.live: Live | None = None
        self.est: Estimate | None = None
        self.pos: dict[str, int] = {}
        self.n = 0
        self.done = 0
        self.case: Case | None = None
        self.event: PhaseEvent | None = None
        self.warmup_shown = False    # the running phase's warm-up was announced as such
        self.shown_total = 0.0       # the campaign length last printed
        self.last_line = 0.0
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.ticker: threading.Thread | None = None
        self.last_render: RenderableType = Text("")
        self.open_pairs = ""         # sequential: the pairs still open after the last round

    # Reporter

    def campaign_start(self, cases: list[Case], plans: list[CasePlan]) -> None:
        self._guarded(self._campaign_start, cases, plans)

    def _campaign_start(self, cases: list[Case], plans: list[CasePlan]) -> None:
        self.n = len(cases)
        self.pos = {c.case_id: i for i, c in enumerate(cases)}
        self.est = Estimate(plans)
        if self.quiet:
            return
        self.shown_total = self.est.total()
        self._say(f"tunbench: {self.n} case(s), about {span(self.shown_total)} (estimated; "
                  "refined as cases run)")
        if self.terminal:
            self.live = Live(get_renderable=self._render, console=self.console,
                             refresh_per_second=REFRESH_HZ, transient=True,
                             redirect_stdout=False, redirect_stderr=False)
            self.live.start()
        self.ticker = threading.Thread(target=self._tick, name="tunbench-progress",
                                       daemon=True)
        self.ticker.start()

    def case_start(self, case: Case) -> None:
        self._guarded(self._case_start, case)

    def phase(self, event: PhaseEvent) -> None:
        self._guarded(self._phase, event)

    def case_end(self, case: Case, doc: dict[str, Any]) -> None:
        self._guarded(self._case_end, case, doc)

    def campaign_end(self, store: CampaignStore) -> None:
        self.close()

    def round_end(self, rnd: int, open_pairs: str, stop: str | None) -> None:
        self._guarded(self._round_end, rnd, open_pairs, stop)

    def round_start(self, rnd: int, cases: list[Case], plans: list[CasePlan]) -> None:
        self._guarded(self._round_start, rnd, cases, plans)

    def _round_end(self, rnd: int, open_pairs: str, stop: str | None) -> None:
        with self.lock:
            self.open_pairs = open_pairs
            if self.quiet:
                return
            from ..sequential import STOPPED
            tail = f"; stopping: {STOPPED.get(stop, stop)}" if stop else ""
            self._say(f"tunbench: round {rnd} done: {open_pairs}{tail}")

    def _round_start(self, rnd: int, cases: list[Case], plans: list[CasePlan]) -> None:
        """An added round: its cases join the count and the estimate."""
        with self.lock:
            if self.est is not None:
                for c, p in zip(cases, plans, strict=True):
                    self.pos[c.case_id] = len(self.est.cases)
                    self.est.cases.append(p)
            self.n += len(cases)
            if not self.quiet:
                self._say(f"tunbench: round {rnd}: {len(cases)} case(s) for the open pairs")

    def close(self) -> None:
        """Stop redrawing (also after an interruption or an error); idempotent."""
        self.stopping.set()
        if self.ticker is not None and self.ticker is not threading.current_thread():
            self.ticker.join(timeout=2)
        with self.lock:
            live, self.live = self.live, None
            if live is not None:
                try:
                    live.stop()
                except Exception:   # stderr already gone: nothing to erase
                    pass

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """A display problem (a closed stderr pipe, a rendering bug) must not fail a case or
        the campaign: progress stops, the run goes on. A signal still ends the run."""
        try:
            fn(*args)
        except Interrupted:
            raise
        except Exception as exc:
            self._give_up(exc)

    def _case_start(self, case: Case) -> None:
        with self.lock:
            self.case, self.event = case, None
            if self.est is not None:
                self.est.case_start(self.pos.get(case.case_id, 0))
            if not self.quiet and not self.terminal:
                self._say(f"tunbench: {self._tag()}: start; {self._times()}")

    def _phase(self, event: PhaseEvent) -> None:
        with self.lock:
            self.event = event
            self.warmup_shown = event.in_warmup(event.at)
            if self.est is not None:
                self.est.phase(event)
            if not self.quiet and not self.terminal:
                self._say(f"tunbench: {self._tag()}: {event.label(event.at)}; {self._times()}")
            self._reestimate()

    def _case_end(self, case: Case, doc: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
            if self.est is not None:
                self.est.case_end(self.pos.get(case.case_id, 0))
            self.case, self.event = None, None
            if self.quiet:
                return
            rec = CaseRecord.from_doc(doc)
            head = headline(rec)
            line = f"[{self.done}/{self.n}] {case.case_id}: {rec.status}"
            if not rec.ok:
                line += f" - {rec.error}"
            elif head:
                line += f" - {head}"
            self._say(line)
            self._reestimate()

    # output

    def _say(self, line: str) -> None:
        """One finished line: above the live line on a terminal, plain text otherwise."""
        self.last_line = time.monotonic()
        if self.terminal:
            self.console.print(line, markup=False, highlight=False)
        else:
            self.console.file.write(line + "\n")
            self.console.file.flush()

    def _give_up(self, exc: Exception) -> None:
        """stderr went away (a closed pipe) or the display failed: the run goes on without
        progress, and says so once if it still can."""
        self.quiet = True
        self.stopping.set()
        try:
            live, self.live = self.live, None
            if live is not None:
                live.stop()
            self.console.file.write(f"tunbench: progress display stopped ({exc})\n")
        except Exception:
            pass

    def _tag(self) -> str:
        if self.case is None:
            return f"[{self.done}/{self.n}]"
        return f"[{self.done + 1}/{self.n}] {self.case.case_id}"

    def _times(self, now: float | None = None) -> str:
        """"case 0:03, about 0:11 left; campaign 0:20, about 1:30 left"."""
        est = self.est
        if est is None:
            return ""
        now = time.monotonic() if now is None else now
        text = ""
        cur = est.current
        if cur is not None:
            text = f"case {clock(now - cur.started)}, about {clock(est.case_left(now))} left; "
        return text + f"campaign {clock(now - est.t0)}, about {clock(est.remaining(now))} left"

    def _render(self) -> RenderableType:
        """The live display: the case and its phase, then times and a bar of the campaign.
        Called by rich's refresh thread while it holds the display's lock, so it never waits
        for ours (the main thread may hold ours while it prints): busy, it shows the last."""
        if not self.lock.acquire(blocking=False):
            return self.last_render
        try:
            self.last_render = self._compose()
        finally:
            self.lock.release()
        return self.last_render

    def _compose(self) -> RenderableType:
        now = time.monotonic()
        what = self._tag()
        if self.case is not None:
            what = f"round {self.case.repeat} {what}"
        if self.event is not None:
            what += f" · {self.event.label(now)}"
        elif self.case is not None:
            what += " · starting"
        est = self.est
        total = est.total(now) if est else 1.0
        elapsed = now - est.t0 if est else 0.0
        times = self._times(now)
        grid = Table.grid(padding=(0, 1))
        grid.add_row(ProgressBar(total=max(total, 1.0), completed=min(elapsed, total),
                                 width=24),
                     Text(times, no_wrap=True, overflow="ellipsis"))
        lines: list[RenderableType] = [Text(what, no_wrap=True, overflow="ellipsis"), grid]
        if self.open_pairs:
            lines.append(Text(self.open_pairs, no_wrap=True, overflow="ellipsis"))
        return Group(*lines)

    # the clock

    def _tick(self) -> None:
        while not self.stopping.wait(TICK_S):
            try:
                with self.lock:
                    self._on_tick(time.monotonic())
            except Exception as exc:   # stderr gone, a display bug: stop showing, quietly
                self._give_up(exc)

    def _on_tick(self, now: float) -> None:
        ev = self.event
        if self.quiet or self.case is None:
            return
        if not self.terminal and ev is not None:
            if self.warmup_shown and not ev.in_warmup(now):
                self.warmup_shown = False
                self._say(f"tunbench: {self._tag()}: {ev.label(now)}; {self._times(now)}")
            elif now - self.last_line >= CALM_S:
                self._say(f"tunbench: {self._tag()}: still {ev.label(now)}; "
                          f"{self._times(now)}")
        self._reestimate(now)

    def _reestimate(self, now: float | None = None) -> None:
        """Print the estimate again when it moved by more than 20 % and 30 s."""
        if self.quiet or self.est is None:
            return
        total = self.est.total(now)
        if not moved_much(total, self.shown_total):
            return
        learned = self.est.learned()
        self._say(f"tunbench: estimate now about {span(total)} in all, was "
                  f"{span(self.shown_total)}" + (f" (measured: {learned})" if learned else ""))
        self.shown_total = total
