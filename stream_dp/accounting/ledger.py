"""The durable privacy-budget ledger in Redis: a privacy filter per budget scope.

Every release is paid for before anyone can see it, exactly once. Per scope (a budget period such as
``2026-11-29``, see :func:`scope_for`; optionally also the ``lifetime`` scope) Redis holds the committed
totals (ρ, δ of approximate zCDP and Σε, Σδ of basic composition), an append-only event log (a stream with
one entry per charge, reservation, settlement and cancellation), the first result of every release id, the
stored release payloads (the outbox) and the open reservations. The guarantee and its argument:
docs/privacy.md §4 ("Charged before visible, exactly once"); the composition it sums: §3.

Each operation is ONE Lua script over keys of one hash tag ``{ledger:<scope>}`` (cluster-friendly): it
checks the cap with the rule of :mod:`stream_dp.accounting.budget`, and only then writes totals, log, first
result and payload together. A refused charge writes nothing. A repeated charge of a release id is a no-op
that returns the FIRST result and the FIRST stored payload, so a worker that lost a race publishes the
stored record and never its own fresh noise. A reservation counts against the cap until it is settled or
cancelled, so a crash between reserve and settle can only make the ledger over-count (the user's favour
is never taken).

Lifetime scope (``lifetime_cap``): a charge must fit both the period scope and the ``lifetime`` scope,
which live in different slots and so cannot share one script. The order is: (1) hold the cost in the
lifetime scope (reservation id ``<scope>/<release id>``), (2) charge the period scope, (3) settle the hold
(period accepted) or cancel it (period refused: nothing was stored, nothing can be published). A crash
after (1) leaves the hold counted; after (2) the stored release can be published and the lifetime still
counts it as a hold. Both are over-counts; a retry of the same release id completes the steps
idempotently. No order of crashes lets a release be stored without being counted in both scopes.

Failover (``replication``, :mod:`stream_dp.replication`): :meth:`confirm` is the step between "stored" and
"published" -- the outbox calls it right before it sends a release (:meth:`Outbox.publish
<stream_dp.release.outbox.Outbox.publish>`), so *published ⇒ charge (and stored release) on
``redis.min_replicas_acked`` replicas* (:mod:`stream_dp.accounting.ledger_confirm`).

This module is the write protocol over one or two scopes (:class:`Ledger`, :class:`LedgerStep`); one
script on one scope is :mod:`stream_dp.accounting.ledger_scripts`'; the reads (accounts, outbox,
verification) are :class:`~stream_dp.accounting.ledger_view.LedgerView`'s, which :class:`Ledger` extends.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from stream_dp.accounting import ledger_confirm
from stream_dp.accounting.budget import (
    LIFETIME_SCOPE,
    BudgetCap,
    check_budget_covers,
    scope_for,
)
from stream_dp.accounting.charge_result import ChargeResult
from stream_dp.accounting.events import DpEvent
from stream_dp.accounting.ledger_log import Cost, HistoryEntry, VerifyReport
from stream_dp.accounting.ledger_scripts import ScopeScripts, lifetime_hold_id
from stream_dp.accounting.ledger_view import LedgerView
from stream_dp.accounting.period_caps import CapNotices
from stream_dp.node_batches import Pending, RideAlong
from stream_dp.replication import NO_REPLICATION, ReplicationPolicy
from stream_dp.store.keys import Keys

__all__ = [
    "BudgetCap",
    "ChargeResult",
    "Cost",
    "HistoryEntry",
    "Ledger",
    "LedgerStep",
    "VerifyReport",
    "check_budget_covers",
    "scope_for",
]


@dataclass(frozen=True)
class LedgerStep:
    """One ledger operation (``charge``, ``reserve`` or ``settle``; :meth:`Ledger.step`), its arguments checked
    once, and the two ways to send it -- the same script with the same guarantees either way:

    - :meth:`now`: run it (the commands queued on ``ride`` go in the same round trip: writes ahead, reads
      after); with a lifetime cap a costly step is several scripts in two slots, run in their order;
    - :meth:`later`: queue its one script on a :class:`~stream_dp.node_batches.RideAlong`, to go after the
      ride's next step; None when it cannot be one command now (:meth:`Ledger.queueable`)."""

    ledger: Ledger
    op: str
    scope: str
    events: list[DpEvent]
    events_json: str
    release_id: str | None = None
    reservation_id: str | None = None
    payload: str | None = None

    def now(self, ride: RideAlong | None = None) -> ChargeResult:
        run = {"charge": self.ledger._charge_now, "reserve": self.ledger._reserve_now,
               "settle": self.ledger._settle_now}[self.op]
        return run(self, ride)

    def later(self, ride: RideAlong) -> Pending | None:
        if not self.ledger.queueable(self.scope, self.events):
            return None
        return ride.read(self.ledger._slot.queued(self.op, self.scope, self.argv()))

    def argv(self) -> list[str]:
        """The ARGV of the step's one script on its own scope: the ids and the payload its operation takes."""
        return self.ledger._slot.cost_argv(self.op, self.scope, self.events, self.events_json,
                                           release_id=None if self.op == "reserve" else self.release_id,
                                           reservation_id=None if self.op == "charge" else self.reservation_id,
                                           payload=None if self.op == "reserve" else self.payload)


