"""Replay a file of events (CSV or JSON lines) into the input topic, optionally paced.

The pieces are separate so each can be tested alone:

- :func:`read_rows` reads CSV (header row) or JSON lines, plain or gzip, and tracks how many bytes it has
  consumed (for a progress bar);
- :class:`ColumnMapping` maps a row's columns to an :class:`Event` (user, key, event time), e.g.
  MovieLens' ``userId``/``movieId``/``timestamp``;
- :class:`Pacer` decides when each event may be sent: as fast as possible, at most ``rate`` events per
  second, and/or event time sped up by a factor (``speedup=3600`` plays an hour of event time per second);
- :func:`replay` produces each event to the topic as the JSON object ingest expects
  (``{events.user_field: user, events.key_field: key, events.time_field: ts}``), **keyed by user** so one
  user's events stay in one partition, with the Kafka record timestamp set to the event time.

Rows without a user or key are skipped and counted, never half-sent; a column that does not exist at all
is an error naming the column and the ones that do.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from rich.console import Console
from rich.progress import BarColumn, ProgressColumn, Task, TextColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from stream_dp.config import EventsConfig
from stream_dp.errors import StreamDPError
from stream_dp.schedule import record_timestamp_ms

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


class ReplayError(ValueError, StreamDPError):
    """The input file or the column mapping is unusable (the message names the file, row or column)."""


@dataclass(frozen=True)
class Event:
    """One input event: ``user`` (the privacy unit), ``key`` (the counted item), ``ts`` (epoch seconds or None)."""

    user: str
    key: str
    ts: float | None

    def to_json(self, fields: EventsConfig) -> bytes:
        """The record value ingest reads, with the configured field names.

        >>> Event("u1", "movie-3", 1700000000.0).to_json(EventsConfig())
        b'{"user": "u1", "key": "movie-3", "ts": 1700000000}'
        """
        body: dict[str, Any] = {fields.user_field: self.user, fields.key_field: self.key}
        if self.ts is not None:
            body[fields.time_field] = int(self.ts) if float(self.ts).is_integer() else self.ts
        return json.dumps(body).encode()


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


def detect_format(path: str | os.PathLike[str]) -> str:
    """``csv`` or ``jsonl`` from the file name (``.gz`` is looked through).

    >>> detect_format("ratings.csv.gz"), detect_format("events.ndjson")
    ('csv', 'jsonl')
    """
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".csv", ".tsv")):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise ReplayError(f"cannot tell the format of {os.fspath(path)!r} from its name; pass --format csv or jsonl")


class _CountingLines:
    """Iterate decoded lines of a binary stream, counting the bytes consumed (for progress)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.bytes_read = 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._fh:
            self.bytes_read += len(raw)
            yield raw.decode("utf-8")


