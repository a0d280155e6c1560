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

**Layouts** (:data:`LAYOUTS`). ``"user"`` (the default, the only one the service runs today): a window shard
holds its users' bounding state *and* their counts, so a key's count is split over every shard. ``"key"``
(docs/design/key-sharded-counts.md; ``windows.layout = "key"``, written by ingest, not read by the release
worker yet): the bounding state stays in the user shards, and
the window's counts live in key shards ``{w:<start>:k<j>}``, ``j =`` :func:`key_shard_of` -- disjoint, each
key's whole count in one of them, so every release type can read shard by shard and merge exactly.

Window starts are integer epoch seconds.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

#: The name of the user → shard hash, recorded with the release schedule (a restart must use the same).
SHARD_HASH = "crc32-utf8"
#: The name of the key → key shard hash (layout ``"key"``), recorded with the schedule like :data:`SHARD_HASH`.
KEY_HASH = "crc32-utf8"
#: Where a window's counts live: with its users' bounding state (``"user"``), or in key shards (``"key"``).
LAYOUTS = ("user", "key")
#: The parts of one ledger scope, in the KEYS order of every ledger script (``lua/ledger_common.lua``).
LEDGER_SCOPE_PARTS = ("totals", "log", "charges", "outbox", "unpublished", "reservations", "res_results", "settled",
                      "cap")


def shard_of(user: str, shards: int) -> int:
    """The window shard holding ``user``'s bounding state: CRC-32 of the user id's UTF-8 bytes mod ``shards``.

    Stable across processes, restarts and Python versions (unlike ``hash``, which is salted per process);
    user ids reach here NFC-normalised by the decoder, so one user is one byte string.

    >>> shard_of("alice", 1), shard_of("alice", 12), shard_of("alice", 12) == shard_of("alice", 12)
    (0, 11, True)
    """
    return zlib.crc32(user.encode()) % shards if shards > 1 else 0


def key_shard_of(key: str, shards: int) -> int:
    """The key shard holding ``key``'s window count (layout ``"key"``): CRC-32 of the key's UTF-8 bytes mod
    ``shards``. Keys reach here NFC-normalised by the decoder, so one key is one byte string and lands in
    exactly one key shard: the key shards of a window are disjoint.

    >>> key_shard_of("/home", 1), key_shard_of("/home", 12) == key_shard_of("/home", 12)
    (0, True)
    """
    return zlib.crc32(key.encode()) % shards if shards > 1 else 0


