"""The replay's one-line progress bar (rich): share done, events sent, their rate, the latest event time."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, ProgressColumn, Task, TextColumn
from rich.progress import Progress as RichProgress
from rich.text import Text


class _Percent(ProgressColumn):
    """``25.0%`` when the share done is known, nothing otherwise."""

    def render(self, task: Task) -> Text:
        return Text("" if task.total is None else f"{task.percentage:5.1f}%")


class Progress:
    """A one-line progress bar on a stream (stderr), drawn by rich and refreshed at most every ``interval`` seconds.

    On a terminal rich redraws the line in place (a live display, refreshed by :meth:`update`, no thread);
    elsewhere the same line is printed as plain text (no control codes) every ``interval * 50`` seconds
    plus once at :meth:`finish`, so logs stay readable. It shows the share done (bytes of the input, or
    events of ``total``), the events sent, their rate and the latest event time.
    """

    def __init__(self, stream: TextIO | None = None, *, total: int | None = None, unit: str = "events",
                 interval: float = 0.2, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.unit, self.enabled, self._clock = total, unit, enabled, clock
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if self.tty else interval * 50
        self._t0 = clock()
        self._last = -math.inf
        console = Console(file=self.stream, force_terminal=self.tty, highlight=False, emoji=False,
                          color_system="auto" if self.tty else None, width=None if self.tty else 200)
        self._bar = RichProgress(BarColumn(bar_width=24), _Percent(), TextColumn("{task.description}"),
                                 console=console, auto_refresh=False, get_time=clock,
                                 redirect_stdout=False, redirect_stderr=False)
        self._task = self._bar.add_task("", total=None, start=True)
        self._live = False

    def line(self, done: int, fraction: float | None, event_time: float | None) -> str:
        """The text after the bar: events sent, their rate, the latest event time."""
        elapsed = self._clock() - self._t0
        parts = [f"{done:,} {self.unit}"]
        if elapsed > 1e-6:
            parts.append(f"{done / elapsed:,.0f}/s")
        if event_time is not None:
            stamp = datetime.fromtimestamp(event_time, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
            parts.append(f"event time {stamp} UTC")
        return "  ".join(parts)

    def update(self, done: int, *, fraction: float | None = None, event_time: float | None = None,
               force: bool = False) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        if fraction is None and self.total:
            fraction = done / self.total
        share = None if fraction is None else min(max(fraction, 0.0), 1.0)
        self._bar.update(self._task, total=None if share is None else 1.0, completed=share or 0.0,
                         description=self.line(done, fraction, event_time))
        if self.tty:
            if not self._live:
                self._bar.start()
                self._live = True
            self._bar.refresh()
        else:
            with self._bar.console.capture() as captured:
                self._bar.console.print(self._bar.get_renderable())
            lines = (line.rstrip() for line in captured.get().splitlines())
            self.stream.write("".join(f"{line}\n" for line in lines if line))
            self.stream.flush()

    def finish(self, done: int, *, fraction: float | None = None, event_time: float | None = None) -> None:
        if not self.enabled:
            return
        self.update(done, fraction=fraction, event_time=event_time, force=True)
        self.close()

    def close(self) -> None:
        """End the live display, if one is running (idempotent): the last line stays, the cursor is shown again."""
        if self._live:
            self._bar.stop()
            self._live = False