@dataclass
class RowSource:
    """Rows of one input file plus what a progress bar needs (bytes read of ``size_bytes``)."""

    rows: Iterator[Mapping[str, Any]]
    columns: tuple[str, ...] | None
    size_bytes: int | None
    _lines: _CountingLines | None = field(default=None, repr=False)
    _fh: BinaryIO | None = field(default=None, repr=False)

    @property
    def bytes_read(self) -> int:
        return self._lines.bytes_read if self._lines is not None else 0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def read_rows(path: str | os.PathLike[str], *, fmt: str | None = None, delimiter: str | None = None,
              header: bool = True) -> RowSource:
    """Open ``path`` (CSV, or one JSON object per line; ``.gz`` allowed).

    CSV rows are keyed by the header row's names; with ``header=False`` (files such as MovieLens 100K's
    tab-separated ``u.data``) by 1-based column position, ``"1"``, ``"2"``, …. The delimiter defaults to a
    tab for ``.tsv`` files and a comma otherwise."""
    fmt = fmt or detect_format(path)
    if fmt not in ("csv", "jsonl"):
        raise ReplayError(f"format must be csv or jsonl, got {fmt!r}")
    if delimiter is not None and len(delimiter) != 1:
        raise ReplayError(f"the delimiter must be one character, got {delimiter!r}")
    try:
        raw: BinaryIO = gzip.open(path, "rb") if os.fspath(path).endswith(".gz") else open(path, "rb")  # type: ignore[assignment]  # GzipFile: binary, not BinaryIO to typeshed
    except FileNotFoundError:
        raise ReplayError(f"input file {os.fspath(path)!r} does not exist") from None
    size = None if os.fspath(path).endswith(".gz") else os.path.getsize(path)
    lines = _CountingLines(raw)
    if fmt == "csv":
        if delimiter is None:
            delimiter = "\t" if os.fspath(path).removesuffix(".gz").endswith(".tsv") else ","
        if not header:
            columns, rows = _positional_rows(csv.reader(iter(lines), delimiter=delimiter))
            return RowSource(rows=rows, columns=columns, size_bytes=size, _lines=lines, _fh=raw)
        reader = csv.DictReader(iter(lines), delimiter=delimiter)
        columns = tuple(reader.fieldnames or ())
        return RowSource(rows=iter(reader), columns=columns, size_bytes=size, _lines=lines, _fh=raw)
    return RowSource(rows=_json_lines(lines, os.fspath(path)), columns=None, size_bytes=size, _lines=lines, _fh=raw)


def _positional_rows(reader: Iterator[list[str]]) -> tuple[tuple[str, ...], Iterator[Mapping[str, Any]]]:
    """Headerless CSV: the column names ``"1"`` … ``"n"`` (n from the first row) and the rows keyed so.

    >>> cols, rows = _positional_rows(iter([["196", "242", "3"], ["186", "302"]]))
    >>> cols, list(rows)
    (('1', '2', '3'), [{'1': '196', '2': '242', '3': '3'}, {'1': '186', '2': '302'}])
    """
    first = next(reader, None)
    if first is None:
        return (), iter(())
    columns = tuple(str(i + 1) for i in range(len(first)))

    def rows() -> Iterator[Mapping[str, Any]]:
        for row in itertools.chain([first], reader):
            yield {str(i + 1): v for i, v in enumerate(row)}

    return columns, rows()


def _json_lines(lines: Iterable[str], name: str) -> Iterator[Mapping[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{name} line {number} is not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ReplayError(f"{name} line {number} is not a JSON object")
        yield obj


# --------------------------------------------------------------------------------------------------
# Mapping rows to events
# --------------------------------------------------------------------------------------------------


def parse_time(value: Any, unit: str = "s") -> float:
    """Epoch seconds from a number (in ``unit``) or an ISO 8601 string (naive means UTC).

    >>> parse_time("964982703"), parse_time(1700000000123, "ms"), parse_time("2026-11-29T12:00:00Z")
    (964982703.0, 1700000000.123, 1795953600.0)
    """
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value) * TIME_UNITS[unit]
    else:
        text = str(value).strip()
        try:
            seconds = float(text) * TIME_UNITS[unit]
        except ValueError:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=timezone.utc)
            seconds = parsed.timestamp()
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite time: {value!r}")
    return round(seconds, 6)


@dataclass(frozen=True)
class ColumnMapping:
    """Which input columns hold the user, the key and the event time (None: no event time)."""

    user: str = "user"
    key: str = "key"
    time: str | None = "ts"
    time_unit: str = "s"
    time_offset_seconds: float = 0.0

    def check_columns(self, columns: Iterable[str] | None, source: str) -> None:
        """Fail early when the file's header lacks a mapped column."""
        if columns is None:
            return
        have = list(columns)
        for role, name in (("user", self.user), ("key", self.key), ("time", self.time)):
            if name is not None and name not in have:
                raise ReplayError(f"{source} has no column {name!r} (the --{role}-column); "
                                  f"its columns are: {', '.join(have) or '(none)'}")

    def event(self, row: Mapping[str, Any]) -> Event | None:
        """The event of one row, or None if its user or key is missing/empty (the row is skipped).

        >>> m = ColumnMapping(user="userId", key="movieId", time="timestamp")
        >>> m.event({"userId": "7", "movieId": "318", "rating": "4.0", "timestamp": "964982703"})
        Event(user='7', key='318', ts=964982703.0)
        """
        user, key = row.get(self.user), row.get(self.key)
        if user is None or key is None or str(user) == "" or str(key) == "":
            return None
        ts = None
        if self.time is not None:
            raw = row.get(self.time)
            if raw is None or str(raw).strip() == "":
                return None
            try:
                ts = parse_time(raw, self.time_unit) + self.time_offset_seconds
            except ValueError:
                return None
        return Event(user=str(user), key=str(key), ts=ts)


