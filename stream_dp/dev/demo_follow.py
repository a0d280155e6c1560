"""What the demo shows: the releases as they arrive on the releases topic, window by window, until its bound.

:class:`ReleaseFollower` reads the releases topic as any subscriber does (:class:`stream_dp.client.
ReleaseSubscriber`: schema-checked, de-duplicated records), prints each record with ``stream-dp tail``'s
format (:func:`stream_dp.tail.format_release`) under a rule per new window, says when the replay is done,
and ends the run: after ``--windows N`` windows were released, after ``--duration`` seconds, or as soon as a
worker exits (with its log's tail). A window counts as released once every enabled release type of it was
seen, a later window started, or it has been quiet for :data:`QUIET_SECONDS`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from stream_dp.config import Config
from stream_dp.dev.demo_config import DemoOptions
from stream_dp.dev.demo_feed import ReplayFeed
from stream_dp.dev.demo_workers import WorkerProcess
from stream_dp.tables import counted

QUIET_SECONDS = 5.0


class ReleaseFollower:
    """Follows ``cfg``'s releases topic for the run ``opts`` asks for, printing with ``say``; stops early on
    ``stop_requested``. :attr:`windows_done` and :attr:`releases_printed` are what it saw."""

    def __init__(self, cfg: Config, opts: DemoOptions, say: Callable[[str], None], *,
                 stop_requested: threading.Event, feed: ReplayFeed | None, workers: Sequence[WorkerProcess]) -> None:
        self.cfg, self.opts, self.say = cfg, opts, say
        self.stop_requested = stop_requested
        self.feed = feed
        self.workers = workers
        self.windows_done: list[int] = []
        self.releases_printed = 0
        self._seen: dict[int, set[str]] = {}
        self._first_seen: dict[int, float] = {}

    def run(self) -> int:
        """Print releases until the run's bound (0), a worker's exit or too few windows in time (1), or a stop
        request (0); a failed replay raises."""
        from stream_dp.client import ReleaseSubscriber

        follower = ReleaseSubscriber(self.cfg.kafka, self.cfg.kafka.releases_topic)
        t0 = time.monotonic()
        replay_reported = False
        try:
            while not self.stop_requested.is_set():
                if self._print(follower.poll(timeout_ms=300)):
                    return 0
                self._mark_done()
                if self.feed is not None and self.feed.error is not None:
                    raise RuntimeError(f"replay failed: {self.feed.error}")
                if not replay_reported and self.feed is not None and self.feed.finished:
                    replay_reported = True
                    self._replay_done()
                code = self._bound_reached(t0)
                if code is not None:
                    return code
            return 0
        finally:
            follower.close()

    def _print(self, records: Sequence[dict]) -> bool:
        """Print ``records``; True once a record of a window beyond the ``--windows`` asked for arrives."""
        from stream_dp.tail import format_release

        for record in records:
            start = int((record.get("window") or {}).get("start", -1))
            if start not in self._seen and self.opts.windows is not None and len(self._seen) >= self.opts.windows:
                # windows are released in order: the N windows asked for are complete
                self.windows_done = sorted(self._seen)
                return True
            if start not in self._seen:
                self._seen[start] = set()
                self._first_seen[start] = time.monotonic()
                self.say(f"\n{'━' * 100}")
            self._seen[start].add(str(record.get("type")))
            self.say(format_release(record, color=self.opts.color, delta_prime=self.cfg.budget.delta_prime))
            self.releases_printed += 1
        return False

    def _mark_done(self) -> None:
        types = set(self.cfg.releases.enabled())
        latest = max(self._seen, default=None)
        for start, kinds in self._seen.items():
            if start in self.windows_done:
                continue
            quiet = time.monotonic() - self._first_seen[start] > QUIET_SECONDS
            if types <= kinds or (latest is not None and start < latest) or quiet:
                self.windows_done.append(start)

    def _replay_done(self) -> None:
        assert self.feed is not None
        if self.feed.stats is not None:
            self.say(f"\n· {self.feed.stats.summary()}")
        if self.opts.windows is None and self.opts.duration is None:
            self.say("· the last window closes when later events arrive; Ctrl-C stops the demo")

    def _bound_reached(self, t0: float) -> int | None:
        """The run's exit code once a worker died or a bound is reached; None: go on."""
        for worker in self.workers:
            if not worker.alive:
                self.say(f"\nthe {worker.name} worker exited unexpectedly; its log:\n{worker.log_tail()}")
                return 1
        if self.opts.windows is not None and len(self.windows_done) >= self.opts.windows:
            return 0
        if self.opts.duration is not None and time.monotonic() - t0 >= self.opts.duration:
            if self.opts.windows is not None:
                self.say(f"\nonly {len(self.windows_done)} of {counted(self.opts.windows, 'window')} released "
                         f"within {self.opts.duration:.0f}s")
                return 1
            return 0
        return None
