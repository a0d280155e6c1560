"""What a budget scope of the ledger holds, read: its accounts, its outbox, and its verification.

Per scope (a budget period such as ``2026-11-29``, :func:`~stream_dp.accounting.budget.scope_for`, or the
``lifetime`` scope) Redis holds the committed totals (ρ, δ of approximate zCDP and Σε, Σδ of basic
composition), the open reservations, the cap the scope was first charged under, an append-only event log,
the first result of every release id, the stored release payloads (the outbox) and the releases not yet
published. :class:`LedgerView` reads them -- never writes: ``stream-dp budget``, the outbox's recovery of
stored releases, and :meth:`~LedgerView.verify`, which recomputes the totals from the log
(:func:`~stream_dp.accounting.ledger_log.check_scope`) so a ledger whose totals do not add up, or that spent
beyond its cap, is found (docs/privacy.md §4). The writes are :class:`stream_dp.accounting.ledger.Ledger`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.charge_result import ChargeResult
from stream_dp.accounting.ledger_log import (Cost, HistoryEntry, VerifyReport, as_dict, check_scope, decode,
                                             history_entry, stored_totals)
from stream_dp.accounting.ledger_scripts import ScopeScripts
from stream_dp.accounting.period_caps import stored_cap
from stream_dp.node_batches import Reads
from stream_dp.store.keys import Keys


class LedgerView:
    """Reads of the ledger's scopes through ``slot`` (its Redis client, key layout and the caps results are
    reported under)."""

    def __init__(self, slot: ScopeScripts) -> None:
        self._slot = slot

    # read from the slot, never copied: every step of the ledger sees the same client and layout
    @property
    def redis(self) -> redis.Redis:
        """The Redis client of the ledger's scripts."""
        return self._slot.redis

    @property
    def keys(self) -> Keys:
        """The key layout of the ledger's scopes."""
        return self._slot.keys

    # --- the outbox -------------------------------------------------------------------------------
    def stored(self, scope: str, release_id: str) -> str | None:
        """The payload stored with release ``release_id`` (None if never charged with one)."""
        value = self.redis.hget(self.keys.ledger(scope, "outbox"), release_id)
        return None if value is None else decode(value)

    def stored_many(self, scope: str, release_ids: Sequence[str]) -> Reads:
        """:meth:`stored` of several release ids of one scope as one read (``HMGET``): ``.now()`` sends it in a
        round trip of its own, or it goes in a batch with others; parses to ``{release id: payload or None}``."""
        ids, outbox = list(release_ids), self.keys.ledger(scope, "outbox")

        def parse(replies: list[Any]) -> dict[str, str | None]:
            values = replies[0] if replies else []
            return {rid: None if v is None else decode(v) for rid, v in zip(ids, values)}

        return Reads([(outbox, lambda pipe: pipe.hmget(outbox, ids))] if ids else [], parse, client=self.redis)

    def unpublished(self, scope: str) -> list[str]:
        """Release ids charged with a payload and not yet marked published, in charge order."""
        return [decode(v) for v in self.redis.zrange(self.keys.ledger(scope, "unpublished"), 0, -1)]

    # --- the accounts -----------------------------------------------------------------------------
    def scopes(self) -> list[str]:
        """Every scope that has been charged or reserved in (sorted)."""
        return sorted(decode(v) for v in self.redis.smembers(self._slot.index_key()))

    def stored_cap(self, scope: str) -> BudgetCap | None:
        """The cap ``scope`` was first charged under (None: not charged yet, so the configured cap applies)."""
        return stored_cap(as_dict(self.redis.hgetall(self._slot.scope_keys(scope)[8])), scope)

    def remaining(self, scope: str) -> ChargeResult:
        """The scope's current state as a :class:`ChargeResult` (committed + open reservations), under its
        stored cap (the configured one for a scope not charged yet)."""
        keys = self._slot.scope_keys(scope)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(keys[0])
        pipe.hgetall(keys[5])
        pipe.hgetall(keys[8])
        totals, holds, cap = (as_dict(reply) for reply in pipe.execute())
        total = stored_totals(totals)
        for rid in sorted(holds, key=decode):  # the scripts' order: sorted reservation ids
            total = total + Cost.from_string(decode(holds[rid]))
        fields = {**total.__dict__, "accepted": True, "reason": "ok", "cap": cap}
        return self._slot.result(scope, False, fields, None)

    def open_reservations(self, scope: str) -> int:
        """Number of reservations of the scope not yet settled or cancelled."""
        return int(self.redis.hlen(self._slot.scope_keys(scope)[5]))

    def history(self, scope: str, *, count: int | None = None) -> list[HistoryEntry]:
        """The scope's event log, oldest first (``count``: at most that many entries)."""
        entries = self.redis.xrange(self.keys.ledger(scope, "log"), count=count) or []
        return [history_entry(entry_id, fields) for entry_id, fields in entries]

    # --- verification -----------------------------------------------------------------------------
    def verify(self, scope: str) -> VerifyReport:
        """Recompute the committed totals and the open reservations from the event log; compare.

        Sums are recomputed in log order with the same float additions the scripts made, so a consistent
        ledger matches exactly. Also re-derives each entry's cost from its logged DP events, and checks the
        recomputed spend against the scope's stored cap (:func:`~stream_dp.accounting.period_caps.overspend_problems`).
        """
        keys = self._slot.scope_keys(scope)
        pipe = self.redis.pipeline(transaction=True)  # one consistent snapshot
        pipe.xrange(keys[1])
        pipe.hgetall(keys[0])
        pipe.hkeys(keys[2])
        pipe.hkeys(keys[5])
        pipe.hkeys(keys[3])
        pipe.zrange(keys[4], 0, -1)
        pipe.hgetall(keys[8])
        log, totals, charged, holds, outbox, unpublished, cap_fields = pipe.execute()
        return check_scope(scope, log, totals, charged, holds, outbox, unpublished,
                           stored_cap(as_dict(cap_fields), scope))
