"""Each release handed out whole and once: parts of a release too large for one message joined, and a release
republished after a crash (same ``release_id``, same bytes) recognised by its id."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from stream_dp.wire import join_parts

log = logging.getLogger(__name__)

DEFAULT_SEEN_CAPACITY = 100_000  # release ids remembered for de-duplication (a year of hourly windows x 10 types)


class SeenIds:
    """Release ids already handed out, the most recent ``capacity`` of them (oldest forgotten first)."""

    def __init__(self, capacity: int = DEFAULT_SEEN_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def first_time(self, release_id: str) -> bool:
        """True the first time ``release_id`` is offered (and remembers it), False afterwards."""
        if release_id in self._ids:
            self._ids.move_to_end(release_id)
            return False
        self._ids[release_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True


class PartJoiner:
    """Joins the part messages of releases too large for one message (field ``part``; the publisher sends a
    release's parts one after the other on its partition, :func:`stream_dp.wire.message_parts`).

    Per partition at most one release is being joined. A message of another release on that partition ends
    it: the publisher was interrupted between two parts (a crash, a failed send), and it publishes that
    release again, whole, later. Parts of one release seen twice (such a republication) are the same bytes."""

    def __init__(self) -> None:
        self._open: dict[Any, tuple[str, int, dict[int, dict[str, Any]]]] = {}  # partition -> (id, offset, parts)

    def offer(self, partition: Any, offset: int, record: dict[str, Any]) -> dict[str, Any] | None:
        """``record`` itself when it is whole; for a part, None until the release's last part, then the
        joined record (:func:`~stream_dp.wire.join_parts`)."""
        rid = record["release_id"]
        current = self._open.get(partition)
        if current is not None and current[0] != rid:
            log.warning("release %s: only parts %s of %d arrived before release %s; it is published again whole",
                        current[0], sorted(current[2]), next(iter(current[2].values()))["part"]["count"], rid)
            del self._open[partition]
            current = None
        part = record.get("part")
        if part is None:
            return record
        if current is None:
            current = self._open[partition] = (rid, offset, {})
        current[2][int(part["index"])] = record
        if len(current[2]) < int(part["count"]):
            return None
        del self._open[partition]
        return join_parts(list(current[2].values()))

    def first_offset(self, partition: Any) -> int | None:
        """The offset of the first part of the release being joined on ``partition`` (None: none is)."""
        current = self._open.get(partition)
        return None if current is None else current[1]
