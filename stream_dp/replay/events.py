"""Input rows → events: which columns hold the user, the key and the event time, and how a time is read.

A row that does not map (no user, no key, an unreadable or missing time) becomes None, counted as skipped by
:func:`~stream_dp.replay.sending.replay`; a mapped column the file's header lacks is a :class:`ReplayError`
naming it and the columns that exist.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stream_dp.config import EventsConfig
from stream_dp.errors import StreamDPError

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