@dataclass(frozen=True)
class Keys:
    """Key names under one ``prefix`` (``redis.key_prefix`` in the config), for windows split into
    ``shards`` shards (``windows.shards``) in one of the :data:`LAYOUTS` (``"user"`` unless told)."""

    prefix: str = "sdp"
    shards: int = 1
    layout: str = "user"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"window layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.shards < 1:
            raise ValueError(f"windows.shards must be >= 1, got {self.shards}")

    # --- one window ------------------------------------------------------------------------------
    def window_tag(self, start: int, shard: int = 0) -> str:
        """The hash tag of one window shard: ``{w:<start>}`` when windows are not sharded."""
        return f"{{w:{start}}}" if self.shards == 1 else f"{{w:{start}:{shard}}}"

    def window_counts(self, start: int, shard: int = 0) -> str:
        """Sorted set: key → number of distinct (bounded) users of the shard that touched it in the window
        (a key's window count is the sum over the shards)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:counts"

    def window_users(self, start: int, shard: int = 0) -> str:
        """String: the first segment of the shard's contribution-bounding log, counted ``user\\0key\\0`` pairs
        in apply order (written by ingest; read by its planner and by the release worker); segment ``n`` ≥ 1 is
        this name + ``:<n>`` (see ``store/lua/apply_window.lua``; encoding: :mod:`stream_dp.store.bounding_log`)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:users"

    def window_offsets(self, start: int, shard: int = 0) -> str:
        """Hash: Kafka partition → highest offset applied to this window shard."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:offsets"

    def window_meta(self, start: int, shard: int = 0) -> str:
        """Hash: window shard metadata (start, end, events applied, users bounded, state, log length; the
        states: :mod:`stream_dp.store.window_state`)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:meta"

    def window_pending(self, start: int, shard: int = 0) -> str:
        """Hash (layout ``"key"``, in the user shard): the chunks' accepted increments recorded by step 1 and
        not yet known to be counted in their key shards, field ``<partition>:<last offset>:<key shard>`` →
        JSON ``{key: increment}`` (``store/lua/apply_window.lua``; counted by ``count_keys.lua``, deleted once
        counted: :mod:`stream_dp.ingest.key_counter`)."""
        return f"{self.prefix}:{self.window_tag(start, shard)}:pending"

    # --- one key shard of a window (layout "key") -------------------------------------------------
    def key_shard_tag(self, start: int, shard: int) -> str:
        """The hash tag of key shard ``shard`` of the window starting at ``start``: ``{w:<start>:k<shard>}``
        (the ``k`` keeps key shards apart from the user shards ``{w:<start>:<i>}`` for any S)."""
        if not 0 <= shard < self.shards:
            raise ValueError(f"key shard {shard} outside 0..{self.shards - 1} (windows.shards = {self.shards})")
        return f"{{w:{start}:k{shard}}}"

    def key_shard_counts(self, start: int, shard: int) -> str:
        """Sorted set (layout ``"key"``): key → the window's whole count (distinct bounded users) of every key
        with :func:`key_shard_of` = ``shard``."""
        return f"{self.prefix}:{self.key_shard_tag(start, shard)}:counts"

    def key_shard_applied(self, start: int, shard: int) -> str:
        """Hash (layout ``"key"``): ``<user shard>:<partition>`` → the highest chunk offset of that source counted
        into this key shard (``store/lua/count_keys.lua``; at most S × partitions fields)."""
        return f"{self.prefix}:{self.key_shard_tag(start, shard)}:applied"

    def key_shard_meta(self, start: int, shard: int) -> str:
        """Hash (layout ``"key"``): the key shard's metadata (``state``: :mod:`stream_dp.store.window_state`)."""
        return f"{self.prefix}:{self.key_shard_tag(start, shard)}:meta"

    def key_shard(self, start: int, shard: int) -> list[str]:
        """The KEYS of ``count_keys.lua`` for one key shard: counts, applied, meta."""
        return [self.key_shard_counts(start, shard), self.key_shard_applied(start, shard),
                self.key_shard_meta(start, shard)]

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

    def topic_ids(self) -> str:
        """Hash: events topic name → the topic id its applied offsets belong to
        (:mod:`stream_dp.ingest.topic_identity`)."""
        return f"{self.prefix}:{{ingest}}:topic-ids"

    # --- ledger ----------------------------------------------------------------------------------
    def ledger(self, scope: str, part: str) -> str:
        """One part (``totals``, ``log``, ``charges``, ``reservations``…) of a ledger scope."""
        return f"{self.prefix}:{{ledger:{scope}}}:{part}"

    def ledger_scope(self, scope: str) -> list[str]:
        """Every part of a ledger scope, in the KEYS order of the ledger scripts (:data:`LEDGER_SCOPE_PARTS`)."""
        return [self.ledger(scope, part) for part in LEDGER_SCOPE_PARTS]

    def ledger_scopes(self) -> str:
        """Set: the index of ledger scopes ever written (``{ledger}`` tag)."""
        return f"{self.prefix}:{{ledger}}:scopes"

    def ledger_scopes_fence(self) -> str:
        """String: the write that ``WAIT`` confirms on the scope index's master (same slot as the index)."""
        return f"{self.prefix}:{{ledger}}:replicated"

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

    def svt_fence(self, name: str) -> str:
        """String: the write that ``WAIT`` confirms on the master of an alert stream's state (same slot)."""
        return f"{self.svt(name, 'state')}:replicated"
