"""Decode and validate one Kafka record into an :class:`Event`, or say exactly why it is rejected.

The input is a JSON object ``{"user": str, "key": str, "ts": number, ...}`` (field names from
``[events]`` in the config). Anything else is *rejected* with one reason from :data:`DECODE_REASONS` (a
small, fixed set: it is a metric label and a dead-letter header). The decoder never raises on input bytes:
every byte string maps to an event or a rejection (a hypothesis test checks this).

Validation rules:

- the value must be present (``empty``), at most ``max_record_bytes`` long (``record_too_large``; checked
  before anything is parsed), valid UTF-8 (``not_utf8``), valid JSON (``bad_json``) whose top
  level is an object (``not_object``);
- the user and the key must be present and non-empty strings (``missing_user`` / ``missing_key`` when
  absent, null or ``""``; ``bad_user`` / ``bad_key`` when not a string or when they contain a NUL
  character, which the Redis bounding state uses as its separator), at most ``max_user_bytes`` /
  ``max_key_bytes`` bytes in UTF-8 (``user_too_long`` / ``key_too_long``);
- the user and the key must not contain control characters or invisible format characters
  (Unicode categories Cc, Cf, Zl, Zp: tab, newline, escape sequences, C1 controls, zero-width and
  bidirectional marks, the BOM, soft hyphens, line/paragraph separators) -- ``user_control_chars`` /
  ``key_control_chars``: such keys would reach terminals (``stream-dp tail``) and let visually identical
  keys or users differ. Valid ones are normalised to Unicode **NFC** (so a precomposed and a decomposed
  "é" are one key, and one user) -- keys to ``keys.normalization`` ("NFC", or "NFKC", which also folds
  compatibility look-alikes such as fullwidth "ｃａｆé" into "café"); the byte limits apply to the raw and to
  the normalised text. Beyond that, the service cannot know that two ids are one person: mapping each person
  to one user id is the operator's responsibility (docs/privacy.md §6). Pure-ASCII printable fields (the
  common case) take a fast path: they contain no such characters and are already NFC and NFKC;
- a key must have a base character: one made only of combining marks and spaces (nothing a reader can
  see as a key: "\u0301\u0301", "   ") is rejected as ``key_no_base_char``;
- the event time, when present, must be a finite number of epoch seconds in ``[0, 1e11)`` (``bad_time``);
  when absent (or null) the Kafka record timestamp is used (``bad_time`` if that is missing too).

>>> d = EventDecoder()
>>> d.decode(b'{"user": "u1", "key": "k", "ts": 7200.5}', partition=0, offset=3, timestamp_ms=None)
Event(user='u1', key='k', ts=7200.5, partition=0, offset=3)
>>> d.decode(b'{"user": "u1"}', partition=0, offset=4, timestamp_ms=None).reason
'missing_key'
>>> d.decode(b'\\xff', partition=0, offset=5, timestamp_ms=None).reason
'not_utf8'
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import Any, Literal, NamedTuple, cast

import orjson

from stream_dp.config import EventsConfig, KeysConfig

#: Every reason the decoder rejects a record for.
DECODE_REASONS: tuple[str, ...] = (
    "empty",
    "not_utf8",
    "bad_json",
    "not_object",
    "missing_user",
    "bad_user",
    "user_too_long",
    "missing_key",
    "bad_key",
    "key_too_long",
    "user_control_chars",
    "key_control_chars",
    "key_no_base_char",
    "bad_time",
    "record_too_large",
)

#: Unicode categories rejected in user ids and keys: controls, invisible format characters, separators.
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
#: Categories that are no base character on their own: combining marks and spaces. A key needs one other.
NOT_BASE_CATEGORIES = frozenset({"Mn", "Mc", "Me", "Zs"})

#: Reasons the applier rejects a decoded record for, checking it against the Kafka record timestamp (the
#: trusted clock, :mod:`stream_dp.ingest.windowing`).
CLOCK_REASONS: tuple[str, ...] = (
    "bad_record_time",  # the record has no timestamp
    "event_time_out_of_range",  # the body's time is too far from the record time (windows.max_*_seconds)
)

#: Reasons the store rejects a valid event for: its (window, shard) is at capacity
#: (``windows.max_shard_log_bytes``; docs/privacy.md "Capacity").
CAPACITY_REASONS: tuple[str, ...] = (
    "window_shard_full",
)

#: Every reason a record can be rejected for (metric label values, dead-letter ``reason`` header).
REJECT_REASONS: tuple[str, ...] = DECODE_REASONS + CLOCK_REASONS + CAPACITY_REASONS

#: Event times at or above this (epoch seconds, ~year 5138) are treated as garbage.
MAX_EVENT_TIME = 1e11


class Event(NamedTuple):
    """A valid event: who (the privacy unit), what (the counted key), when (event time, epoch seconds)
    and where it came from (Kafka partition and offset, which order the bounding and de-duplication)."""

    user: str
    key: str
    ts: float
    partition: int
    offset: int


class Rejection(NamedTuple):
    """A record that is not a valid event: the reason (one of :data:`REJECT_REASONS`) and its origin."""

    reason: str
    partition: int
    offset: int


_decode_json = json.JSONDecoder().decode
_fast_loads = orjson.loads  # bytes in, strict RFC 8259 + UTF-8: whatever it refuses goes the full way


class EventDecoder:
    """Turns record values into events; configured by the ``[events]`` section."""

    def __init__(self, cfg: EventsConfig | None = None, keys: KeysConfig | None = None) -> None:
        cfg = cfg or EventsConfig()
        self.key_form: Literal["NFC", "NFKC"] = "NFKC" if (keys or KeysConfig()).normalization == "NFKC" else "NFC"
        self.user_field = cfg.user_field
        self.key_field = cfg.key_field
        self.time_field = cfg.time_field
        self.max_user_bytes = cfg.max_user_bytes
        self.max_key_bytes = cfg.max_key_bytes
        self.max_record_bytes = cfg.max_record_bytes

    def fields(self, value: bytes | None, timestamp_ms: int | None) -> tuple[str, str, float] | None:
        """Fast path for well-formed events: (user, key, event time), or None when the record needs the
        full :meth:`decode` (which then gives the verdict: an event or a rejection reason). Whenever this
        returns a tuple, :meth:`decode` returns the same event (a hypothesis test checks it)."""
        if type(value) is not bytes or len(value) > self.max_record_bytes:
            return None
        try:
            obj = _fast_loads(value)
        except ValueError:  # orjson.JSONDecodeError (also for nesting too deep)
            return None
        if type(obj) is not dict:
            return None
        user = obj.get(self.user_field)
        key = obj.get(self.key_field)
        ts = obj.get(self.time_field)
        if (type(user) is not str or type(key) is not str or not user or not key
                or not user.isprintable() or not key.isprintable()):
            return None
        if not (user.isascii() and len(user) <= self.max_user_bytes) or not (
                key.isascii() and len(key) <= self.max_key_bytes) or key.isspace():
            return None
        if ts is None:
            if type(timestamp_ms) is not int or timestamp_ms < 0:
                return None
            ts = timestamp_ms / 1000.0
        elif type(ts) is not float and type(ts) is not int:
            return None
        if not (0 <= ts < MAX_EVENT_TIME):
            return None
        return user, key, float(ts)

    def decode(self, value: bytes | None, *, partition: int, offset: int,
               timestamp_ms: int | None) -> Event | Rejection:
        """One record value → :class:`Event` or :class:`Rejection`. Never raises on any ``value``."""
        if not value:
            return Rejection("empty", partition, offset)
        if len(value) > self.max_record_bytes:
            return Rejection("record_too_large", partition, offset)
        try:
            text = value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else None
        except UnicodeDecodeError:
            return Rejection("not_utf8", partition, offset)
        if text is None:
            return Rejection("empty", partition, offset)
        try:
            obj = _decode_json(text)
        except (ValueError, RecursionError):
            return Rejection("bad_json", partition, offset)
        if type(obj) is not dict:
            return Rejection("not_object", partition, offset)
        reason = None
        user = self._text(obj.get(self.user_field), self.max_user_bytes)
        if type(user) is not str:
            reason = ("missing_user", "bad_user", "user_too_long", "user_control_chars")[cast(int, user)]
        else:
            key = self._text(obj.get(self.key_field), self.max_key_bytes, self.key_form)
            if type(key) is not str:
                reason = ("missing_key", "bad_key", "key_too_long", "key_control_chars")[cast(int, key)]
            elif not _has_base_character(key):
                reason = "key_no_base_char"
            else:
                ts = self._time(obj.get(self.time_field), timestamp_ms)
                if ts is None:
                    reason = "bad_time"
                else:
                    return Event(user, key, ts, partition, offset)
        return Rejection(reason, partition, offset)

    @staticmethod
    def _text(raw: Any, max_bytes: int, form: Literal["NFC", "NFKC"] = "NFC") -> str | int:
        """The string normalised to ``form`` (NFC or NFKC), or 0 (missing), 1 (not a usable string), 2 (too
        long), 3 (control or invisible format characters)."""
        if raw is None or raw == "":
            return 0
        if type(raw) is not str or "\x00" in raw:
            return 1
        if len(raw) > max_bytes // 4 and len(raw.encode("utf-8", "surrogatepass")) > max_bytes:
            return 2
        if raw.isascii() and raw.isprintable():
            return raw  # fast path: no controls, already NFC and NFKC
        if not raw.isprintable():
            if _has_surrogate(raw):
                return 1  # lone surrogates (JSON "\\ud800") cannot be stored as UTF-8
            if any(unicodedata.category(ch) in FORBIDDEN_CATEGORIES for ch in raw):
                return 3
        if not unicodedata.is_normalized(form, raw):
            raw = unicodedata.normalize(form, raw)
            if len(raw.encode("utf-8")) > max_bytes:
                return 2
        return raw

    @staticmethod
    def _time(raw: Any, timestamp_ms: int | None) -> float | None:
        if raw is None:
            if timestamp_ms is None or type(timestamp_ms) is not int or timestamp_ms < 0:
                return None
            raw = timestamp_ms / 1000.0
        elif type(raw) not in (int, float):
            return None  # strings, bools, objects
        try:
            ts = float(raw)
        except OverflowError:  # a huge JSON integer
            return None
        if not (0.0 <= ts < MAX_EVENT_TIME) or math.isnan(ts):
            return None
        return ts


def _has_base_character(text: str) -> bool:
    """Whether ``text`` has a character other than combining marks and spaces (:data:`NOT_BASE_CATEGORIES`).

    >>> _has_base_character("cafe\u0301"), _has_base_character("\u0301\u20dd"), _has_base_character("  ")
    (True, False, False)
    """
    if text.isascii():
        return not text.isspace()
    return any(unicodedata.category(ch) not in NOT_BASE_CATEGORIES for ch in text)


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)
