"""Redis key layout, in one place.

Every key starts with the configured prefix and carries a hash tag ``{...}`` so that a Redis Cluster
places what one atomic step touches in one slot:

- everything of one window shard (counts, per-user bounding state, per-partition applied offsets,
  metadata) shares one tag -- an ingest batch's increments and its offset record for that (window, shard)
  are applied by one Lua script. With ``windows.shards = 1`` (the default) the tag is ``{w:<start>}``;
  with S > 1 shard ``i`` of the window is ``{w:<start>:<i>}``, so a Redis Cluster spreads one window over
  its masters. A user's events always go to shard :func:`shard_of` (a stable hash of the user id), so all
  of one user's bounding state is in one shard. The release worker's claim on a window keeps ``{w:<start>}``;
- ingest progress (watermarks, the index of known windows) shares ``{ingest}``;
- each ledger scope shares ``{ledger:<scope>}`` -- a charge is one Lua script over that scope;
- the release-worker bookkeeping shares ``{release}`` (stored releases live in their ledger scope);
- the online sparse-vector state shares ``{svt:<name>}``.

Window starts are integer epoch seconds.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

#: The name of the user → shard hash, recorded with the release schedule (a restart must use the same).
SHARD_HASH = "crc32-utf8"


def shard_of(user: str, shards: int) -> int:
    """The window shard holding ``user``'s bounding state: CRC-32 of the user id's UTF-8 bytes mod ``shards``.

    Stable across processes, restarts and Python versions (unlike ``hash``, which is salted per process);
    user ids reach here NFC-normalised by the decoder, so one user is one byte string.

    >>> shard_of("alice", 1), shard_of("alice", 12), shard_of("alice", 12) == shard_of("alice", 12)
    (0, 11, True)
    """
    return zlib.crc32(user.encode()) % shards if shards > 1 else 0


@dataclass(frozen=True)
class Keys:
    """Key names under one ``prefix`` (``redis.key_prefix`` in the config), for windows split into
    ``shards`` shards (``windows.shards``)."""

    prefix: str = "sdp"
    shards: int = 1

    # --- one window ------------------------------------------------------------------------------
    def window_tag(self, start: int, shard: int = 0) -> str:
        """The hash tag of one window shard: ``{w:<start>}`` when windows are not sharded."""
        return f"{{w:{start}}}" if self.shards == 1 else f"{{w:{start}:{shard}}}"

    def window_counts(self, start: int, shard: int = 0) -> str:
        """Sorted set: key → number of distinct (bounded) users of the shard that touched it in the window
        (a key's window count is the sum over the shards)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:counts"

    def window_users(self, start: int, shard: int = 0) -> str:
        """String: the first segment of the shard's contribution-bounding log, counted ``user\0key\0`` pairs
        in apply order (ingest-internal); segment ``n`` ≥ 1 is this name + ``:<n>`` (see
        ``ingest/lua/apply_window.lua``)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:users"

    def window_offsets(self, start: int, shard: int = 0) -> str:
        """Hash: Kafka partition → highest offset applied to this window shard."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:offsets"

    def window_meta(self, start: int, shard: int = 0) -> str:
        """Hash: window shard metadata (start, end, events applied, users bounded, state, log length)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:meta"

    def window_released(self, start: int) -> str:
        """String: set once the window's releases are published (fenced by the claim, same tag)."""
        return f"{self.prefix}:{{w:{start}}}:released"

    def window_claim(self, start: int) -> str:
        """String: the release worker's claim on the window (fencing token, with an expiry)."""
        return f"{self.prefix}:{{w:{start}}}:claim"

    # --- ingest progress -------------------------------------------------------------------------
    def windows_index(self) -> str:
        """Sorted set of window starts seen by ingest (member and score = start)."""
        return f"{self.prefix}:{{ingest}}:windows"

    def ingest_epoch(self) -> str:
        """String (JSON): the marker that Redis still holds ingest's state, written with its first start
        (:mod:`stream_dp.state_epochs`); gone with a Redis that lost its data."""
        return f"{self.prefix}:{{ingest}}:epoch"

    def schedule(self) -> str:
        """String (JSON): the public release schedule, ``{"start": ..., "size": ...}``, recorded once."""
        return f"{self.prefix}:{{ingest}}:schedule"

    def watermarks(self) -> str:
        """Hash: partition → watermark (epoch seconds), plus field ``global`` (min over active ones)."""
        return f"{self.prefix}:{{ingest}}:watermarks"

    def window_closes(self) -> str:
        """Stream: one entry (field ``watermark``) each time the global watermark passes the end of a scheduled
        window, written by ingest in the step that installs the watermark (capped at about 64 entries). The
        release worker blocks on it between passes instead of waiting out its poll interval."""
        return f"{self.prefix}:{{ingest}}:closes"

    # --- ledger ----------------------------------------------------------------------------------
    def ledger(self, scope: str, part: str) -> str:
        """One part (``totals``, ``log``, ``charges``, ``reservations``…) of a ledger scope."""
        return f"{self.prefix}:{{ledger:{scope}}}:{part}"

    def ledger_epoch(self) -> str:
        """String (JSON): the marker that Redis still holds the ledger (same slot as the scope index),
        compared with the releases topic when a release worker starts (:mod:`stream_dp.state_epochs`)."""
        return f"{self.prefix}:{{ledger}}:epoch"

    # --- releases --------------------------------------------------------------------------------
    def release_index(self, part: str) -> str:
        """Release-worker bookkeeping (``unpublished``, ``published``, ``claims``…)."""
        return f"{self.prefix}:{{release}}:{part}"

    def svt(self, name: str, part: str) -> str:
        """Online sparse-vector state of one alert stream."""
        return f"{self.prefix}:{{svt:{name}}}:{part}"