def sort_by_time(events: Iterable[Event | None]) -> list[Event | None]:
    """The events in event-time order (stable); events without a time, then unmapped rows (None), last.

    Files such as MovieLens' ``ratings.csv`` are sorted by user, not time; replayed as they are, the
    watermark would jump ahead and most events would arrive after their window closed (late). Reads
    everything into memory.

    >>> out = sort_by_time([Event("a", "k", 3.0), None, Event("b", "k", 1.0), Event("c", "k", None)])
    >>> [e and e.ts for e in out]
    [1.0, 3.0, None, None]
    """
    items = list(events)
    kept = [e for e in items if e is not None]
    by_time = sorted(kept, key=lambda e: (e.ts is None, e.ts or 0.0))
    return [*by_time, *[None] * (len(items) - len(kept))]


# --------------------------------------------------------------------------------------------------
# Pacing
# --------------------------------------------------------------------------------------------------


class Pacer:
    """When may the next event go out? Combines an optional rate limit and an event-time speed-up.

    With ``rate`` R, event i goes out no earlier than ``t0 + i / R``. With ``speedup`` S, an event at event
    time ts goes out no earlier than ``t0 + (ts - ts0) / S`` (ts0: the first event's time), so the stream
    plays S times faster than it happened. Neither: as fast as possible. Time goes through the injected
    ``clock``/``sleep`` so tests can use a fake clock.

    >>> fake = [0.0]
    >>> p = Pacer(rate=2, clock=lambda: fake[0], sleep=lambda s: fake.__setitem__(0, fake[0] + s))
    >>> for ts in (0, 0, 0): p.wait(ts)
    >>> fake[0]
    1.0
    """

    def __init__(self, *, rate: float | None = None, speedup: float | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if rate is not None and not rate > 0:
            raise ValueError(f"rate (events per second) must be > 0, got {rate!r}")
        if speedup is not None and not speedup > 0:
            raise ValueError(f"speedup must be > 0, got {speedup!r}")
        self.rate, self.speedup = rate, speedup
        self._clock, self._sleep = clock, sleep
        self._t0: float | None = None
        self._ts0: float | None = None
        self._sent = 0

    def due(self, ts: float | None) -> float:
        """Wall-clock time (on ``clock``) at which the next event, with event time ``ts``, may go out."""
        if self._t0 is None:
            self._t0 = self._clock()
        target = self._t0
        if self.rate is not None:
            target = max(target, self._t0 + self._sent / self.rate)
        if self.speedup is not None and ts is not None:
            if self._ts0 is None:
                self._ts0 = ts
            target = max(target, self._t0 + (ts - self._ts0) / self.speedup)
        return target

    def wait(self, ts: float | None) -> None:
        """Sleep until the next event is due, then count it as sent."""
        delay = self.due(ts) - self._clock()
        if delay > 0:
            self._sleep(delay)
        self._sent += 1


# --------------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Replaying
# --------------------------------------------------------------------------------------------------


CLOCK_MARGIN_S = 60.0  # how far this machine's clock may run behind the broker's, for the timestamp limit


@dataclass
class ReplayStats:
    """What a replay did."""

    sent: int = 0
    skipped: int = 0
    failed: int = 0  # sends the broker refused (or that never got an answer): not in the topic
    first_error: str = ""  # the first failed send's error, e.g. a timestamp a Kafka 4 broker refuses
    first_ts: float | None = None
    last_ts: float | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        span = ""
        if self.first_ts is not None and self.last_ts is not None:
            fmt = "%Y-%m-%d %H:%M"
            a = datetime.fromtimestamp(self.first_ts, tz=timezone.utc).strftime(fmt)
            b = datetime.fromtimestamp(self.last_ts, tz=timezone.utc).strftime(fmt)
            span = f", event time {a} .. {b} UTC"
        rate = self.sent / self.seconds if self.seconds > 0 else 0.0
        failed = f" (first: {self.first_error})" if self.failed else ""
        return (f"replayed {self.sent:,} events in {self.seconds:.1f}s ({rate:,.0f}/s){span}; "
                f"skipped {self.skipped:,} rows without user/key/time; {self.failed:,} failed to send{failed}")


def replay(events: Iterable[Event | None], producer: Any, topic: str, fields: EventsConfig, *,
           pacer: Pacer | None = None, progress: Progress | None = None,
           fraction: Callable[[], float | None] | None = None, limit: int | None = None,
           should_stop: Callable[[], bool] | None = None, max_ahead_s: float | None = None,
           clock: Callable[[], float] = time.time) -> ReplayStats:
    """Send ``events`` to ``topic`` through a kafka-python-like ``producer`` and flush.

    ``None`` items are rows that did not map to an event; they are counted as skipped. The record key is
    the user (UTF-8) and the record timestamp the event time (ms), when known. ``limit`` stops after that
    many sent events; ``should_stop`` is polled between events (e.g. a SIGINT flag).

    ``max_ahead_s`` is how far ahead of the broker's clock the topic accepts a timestamp (Apache Kafka 4's
    ``message.timestamp.after.max.ms``, one hour by default): an event stamped later than that (less
    :data:`CLOCK_MARGIN_S`) is not sent but counted as failed. Sent, the broker would refuse its whole
    batch -- and kafka-python's idempotent producer takes that refusal as fatal and fails every pending send.
    """
    pacer = pacer or Pacer()
    stats = ReplayStats()
    t0 = time.monotonic()

    def failed(exc: BaseException) -> None:
        stats.failed += 1
        if not stats.first_error:
            stats.first_error = f"{type(exc).__name__}: {exc}"

    try:
        for item in events:
            if should_stop is not None and should_stop():
                break
            if limit is not None and stats.sent >= limit:
                break
            if item is None:
                stats.skipped += 1
                continue
            pacer.wait(item.ts)
            if max_ahead_s is not None and item.ts is not None and item.ts > clock() + max_ahead_s - CLOCK_MARGIN_S:
                failed(ReplayError(f"event time {item.ts:.0f} is more than {max_ahead_s:.0f} s ahead of now, "
                                   f"which the topic refuses (message.timestamp.after.max.ms); not sent"))
                continue
            ts_ms = record_timestamp_ms(item.ts) if item.ts is not None and item.ts >= 0 else None
            future = producer.send(topic, key=item.user.encode(), value=item.to_json(fields), timestamp_ms=ts_ms)
            if hasattr(future, "add_errback"):
                future.add_errback(failed)
            stats.sent += 1
            if item.ts is not None:
                stats.first_ts = item.ts if stats.first_ts is None else stats.first_ts
                stats.last_ts = item.ts
            if progress is not None:
                progress.update(stats.sent, fraction=fraction() if fraction else None, event_time=item.ts)
        producer.flush()
        stats.seconds = time.monotonic() - t0
        if progress is not None:
            progress.finish(stats.sent, fraction=fraction() if fraction else None, event_time=stats.last_ts)
    finally:
        if progress is not None:
            progress.close()  # an error mid-replay must not leave the terminal's cursor hidden
    return stats
