"""What the demo feeds the events topic: the generated ratings or a file of yours, replayed on a thread.

:func:`load_events` reads the stream -- the generated MovieLens-style ratings (:mod:`stream_dp.dev.demo_data`),
or a user's file through the same column mapping as ``stream-dp replay`` (sorted by event time: a file may be
sorted by user, as MovieLens is) -- and :class:`ReplayFeed` sends it into the events topic with
:func:`stream_dp.replay.replay` on a thread of its own, paced so a window of event time passes every few
seconds, until it is done or the demo stops it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from stream_dp.config import Config
from stream_dp.dev.demo_config import DemoOptions


def load_events(opts: DemoOptions, cfg: Config) -> tuple[list[Any], str]:
    """The events to replay (None for a row that is not an event) and a line saying what they are."""
    from stream_dp.dev import demo_data
    from stream_dp.replay import ColumnMapping, read_rows, sort_by_time

    if opts.input_path is None:
        ratings = demo_data.generate_ratings(users=opts.users, movies=opts.movies, days=opts.days, seed=opts.seed)
        mapping = ColumnMapping(user="userId", key="title", time="timestamp")
        what = (f"generated MovieLens-style ratings: {len(ratings):,} ratings by {opts.users:,} users of "
                f"{opts.movies:,} movies over {opts.days} days (seed {opts.seed})")
        return [mapping.event(row) for row in demo_data.rows(ratings)], what
    src = read_rows(opts.input_path, fmt=opts.input_format)
    mapping = ColumnMapping(user=opts.user_column or cfg.events.user_field,
                            key=opts.key_column or cfg.events.key_field,
                            time=opts.time_column or cfg.events.time_field, time_unit=opts.time_unit)
    mapping.check_columns(src.columns, opts.input_path)
    ordered = sort_by_time(mapping.event(row) for row in src.rows)
    src.close()
    what = (f"{opts.input_path} (user={mapping.user}, key={mapping.key}, time={mapping.time}; "
            f"{len(ordered):,} rows, sorted by event time)")
    return list(ordered), what


def speedup_for(opts: DemoOptions, cfg: Config) -> float | None:
    """Event time's speed-up over the wall clock: ``--speedup``, else one window per ``--seconds-per-window``;
    None (as fast as possible) with ``--fast``."""
    return None if opts.fast else (opts.speedup or cfg.windows.size_seconds / opts.seconds_per_window)


class ReplayFeed:
    """The replay of ``events`` into ``cfg``'s events topic on a daemon thread, paced by ``speedup``, stopping
    early once ``should_stop`` says so. :attr:`stats` (:class:`stream_dp.replay.ReplayStats`) once it is done;
    :attr:`error` if it failed (the demo's main loop reports it)."""

    def __init__(self, cfg: Config, events: list[Any], *, speedup: float | None,
                 should_stop: Callable[[], bool]) -> None:
        self.cfg, self.events, self.speedup, self.should_stop = cfg, events, speedup, should_stop
        self.stats: Any = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Connect the producer (here: a broker that cannot be reached fails the demo's start), then replay."""
        from stream_dp import connections

        producer = connections.kafka_producer(self.cfg.kafka)
        self._thread = threading.Thread(target=self._run, args=(producer,), name="replay", daemon=True)
        self._thread.start()

    @property
    def finished(self) -> bool:
        """Started and no longer running (done, stopped or failed)."""
        return self._thread is not None and not self._thread.is_alive()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _run(self, producer: Any) -> None:
        from stream_dp.replay import Pacer, replay

        try:
            self.stats = replay(self.events, producer, self.cfg.kafka.events_topic, self.cfg.events,
                                pacer=Pacer(speedup=self.speedup), should_stop=self.should_stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the main loop
            self.error = exc
        finally:
            producer.close()
