"""Release records on the wire: their canonical bytes, and the parts of a record too large for one message.

A record whose JSON is larger than ``kafka.release_message_max_bytes`` is published as consecutive *part*
messages with the same key: each carries every field of the record but ``items``, the next slice of
``items`` (in order) and ``part: {"index", "count"}`` (``config/release.schema.json``). The cut is a pure
function of the record, so a republication sends identical messages; :func:`join_parts` gives the record
back (:class:`stream_dp.client.ReleaseSubscriber` joins them for its callers). Only ``json`` is imported
here: the subscriber client uses this module without the service's dependencies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stream_dp.errors import StreamDPError


def encode(record: Mapping[str, Any]) -> bytes:
    """Canonical bytes of a record (sorted keys): identical records give identical messages. Strict JSON
    (RFC 8259): a non-finite number raises ``ValueError`` here rather than reach subscribers as ``NaN`` or
    ``Infinity``, which their parsers refuse."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


#: ``kafka.release_message_max_bytes``' default: a record whose JSON is larger goes out in parts.
DEFAULT_MESSAGE_MAX_BYTES = 900_000

#: Bytes a release message may take beyond its value: key, headers and record framing (the release producer's
#: message size limit is ``kafka.release_message_max_bytes`` plus this).
MESSAGE_OVERHEAD_BYTES = 4096


class ReleaseTooLarge(ValueError, StreamDPError):
    """A release record cannot be cut into parts of ``kafka.release_message_max_bytes``: its fields other than
    ``items``, or one item with them, are already larger."""


def message_parts(record: Mapping[str, Any], max_bytes: int) -> list[bytes]:
    """The messages that carry ``record``: ``[encode(record)]`` when that is at most ``max_bytes``, else the
    record cut into consecutive parts -- each with every field but ``items``, the next slice of ``items`` (in
    order) and ``part: {"index", "count"}`` -- each at most ``max_bytes`` (greedy: as many items per part as
    fit). A pure function of the record, so a republished record is cut into the identical messages.
    :func:`join_parts` inverts it. Raises :class:`ReleaseTooLarge` when even one item does not fit.

    >>> rec = {"release_id": "0-60.sample", "items": [{"key": "k%d" % i} for i in range(6)]}
    >>> [len(m) for m in message_parts(rec, 10_000)]
    [116]
    >>> parts = message_parts(rec, 100)
    >>> [(len(m), json.loads(m)["part"]) for m in parts]  # doctest: +NORMALIZE_WHITESPACE
    [(93, {'count': 3, 'index': 0}), (93, {'count': 3, 'index': 1}), (93, {'count': 3, 'index': 2})]
    >>> join_parts([json.loads(m) for m in parts]) == rec
    True
    """
    whole = encode(record)
    if len(whole) <= max_bytes:
        return [whole]
    items = list(record.get("items") or [])
    if not items:  # nothing to cut: a part is never smaller than the whole record
        raise ReleaseTooLarge(
            f"release {record.get('release_id')}: {len(whole)} bytes without items to cut into parts, more than "
            f"kafka.release_message_max_bytes = {max_bytes}")
    base = {k: v for k, v in record.items() if k != "items"}
    # a part's size: the base with an empty items list and the widest part marker, plus its items and commas
    count_digits = len(str(len(items)))
    frame = len(encode({**base, "items": [], "part": {"index": 10 ** count_digits - 1,
                                                      "count": 10 ** count_digits - 1}}))
    slices: list[list[Any]] = []
    current: list[Any] = []
    size = frame
    for item in items:
        n = len(encode(item)) + (1 if current else 0)
        if current and size + n > max_bytes:
            slices.append(current)
            current, size = [], frame
            n -= 1
        if size + n > max_bytes:
            raise ReleaseTooLarge(
                f"release {record.get('release_id')}: one item with the record's other fields takes {size + n} "
                f"bytes, more than kafka.release_message_max_bytes = {max_bytes}; raise that setting (and the "
                "releases topic's max.message.bytes)")
        current.append(item)
        size += n
    slices.append(current)  # at least two: one part holding every item would be larger than the whole record
    return [encode({**base, "items": chunk, "part": {"index": i, "count": len(slices)}})
            for i, chunk in enumerate(slices)]


def join_parts(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The record that :func:`message_parts` cut into ``parts`` (decoded, any order, each index once): the
    fields of part 0 without ``part``, and the items of parts 0..count-1 in order."""
    by_index = {int(p["part"]["index"]): p for p in parts}
    count = int(parts[0]["part"]["count"])
    if sorted(by_index) != list(range(count)):
        raise ValueError(f"parts {sorted(by_index)} of {count} do not make a whole release")
    out = {k: v for k, v in by_index[0].items() if k != "part"}
    out["items"] = [item for i in range(count) for item in by_index[i]["items"]]
    return out
