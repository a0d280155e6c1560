"""What the event stream is and how it is cut into windows: ``[events]`` (the body's fields and size bounds),
``[keys]``, ``[contribution]`` (the per-user bound Δ) and ``[windows]`` (size, lateness, the public schedule's
start, shards) -- read by ingest (decoding, bounding, the watermark) and by the release schedule."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt, model_validator

from stream_dp.config.fields import AtLeastOne, NonEmpty, NonNegative, Positive, Str, check, section


@section
class EventsConfig:
    user_field: NonEmpty = "user"
    key_field: NonEmpty = "key"
    time_field: NonEmpty = "ts"  # epoch seconds; missing → the Kafka record timestamp
    max_key_bytes: AtLeastOne = 256
    max_user_bytes: AtLeastOne = 256
    max_record_bytes: AtLeastOne = 1048588  # larger records are dead-lettered (Apache Kafka's message.max.bytes)

    @model_validator(mode="after")
    def _rules(self) -> EventsConfig:
        check(self, [(len({self.user_field, self.key_field, self.time_field}) == 3, "key_field",
                      "different from events.user_field and events.time_field")])
        return self


@section
class KeysConfig:
    # Unicode normalisation of keys (user ids are always NFC): "NFC" keeps compatibility look-alikes apart
    # (fullwidth "ｃａｆé", ligatures, superscripts); "NFKC" folds them into one key (docs/ingest.md, "Keys")
    normalization: Literal["NFC", "NFKC"] = "NFC"


@section
class ContributionConfig:
    unit: Literal["user", "event"] = "user"
    max_keys_per_user: AtLeastOne = 5  # Δ: distinct keys one user may touch per window (L0 bound)


FIRST_START = "first-start"


def parse_window_start(text: str) -> int | None:
    """``windows.start`` as epoch seconds; None for ``"first-start"``. Raises ValueError when malformed.

    >>> parse_window_start("7200"), parse_window_start("1970-01-01T02:00:00Z"), parse_window_start("first-start")
    (7200, 7200, None)
    """
    if text == FIRST_START:
        return None
    if text.strip().isdigit():
        return int(text)
    from datetime import datetime, timezone

    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = when.timestamp()
    if seconds != int(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not a whole second at or after 1970-01-01")
    return int(seconds)


def _window_start_or_invalid(text: str) -> int | None:
    try:
        return parse_window_start(text)
    except ValueError:
        return -1


@section
class WindowsConfig:
    size_seconds: AtLeastOne = 3600
    allowed_lateness_seconds: NonNegative = 60
    idle_partition_timeout_seconds: Positive = 30.0
    retention_seconds: NonNegative = 86400  # keep a window's counts this long after its release is published
    # The public release schedule starts at this window: "first-start" (the window of the wall clock when
    # the deployment first starts, recorded once in Redis), or a window start as epoch seconds ("7200") or
    # ISO 8601 UTC ("2026-11-03T00:00:00Z"), a multiple of size_seconds.
    start: Str = FIRST_START
    # A body's event time may place an event only within [record time - max_event_delay_seconds,
    # record time + max_clock_skew_seconds] of its Kafka record timestamp (the trusted clock).
    max_event_delay_seconds: NonNegative = 30
    max_clock_skew_seconds: NonNegative = 5
    # Each window's state is split into this many shards by a stable hash of the user id (one hash tag
    # each, so a Redis Cluster spreads a window over its masters). Size it masters x a few (docs/scaling.md);
    # 1 (one node) keeps one tag per window. Recorded with the schedule: a restart with another value is refused.
    shards: AtLeastOne = 1
    # Where a window's counts live (docs/design/key-sharded-counts.md): "user" keeps each shard's counts with
    # its users' bounding state (a key's count is split over the shards); "key" bounds in the user's shard and
    # counts each key in one key shard (crc32(key) mod shards), so the release can read shard by shard.
    # Recorded with the schedule: a start in the other layout is refused.
    layout: Literal["user", "key"] = "user"
    # No Redis value of a window grows past this: a shard's bounding log is stored in segments of this size
    # (Redis caps one string at 512 MB; the default keeps every segment far below that).
    log_segment_bytes: Annotated[StrictInt, Field(ge=1024, le=256 << 20,
                                                  description="half of Redis's 512 MB string cap")] = 64 << 20
    # Capacity of one (window, shard): the most bounding-log bytes it may hold (counted user-key pairs,
    # ~20-60 B each). Events past it are dead-lettered (reason window_shard_full), counted, and alerted on;
    # the privacy guarantee holds only below capacity (docs/privacy.md "Capacity"). Raise shards instead.
    max_shard_log_bytes: AtLeastOne = 4 << 30

    @model_validator(mode="after")
    def _rules(self) -> WindowsConfig:
        start = _window_start_or_invalid(self.start)
        check(self, [
            (start is None or (start >= 0 and start % self.size_seconds == 0), "start",
             f"'{FIRST_START}', or a window start (epoch seconds or ISO 8601 UTC) that is a multiple of "
             f"windows.size_seconds ({self.size_seconds})"),
            (self.max_event_delay_seconds <= self.allowed_lateness_seconds, "max_event_delay_seconds",
             f">= 0 and <= windows.allowed_lateness_seconds ({self.allowed_lateness_seconds}): a delayed event "
             "must never be late only because other users' records moved the watermark"),
        ])
        return self
