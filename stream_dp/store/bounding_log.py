"""The contribution-bounding log of a window shard: the record format and the segment layout.

Ingest appends, with each chunk it counts, the counted ``(user, key)`` pairs to the shard's log
(:meth:`~stream_dp.store.keys.Keys.window_users`, ``lua/apply_window.lua``) in apply order, as
``user\\0key\\0`` in UTF-8; ingest's planner reads it back to catch up its cache, and the release worker reads
it for the per-user weights of the histogram (docs/privacy.md §8d). Both decode it here. The log is stored in
segments of at most ``log_segment_bytes`` (the meta field of that name; :data:`LOG_SEGMENT_BYTES` for a shard
that has none recorded), so no Redis value outgrows that size: :func:`log_pieces` says where a byte range is.
"""

from __future__ import annotations

#: Default segment size of a window shard's bounding log (``windows.log_segment_bytes``).
LOG_SEGMENT_BYTES = 64 << 20

#: Separator in the bounding log; the decoder rejects NUL in users and keys, so the log parses uniquely.
LOG_SEPARATOR = "\0"


def encode_log(pairs: list[str]) -> bytes:
    """``[user1, key1, user2, key2, ...]`` → the log record ``user1\\0key1\\0user2\\0key2\\0`` (UTF-8)."""
    return (LOG_SEPARATOR.join(pairs) + LOG_SEPARATOR).encode() if pairs else b""


class LogDecoder:
    """Decodes the bounding log piece by piece: :meth:`feed` any byte ranges in order, get the complete
    (user, key) pairs so far; a pair cut by a piece boundary is completed by the next piece. (NUL never
    occurs inside a UTF-8 multi-byte sequence, so cutting at NUL bytes never splits a character.)"""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        buf = self._carry + data if self._carry else data
        sep = LOG_SEPARATOR.encode()
        end = buf.rfind(sep)
        if end < 0:
            self._carry = buf
            return []
        fields = buf[:end].split(sep)
        if len(fields) % 2:  # the last complete field is a user whose key is still to come
            cut = end - len(fields[-1])
            fields.pop()
            self._carry = buf[cut:]
        else:
            self._carry = buf[end + 1:]
        text = [f.decode() for f in fields]
        return list(zip(text[0::2], text[1::2]))

    def finish(self) -> None:
        """Raise ValueError unless everything fed ended on a pair boundary."""
        if self._carry:
            raise ValueError(f"bounding log: {len(self._carry)} trailing bytes do not end on a (user, key) pair "
                             "boundary")


def decode_log(raw: bytes) -> list[tuple[str, str]]:
    """Inverse of :func:`encode_log` (for any concatenation of records)."""
    if not raw:
        return []
    parts = raw.decode().split(LOG_SEPARATOR)
    if parts[-1] != "" or len(parts) % 2 != 1:
        raise ValueError(f"bounding log: {len(raw)} bytes do not end on a (user, key) pair boundary")
    return list(zip(parts[0:-1:2], parts[1:-1:2]))


def log_pieces(first_segment: str, segment_bytes: int, start: int, stop: int) -> list[tuple[str, int, int]]:
    """Where bytes ``[start, stop)`` of a segmented bounding log are: ``(segment key, first, last)`` for
    ``GETRANGE`` (inclusive), in order. Segment ``i`` holds bytes ``[i·segment_bytes, (i+1)·segment_bytes)``
    under ``first_segment`` (i = 0) or ``first_segment:<i>``.

    >>> log_pieces("u", 10, 5, 25)
    [('u', 5, 9), ('u:1', 0, 9), ('u:2', 0, 4)]
    """
    out = []
    at = start
    while at < stop:
        i = at // segment_bytes
        upto = min(stop, (i + 1) * segment_bytes)
        out.append((first_segment if i == 0 else f"{first_segment}:{i}", at - i * segment_bytes,
                    upto - i * segment_bytes - 1))
        at = upto
    return out
