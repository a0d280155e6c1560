"""What the release side needs from the budget ledger, as Protocols (the seam between release and accounting).

The release worker, outbox and start check depend on these, not on :class:`stream_dp.accounting.ledger.Ledger`
itself: any ledger with these operations (the Redis one; a test's in-memory one) fits. The guarantees the
release side relies on are stated here, and are tested on the Redis ledger (tests/integration/test_ledger*.py):

- a charge / settle is atomic with storing its payload, and idempotent per release id: a repeat returns the
  *first* result and the *first* payload (``duplicate=True``), so a release is charged exactly once;
- ``reserve`` holds the worst-case events before a mechanism runs; ``settle`` replaces the hold by the
  realized events (never more, :mod:`stream_dp.mechanisms.measurement`);
- a refused operation (``accepted=False``) writes nothing;
- ``ride`` (:class:`~stream_dp.node_batches.RideAlong`): the operation sends the queued writes ahead of its
  own step and the queued reads after it, in the same round trip where it can (else in one of their own
  first); the operation's guarantees are unchanged.
- ``step`` builds one of those operations as commands (:class:`LedgerStepPlan`) to run now or to queue
  after another step (:meth:`~stream_dp.node_batches.RideAlong.read`); ``queueable`` says beforehand whether
  an operation can be one queued command now; ``index_ahead(scope)`` prepares a scope before its first
  operation (the idle worker calls it for the window it expects next), so that operation can be queued too.
  A ledger that never queues says ``queueable`` False: every step then runs on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.events import DpEvent
from stream_dp.node_batches import Pending, Reads, RideAlong
from stream_dp.replication import ReplicationPolicy


@runtime_checkable
class ChargeOutcome(Protocol):
    """The result of a charge, reserve or settle (:class:`stream_dp.accounting.ledger.ChargeResult`, frozen:
    the fields are read-only properties here)."""

    @property
    def accepted(self) -> bool: ...
    @property
    def duplicate(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def payload(self) -> str | None: ...

    @property
    def exhausted(self) -> bool:
        """Refused because a cap (period or lifetime) cannot cover the cost."""
        ...

    def budget_block(self, scope: str, cap: BudgetCap | None = None) -> dict[str, Any]:
        """The record's ``budget`` block after this result."""
        ...


@runtime_checkable
class LedgerStepPlan(Protocol):
    """One ledger operation, checked, as commands (:class:`stream_dp.accounting.ledger.LedgerStep`)."""

    def now(self, ride: RideAlong | None = None) -> ChargeOutcome:
        """Run it now (``ride``'s commands in the same round trip)."""
        ...

    def later(self, ride: RideAlong) -> Pending | None:
        """Queue it on ``ride`` after its next step (the result lands in the Pending); None: not one command now."""
        ...


@runtime_checkable
class ReleaseLedger(Protocol):
    """The ledger operations the release side uses, and its configured caps (``lifetime_cap`` None: no
    lifetime cap). A scope stores the cap of its first charge and keeps it: a result's ``budget_block`` states
    the scope's stored cap (the configured one is only the fallback for results that carry none)."""

    cap: BudgetCap
    lifetime_cap: BudgetCap | None
    replication: ReplicationPolicy  # what "confirmed" means: redis.min_replicas_acked, resolved at start

    @property
    def scripts(self) -> tuple:
        """Server-side scripts the ledger runs (redis-py ``Script`` objects; empty when none), loaded at start."""
        ...

    def reserve(self, scope: str, reservation_id: str, events: Iterable[DpEvent], *,
                ride: RideAlong | None = None) -> ChargeOutcome: ...

    def settle(self, scope: str, reservation_id: str, release_id: str, events: Iterable[DpEvent], *,
               payload: str | None = None, ride: RideAlong | None = None) -> ChargeOutcome: ...

    def charge(self, scope: str, release_id: str, events: Iterable[DpEvent], *,
               payload: str | None = None, ride: RideAlong | None = None) -> ChargeOutcome: ...

    def stored(self, scope: str, release_id: str) -> str | None: ...

    def stored_many(self, scope: str, release_ids: Sequence[str]) -> Reads:
        """``stored`` of several release ids of one scope as one read (``.now()`` or batched with others);
        parses to ``{release id: payload or None}``."""
        ...

    def step(self, op: str, scope: str, events: Iterable[DpEvent], *, release_id: str | None = None,
             reservation_id: str | None = None, payload: str | None = None) -> LedgerStepPlan:
        """``op`` (``charge``, ``reserve`` or ``settle``) with its arguments checked, to run now or later."""
        ...

    def queueable(self, scope: str, events: Sequence[DpEvent]) -> bool:
        """Whether an operation of ``events`` on ``scope`` can be one queued command now."""
        ...

    def index_ahead(self, scope: str) -> None:
        """Prepare ``scope`` before its first operation (may raise the transient NotReplicated)."""
        ...

    def confirm(self, scope: str, release_id: str, *, events: Iterable[DpEvent] = ()) -> None:
        """Return once the scope's charges (``release_id``'s, with its ``events``, included) are on the
        current master and ``redis.min_replicas_acked`` replicas; raise the transient
        :class:`~stream_dp.replication.NotReplicated` otherwise."""
        ...

    def mark_published(self, scope: str, release_id: str, *, ride: RideAlong | None = None,
                       on_sent: Any = None) -> None:
        """Remove the release from ``unpublished``; with ``ride``, queued ahead of the next step (then
        ``on_sent`` runs once it was sent)."""
        ...

    def unpublished(self, scope: str) -> list[str]: ...

    def scopes(self) -> list[str]: ...
