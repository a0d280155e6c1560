"""Redis key layout, in one place.

Every key starts with the configured prefix and carries a hash tag ``{...}`` so that a Redis Cluster
places what one atomic step touches in one slot:

- everything of one window (counts, per-user bounding state, per-partition applied offsets, metadata)
  shares the tag ``{w:<start>}`` -- an ingest batch's increments and its offset record for that window
  are applied by one Lua script;
- ingest progress (watermarks, the index of known windows) shares ``{ingest}``;
- each ledger scope shares ``{ledger:<scope>}`` -- a charge is one Lua script over that scope;
- the release-worker bookkeeping shares ``{release}`` (stored releases live in their ledger scope);
- the online sparse-vector state shares ``{svt:<name>}``.

Window starts are integer epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """Key names under one ``prefix`` (``redis.key_prefix`` in the config)."""

    prefix: str = "sdp"

    # --- one window ------------------------------------------------------------------------------
    def window_counts(self, start: int) -> str:
        """Sorted set: key → number of distinct (bounded) users that touched it in the window."""
        return f"{self.prefix}:{{w:{start}}}:counts"

    def window_users(self, start: int) -> str:
        """String: the window's contribution-bounding log, counted ``user\0key\0`` pairs in apply order
        (ingest-internal)."""
        return f"{self.prefix}:{{w:{start}}}:users"

    def window_offsets(self, start: int) -> str:
        """Hash: Kafka partition → highest offset applied to this window."""
        return f"{self.prefix}:{{w:{start}}}:offsets"

    def window_meta(self, start: int) -> str:
        """Hash: window metadata (start, end, events applied, users bounded, state)."""
        return f"{self.prefix}:{{w:{start}}}:meta"

    def window_claim(self, start: int) -> str:
        """String: the release worker's claim on the window (fencing token, with an expiry)."""
        return f"{self.prefix}:{{w:{start}}}:claim"

    # --- ingest progress -------------------------------------------------------------------------
    def windows_index(self) -> str:
        """Sorted set of window starts seen by ingest (member and score = start)."""
        return f"{self.prefix}:{{ingest}}:windows"

    def schedule(self) -> str:
        """String (JSON): the public release schedule, ``{"start": ..., "size": ...}``, recorded once."""
        return f"{self.prefix}:{{ingest}}:schedule"

    def watermarks(self) -> str:
        """Hash: partition → watermark (epoch seconds), plus field ``global`` (min over active ones)."""
        return f"{self.prefix}:{{ingest}}:watermarks"

    # --- ledger ----------------------------------------------------------------------------------
    def ledger(self, scope: str, part: str) -> str:
        """One part (``totals``, ``log``, ``charges``, ``reservations``…) of a ledger scope."""
        return f"{self.prefix}:{{ledger:{scope}}}:{part}"

    # --- releases --------------------------------------------------------------------------------
    def release_index(self, part: str) -> str:
        """Release-worker bookkeeping (``unpublished``, ``published``, ``claims``…)."""
        return f"{self.prefix}:{{release}}:{part}"

    def svt(self, name: str, part: str) -> str:
        """Online sparse-vector state of one alert stream."""
        return f"{self.prefix}:{{svt:{name}}}:{part}"