def checked_events(events: Iterable[DpEvent], *, allow_empty: bool = False) -> tuple[list[DpEvent], str]:
    """``events`` as a list of DP events and their JSON, as the scripts log them (``ValueError`` otherwise)."""
    events = list(events)
    if not events and not allow_empty:
        raise ValueError("a charge needs at least one DP event")
    for e in events:
        if not isinstance(e, DpEvent):
            raise ValueError(f"not a DP event: {e!r}")
    return events, json.dumps([e.to_dict() for e in events], separators=(",", ":"))


def _check_id(name: str, value: str | None) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


class Ledger(LedgerView):
    """Budget ledger over ``redis_client`` with the configured period cap ``cap`` (and optionally a lifetime
    cap): the cap a scope stores with its first write; a scope already written keeps its stored cap
    (:mod:`stream_dp.accounting.period_caps`).

    Scope names are free strings without braces; :func:`scope_for` makes the period ones.
    """

    def __init__(self, redis_client: redis.Redis, cap: BudgetCap, *, keys: Keys = Keys(),
                 lifetime_cap: BudgetCap | None = None, replication: ReplicationPolicy = NO_REPLICATION,
                 cap_notices: CapNotices | None = None) -> None:
        # cap_notices: "this scope keeps its stored cap" (a config that differs applies from the next period),
        # once per scope
        super().__init__(ScopeScripts(redis_client, cap, keys=keys, lifetime_cap=lifetime_cap,
                                      replication=replication,
                                      cap_notices=cap_notices if cap_notices is not None else CapNotices()))

    # The settings live on the scripts' slot, the one object every operation and the confirm step read: a
    # copy here would let a caller's later assignment (the release service sets the replication policy
    # once it has connected) reach some steps and not others.
    @property
    def cap(self) -> BudgetCap:
        """The configured period cap (a scope already written keeps the cap it stored)."""
        return self._slot.cap

    @cap.setter
    def cap(self, cap: BudgetCap) -> None:
        self._slot.cap = cap

    @property
    def lifetime_cap(self) -> BudgetCap | None:
        """The configured lifetime cap, if any."""
        return self._slot.lifetime_cap

    @lifetime_cap.setter
    def lifetime_cap(self, cap: BudgetCap | None) -> None:
        self._slot.lifetime_cap = cap

    @property
    def replication(self) -> ReplicationPolicy:
        """How many replicas must hold a charge before its release is published (``redis.min_replicas_acked``)."""
        return self._slot.replication

    @replication.setter
    def replication(self, policy: ReplicationPolicy) -> None:
        self._slot.replication = policy

    @property
    def scripts(self) -> tuple[Any, ...]:
        """The ledger's Lua scripts (charge, reserve, settle, cancel), e.g. to load them when a worker starts."""
        return self._slot.scripts

    def index_ahead(self, scope: str) -> None:
        """Put ``scope`` in the scope index before its first operation, so that operation can be one queued
        command (:meth:`queueable`) instead of an ``SADD`` of its own followed by its script. The release
        worker calls it while idle for the window it expects next (the first window of each budget period
        would otherwise take the slow path). An indexed scope may stay empty; nothing else changes.

        With ``redis.min_replicas_acked`` > 0 the ``SADD`` goes with the index's fence and a ``WAIT`` (as in
        :meth:`confirm`), and the scope counts as indexed only once replicated (:class:`NotReplicated`
        otherwise: the first operation then adds it itself)."""
        self._slot.scope_keys(scope)  # the scope's name is checked here too
        if scope in self._slot.indexed:
            return
        if self.replication.replicas:
            ledger_confirm.confirm_indexed(self._slot, [scope], fence_value=f"index:{scope}")
        else:
            self.redis.sadd(self._slot.index_key(), scope)
            self._slot.indexed.add(scope)

    def queueable(self, scope: str, events: Sequence[DpEvent]) -> bool:
        """Whether an operation of ``events`` on ``scope`` can be one queued command now (:meth:`LedgerStep.later`):
        not with a lifetime cap (a costly operation is then several scripts in two slots, in an order that
        matters), nor before the scope is known to be indexed (that takes a write first)."""
        return ((self.lifetime_cap is None or scope == LIFETIME_SCOPE or not events)
                and scope in self._slot.indexed)

    def step(self, op: str, scope: str, events: Iterable[DpEvent], *, release_id: str | None = None,
             reservation_id: str | None = None, payload: str | None = None) -> LedgerStep:
        """The ledger operation ``op`` (``charge``: ``release_id``; ``reserve``: ``reservation_id``; ``settle``:
        both) checked once, as a :class:`LedgerStep` to run now or to queue after another step. ``charge``
        with a ``payload`` may have no events (a zero-cost record); the others need at least one."""
        if op not in ("charge", "reserve", "settle"):
            raise ValueError(f"not a ledger operation: {op!r}")
        if op != "charge":
            _check_id("reservation_id", reservation_id)
        if op != "reserve":
            _check_id("release_id", release_id)
        if payload is not None and not isinstance(payload, str):
            raise ValueError("payload must be a string (the serialised release record) or None")
        checked, events_json = checked_events(events, allow_empty=op == "charge" and payload is not None)
        return LedgerStep(self, op, scope, checked, events_json, release_id, reservation_id, payload)

    # --- the operations ---------------------------------------------------------------------------
    def charge(self, scope: str, release_id: str, events: Iterable[DpEvent], *,
               payload: str | None = None, ride: RideAlong | None = None) -> ChargeResult:
        """Charge ``events`` to ``scope`` as release ``release_id`` and store ``payload`` with it, atomically
        (:meth:`step` ``charge``, run now; ``ride``'s commands in its round trip).

        Refused (``accepted=False``, ``reason`` says which cap) when the cost does not fit: nothing is
        written. Idempotent: a repeat returns the first result and the first payload (``duplicate=True``).
        With a ``payload``, ``events`` may be empty: a zero-cost record (a budget-exhausted status record, or
        an alerts release whose sparse-vector instance was charged when it opened) is stored and published
        through the same idempotent outbox, so a release id never gets two different records. An open hold
        under the same id (:meth:`reserve`) is dropped when the charge is accepted: nothing else can be
        published under the id any more, and a hold that nothing settles would count against the cap for good.
        """
        return self.step("charge", scope, events, release_id=release_id, payload=payload).now(ride)

    def reserve(self, scope: str, reservation_id: str, events: Iterable[DpEvent], *,
                ride: RideAlong | None = None) -> ChargeResult:
        """Hold the maximum cost ``events`` before running a mechanism whose final cost is known only after
        (:meth:`step` ``reserve``, run now).

        The hold counts against the cap until :meth:`settle` (or :meth:`cancel`). Idempotent per
        reservation id (a repeat returns the first result; if already settled, the settled charge; an id
        already charged as a release -- e.g. a status record -- returns that charge and holds nothing).
        """
        return self.step("reserve", scope, events, reservation_id=reservation_id).now(ride)

    def settle(self, scope: str, reservation_id: str, release_id: str, events: Iterable[DpEvent], *,
               payload: str | None = None, ride: RideAlong | None = None) -> ChargeResult:
        """Replace reservation ``reservation_id`` by the actual cost ``events``, charged as ``release_id``,
        and store ``payload`` -- one atomic step (:meth:`step` ``settle``, run now). Refused with
        ``unknown_reservation`` if there is no such hold; a repeat returns the first result and payload."""
        return self.step("settle", scope, events, release_id=release_id, reservation_id=reservation_id,
                         payload=payload).now(ride)

    def cancel(self, scope: str, reservation_id: str) -> bool:
        """Drop an open reservation. ONLY for a hold whose mechanism never ran or whose output was
        discarded unseen (never stored, never published); otherwise settle it. True if one was dropped."""
        _check_id("reservation_id", reservation_id)
        return self._slot.cancel(scope, reservation_id)

    # --- over two scopes: the period and the lifetime -------------------------------------------------
    def _lifetime(self, op: str, s: LedgerStep, hold_id: str) -> ChargeResult:
        """The script ``op`` of step ``s`` on the lifetime scope for the hold ``hold_id``, which is both its
        reservation id and (settled or charged) its release id; the lifetime scope stores no payload."""
        argv = self._slot.cost_argv(op, LIFETIME_SCOPE, s.events, s.events_json,
                                    release_id=None if op == "reserve" else hold_id,
                                    reservation_id=None if op == "charge" else hold_id)
        return self._slot.run(op, LIFETIME_SCOPE, argv)

    def _charge_now(self, s: LedgerStep, ride: RideAlong | None) -> ChargeResult:
        assert s.release_id is not None
        if self.lifetime_cap is None or s.scope == LIFETIME_SCOPE or not s.events:  # zero cost: no lifetime hold
            return self._slot.run("charge", s.scope, s.argv(), ride)
        self._ride_alone(ride)
        hold_id = lifetime_hold_id(s.scope, s.release_id)
        life = self._lifetime("reserve", s, hold_id)
        if not life.accepted:
            return self._refused_by_lifetime(s.scope, life)
        result = self._slot.run("charge", s.scope, s.argv())
        if result.accepted:
            self._lifetime("settle", s, hold_id)
        else:
            self.cancel(LIFETIME_SCOPE, hold_id)
        return result

    def _reserve_now(self, s: LedgerStep, ride: RideAlong | None) -> ChargeResult:
        assert s.reservation_id is not None
        if self.lifetime_cap is None or s.scope == LIFETIME_SCOPE:
            return self._slot.run("reserve", s.scope, s.argv(), ride)
        self._ride_alone(ride)
        hold_id = lifetime_hold_id(s.scope, s.reservation_id)
        life = self._lifetime("reserve", s, hold_id)
        if not life.accepted:
            return self._refused_by_lifetime(s.scope, life)
        result = self._slot.run("reserve", s.scope, s.argv())
        if not result.accepted:
            self.cancel(LIFETIME_SCOPE, hold_id)
        return result

    def _settle_now(self, s: LedgerStep, ride: RideAlong | None) -> ChargeResult:
        assert s.reservation_id is not None and s.release_id is not None
        if self.lifetime_cap is not None and s.scope != LIFETIME_SCOPE:
            self._ride_alone(ride)
            hold_id = lifetime_hold_id(s.scope, s.reservation_id)
            # lifetime first: it then counts the actual cost, while the period still holds the maximum
            life = self._lifetime("settle", s, hold_id)
            if life.reason == "unknown_reservation":  # e.g. reserved before the lifetime scope was enabled
                life = self._lifetime("charge", s, hold_id)
            if not life.accepted:  # the actual cost exceeds the hold and does not fit: nothing may be stored
                return self._refused_by_lifetime(s.scope, life)
        return self._slot.run("settle", s.scope, s.argv(), ride)

    def _ride_alone(self, ride: RideAlong | None) -> None:
        """With a lifetime cap one operation is several scripts in two slots: the ride-along goes in a round
        trip of its own first (its writes still before the operation, its reads independent of it)."""
        if ride:
            ride.run(self.redis)

    def _refused_by_lifetime(self, scope: str, life: ChargeResult) -> ChargeResult:
        period = self.remaining(scope)
        return ChargeResult(False, False, f"lifetime_{life.reason}", period.spent, period.epsilon_spent,
                            period.delta_spent, period.epsilon_remaining, period.delta_remaining, None, scope,
                            period.cap)

    # --- before and after publishing ----------------------------------------------------------------
    def confirm(self, scope: str, release_id: str, *, events: Iterable[DpEvent] = ()) -> None:
        """Return once everything the ledger holds for ``scope`` (the charge and stored payload of
        ``release_id`` included), its lifetime hold and the scope index are on ``replication.replicas``
        replicas; raise :class:`~stream_dp.replication.NotReplicated` (transient) when they are not within
        ``redis.replication_timeout_ms``, or when a failover lost the charge before it was replicated. A no-op
        with 0 replicas. Call it before acting on a charge (publishing its release); ``events`` are the
        release's DP events (empty for a zero-cost record, which has no lifetime hold). How, and why it is
        enough: :mod:`stream_dp.accounting.ledger_confirm`."""
        if not self.replication.replicas:
            return
        checked, events_json = checked_events(events, allow_empty=True)
        ledger_confirm.confirm(self._slot, scope, release_id, checked, events_json)

    def mark_published(self, scope: str, release_id: str, *, ride: RideAlong | None = None,
                       on_sent: Any = None) -> None:
        """Record that the stored release was published (removes it from :meth:`unpublished`).

        With ``ride``, the ``ZREM`` is queued to go ahead of the caller's next Redis step instead of
        taking a round trip of its own (``on_sent`` runs once it went); until then the release counts as
        unpublished -- a crash in between republishes the stored record, as a crash before the mark does."""
        key = self.keys.ledger(scope, "unpublished")
        if ride is None:
            self.redis.zrem(key, release_id)
            if on_sent is not None:
                on_sent()
            return
        ride.write((key, lambda pipe: pipe.zrem(key, release_id)), on_sent=on_sent)
