"""The durable privacy-budget ledger in Redis: a privacy filter per budget scope.

Every release is paid for before anyone can see it, exactly once. Per scope (a budget period such as
``2026-11-29``, see :func:`scope_for`; optionally also the ``lifetime`` scope) Redis holds the committed
totals (ρ, δ of approximate zCDP and Σε, Σδ of basic composition), an append-only event log (a stream with
one entry per charge, reservation, settlement and cancellation), the first result of every release id, the
stored release payloads (the outbox) and the open reservations.

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

Failover (``replication``, :mod:`stream_dp.replication`): Redis acknowledges a charge before any replica
has it, so a master failing right after could take it along. :meth:`confirm` is the step between "stored"
and "published": the outbox calls it right before it sends a release (:meth:`Outbox.publish
<stream_dp.release.outbox.Outbox.publish>`), so *published ⇒ charge (and stored release) on
``redis.min_replicas_acked`` replicas*. It writes a fence into each scope's slot and WAITs on that same
connection; replication is ordered per master, so the fence confirms the charge written before it --
whoever wrote it (also a stored release found again after a crash, whose writer never confirmed it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from stream_dp.accounting.budget import (
    LIFETIME_SCOPE,
    BudgetCap,
    check_budget_covers,
    reported_delta,
    reported_epsilon,
    scope_for,
)
from stream_dp.accounting.charge_result import ChargeResult
from stream_dp.accounting import ledger_args
from stream_dp.accounting.ledger_log import (Cost, HistoryEntry, VerifyReport, as_dict, check_scope, decode,
                                             history_entry, stored_totals)
from stream_dp.accounting.period_caps import CapNotices, protocol_cap, stored_cap
from stream_dp.accounting.events import DpEvent
from stream_dp.node_batches import Pending, Reads, RideAlong, evalsha_item
from stream_dp.replication import NO_REPLICATION, NotReplicated, ReplicationPolicy, write_then_wait
from stream_dp.store import scripts
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
        return ride.read(self.ledger._queued(self.op, self.scope, self.ledger._step_argv(self)))


class Ledger:
    """Budget ledger over ``redis_client`` with the configured period cap ``cap`` (and optionally a lifetime
    cap): the cap a scope stores with its first write; a scope already written keeps its stored cap
    (:mod:`stream_dp.accounting.period_caps`).

    Scope names are free strings without braces; :func:`scope_for` makes the period ones.
    """

    def __init__(self, redis_client: redis.Redis, cap: BudgetCap, *, keys: Keys = Keys(),
                 lifetime_cap: BudgetCap | None = None, replication: ReplicationPolicy = NO_REPLICATION,
                 cap_notices: CapNotices | None = None) -> None:
        self.redis = redis_client
        self.cap = cap
        self.lifetime_cap = lifetime_cap
        self.keys = keys
        self.replication = replication
        self._scripts = {op: scripts.register(redis_client, f"ledger_{op}")
                         for op in ("charge", "reserve", "settle", "cancel")}
        # Scopes this process knows to be in the scope index durably enough to skip re-adding them before
        # each script (one round trip per operation): after its SADD when no replica is required, else only
        # once confirm() has WAITed on the index's master (a failover may lose an unreplicated SADD, and then
        # the next operation must add the scope again). Scopes are never removed from the index.
        self._indexed: set[str] = set()
        # "this scope keeps its stored cap" (a config that differs applies from the next period), once per scope
        self._cap_notices = cap_notices if cap_notices is not None else CapNotices()

    @property
    def scripts(self) -> tuple[Any, ...]:
        """The ledger's Lua scripts (charge, reserve, settle, cancel), e.g. to load them when a worker starts."""
        return tuple(self._scripts.values())

    # --- key helpers ------------------------------------------------------------------------------
    def _scope_keys(self, scope: str) -> list[str]:
        if not isinstance(scope, str) or not scope or "{" in scope or "}" in scope:
            raise ValueError(f"scope must be a non-empty string without braces, got {scope!r}")
        return self.keys.ledger_scope(scope)

    def _index_key(self) -> str:
        return self.keys.ledger_scopes()

    def _cap_for(self, scope: str) -> BudgetCap:
        if scope == LIFETIME_SCOPE:
            if self.lifetime_cap is None:
                raise ValueError("the lifetime scope is only available with a lifetime cap")
            return self.lifetime_cap
        return self.cap

    def _argv(self, op: str, scope: str, payload: str | None = None, **fields: Any) -> list[str]:
        """The script's ARGV: its named arguments (:mod:`stream_dp.accounting.ledger_args`) and the payload."""
        lifetime = None if scope == LIFETIME_SCOPE else self.lifetime_cap
        return ledger_args.encode(op, cap=protocol_cap(self._cap_for(scope), lifetime),
                                  payload=payload, now=time.time(), **fields)

    def _run(self, op: str, scope: str, args: list[str], ride: RideAlong | None = None,
             ) -> tuple[bool, dict[str, Any], str | None]:
        keys = self._scope_keys(scope)
        if scope not in self._indexed:
            self.redis.sadd(self._index_key(), scope)  # before the script: an indexed scope may be empty, never lost
            if not self.replication.replicas:
                self._indexed.add(scope)
        script = self._scripts[op]
        if ride:  # the queued writes ahead of the script, the reads after it: one round trip
            out, = ride.run(self.redis, [evalsha_item(script, keys, args)], [script])
        else:
            out = script(keys=keys, args=args)
        return self._decode_out(out)

    @staticmethod
    def _decode_out(out: Any) -> tuple[bool, dict[str, Any], str | None]:
        duplicate, result, payload = out
        return bool(int(duplicate)), json.loads(decode(result)), None if payload is None else decode(payload)

    def _queued(self, op: str, scope: str, args: list[str]) -> Reads:
        """One script of ``op`` as a command to queue on a :class:`RideAlong` (its reply parsed to the
        :class:`ChargeResult`)."""
        script = self._scripts[op]
        return Reads([evalsha_item(script, self._scope_keys(scope), args)],
                     lambda replies: self._result(scope, *self._decode_out(replies[0])), [script])

    def index_ahead(self, scope: str) -> None:
        """Put ``scope`` in the scope index before its first operation, so that operation can be one queued
        command (:meth:`queueable`) instead of an ``SADD`` of its own followed by its script. The release
        worker calls it while idle for the window it expects next (the first window of each budget period
        would otherwise take the slow path). An indexed scope may stay empty; nothing else changes.

        With ``redis.min_replicas_acked`` > 0 the ``SADD`` goes with the index's fence and a ``WAIT`` (as in
        :meth:`confirm`), and the scope counts as indexed only once replicated (:class:`NotReplicated`
        otherwise: the first operation then adds it itself)."""
        self._scope_keys(scope)  # the scope's name is checked here too
        if scope in self._indexed:
            return
        if self.replication.replicas:
            self._confirm_indexed([scope], fence_value=f"index:{scope}")
        else:
            self.redis.sadd(self._index_key(), scope)
            self._indexed.add(scope)

    def queueable(self, scope: str, events: Sequence[DpEvent]) -> bool:
        """Whether an operation of ``events`` on ``scope`` can be one queued command now (:meth:`LedgerStep.later`):
        not with a lifetime cap (a costly operation is then several scripts in two slots, in an order that
        matters), nor before the scope is known to be indexed (that takes a write first)."""
        return ((self.lifetime_cap is None or scope == LIFETIME_SCOPE or not events)
                and scope in self._indexed)

    def step(self, op: str, scope: str, events: Iterable[DpEvent], *, release_id: str | None = None,
             reservation_id: str | None = None, payload: str | None = None) -> LedgerStep:
        """The ledger operation ``op`` (``charge``: ``release_id``; ``reserve``: ``reservation_id``; ``settle``:
        both) checked once, as a :class:`LedgerStep` to run now or to queue after another step. ``charge``
        with a ``payload`` may have no events (a zero-cost record); the others need at least one."""
        if op not in ("charge", "reserve", "settle"):
            raise ValueError(f"not a ledger operation: {op!r}")
        if op != "charge":
            self._check_id("reservation_id", reservation_id)  # type: ignore[arg-type]
        if op != "reserve":
            self._check_id("release_id", release_id)  # type: ignore[arg-type]
        if payload is not None and not isinstance(payload, str):
            raise ValueError("payload must be a string (the serialised release record) or None")
        events, events_json = self._events(events, allow_empty=op == "charge" and payload is not None)
        return LedgerStep(self, op, scope, events, events_json, release_id, reservation_id, payload)

    def _result(self, scope: str, duplicate: bool, data: dict[str, Any], payload: str | None) -> ChargeResult:
        configured = self._cap_for(scope)
        cap = stored_cap(data.get("cap"), scope) or configured  # no "cap": a first result of an older ledger
        self._cap_notices.note(scope, cap, configured)
        spent = Cost.from_fields(data).spent()
        eps = reported_epsilon(spent, cap.delta_prime)
        delta = reported_delta(spent, cap.delta_prime)
        return ChargeResult(accepted=bool(data["accepted"]), duplicate=duplicate, reason=str(data["reason"]),
                            spent=spent, epsilon_spent=eps, delta_spent=delta,
                            epsilon_remaining=max(0.0, cap.epsilon - eps),
                            delta_remaining=max(0.0, cap.delta - delta), payload=payload, scope=scope, cap=cap,
                            published_block=data.get("block"))

    @staticmethod
    def _check_id(name: str, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string, got {value!r}")

    @staticmethod
    def _events(events: Iterable[DpEvent], *, allow_empty: bool = False) -> tuple[list[DpEvent], str]:
        events = list(events)
        if not events and not allow_empty:
            raise ValueError("a charge needs at least one DP event")
        for e in events:
            if not isinstance(e, DpEvent):
                raise ValueError(f"not a DP event: {e!r}")
        return events, json.dumps([e.to_dict() for e in events], separators=(",", ":"))

    # --- single-scope operations ------------------------------------------------------------------
    def _charge_argv(self, scope: str, release_id: str, events: list[DpEvent], events_json: str,
                     payload: str | None) -> list[str]:
        return self._argv("charge", scope, payload, release_id=release_id, cost=Cost.of(events).fields(),
                          events=events_json)

    def _reserve_argv(self, scope: str, reservation_id: str, events: list[DpEvent], events_json: str) -> list[str]:
        return self._argv("reserve", scope, reservation_id=reservation_id, cost=Cost.of(events).fields(),
                          events=events_json)

    def _settle_argv(self, scope: str, reservation_id: str, release_id: str, events: list[DpEvent],
                     events_json: str, payload: str | None) -> list[str]:
        return self._argv("settle", scope, payload, reservation_id=reservation_id, release_id=release_id,
                          cost=Cost.of(events).fields(), events=events_json)

    def _charge_one(self, scope: str, release_id: str, events: list[DpEvent], events_json: str,
                    payload: str | None, ride: RideAlong | None = None) -> ChargeResult:
        args = self._charge_argv(scope, release_id, events, events_json, payload)
        return self._result(scope, *self._run("charge", scope, args, ride))

    def _reserve_one(self, scope: str, reservation_id: str, events: list[DpEvent], events_json: str,
                     ride: RideAlong | None = None) -> ChargeResult:
        args = self._reserve_argv(scope, reservation_id, events, events_json)
        return self._result(scope, *self._run("reserve", scope, args, ride))

    def _settle_one(self, scope: str, reservation_id: str, release_id: str, events: list[DpEvent],
                    events_json: str, payload: str | None, ride: RideAlong | None = None) -> ChargeResult:
        args = self._settle_argv(scope, reservation_id, release_id, events, events_json, payload)
        return self._result(scope, *self._run("settle", scope, args, ride))

    def _ride_alone(self, ride: RideAlong | None) -> None:
        """With a lifetime cap one operation is several scripts in two slots: the ride-along goes in a round
        trip of its own first (its writes still before the operation, its reads independent of it)."""
        if ride:
            ride.run(self.redis)

    def cancel(self, scope: str, reservation_id: str) -> bool:
        """Drop an open reservation. ONLY for a hold whose mechanism never ran or whose output was
        discarded unseen (never stored, never published); otherwise settle it. True if one was dropped."""
        self._check_id("reservation_id", reservation_id)
        out = self._scripts["cancel"](keys=self._scope_keys(scope),
                                      args=self._argv("cancel", scope, reservation_id=reservation_id))
        return bool(int(out))

    @staticmethod
    def _lifetime_id(scope: str, release_id: str) -> str:
        return f"{scope}/{release_id}"

    def _refused_by_lifetime(self, scope: str, life: ChargeResult) -> ChargeResult:
        period = self.remaining(scope)
        return ChargeResult(False, False, f"lifetime_{life.reason}", period.spent, period.epsilon_spent,
                            period.delta_spent, period.epsilon_remaining, period.delta_remaining, None, scope,
                            period.cap)

    # --- public API -------------------------------------------------------------------------------
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

    def _charge_now(self, s: LedgerStep, ride: RideAlong | None) -> ChargeResult:
        scope, release_id, events, events_json, payload = s.scope, s.release_id, s.events, s.events_json, s.payload
        assert release_id is not None
        if self.lifetime_cap is None or scope == LIFETIME_SCOPE or not events:  # zero cost: no lifetime hold
            return self._charge_one(scope, release_id, events, events_json, payload, ride)
        self._ride_alone(ride)
        hold_id = self._lifetime_id(scope, release_id)
        life = self._reserve_one(LIFETIME_SCOPE, hold_id, events, events_json)
        if not life.accepted:
            return self._refused_by_lifetime(scope, life)
        result = self._charge_one(scope, release_id, events, events_json, payload)
        if result.accepted:
            self._settle_one(LIFETIME_SCOPE, hold_id, hold_id, events, events_json, None)
        else:
            self.cancel(LIFETIME_SCOPE, hold_id)
        return result

    def _reserve_now(self, s: LedgerStep, ride: RideAlong | None) -> ChargeResult:
        scope, reservation_id, events, events_json = s.scope, s.reservation_id, s.events, s.events_json
        assert reservation_id is not None
        if self.lifetime_cap is None or scope == LIFETIME_SCOPE:
            return self._reserve_one(scope, reservation_id, events, events_json, ride)
        self._ride_alone(ride)
        hold_id = self._lifetime_id(scope, reservation_id)
        life = self._reserve_one(LIFETIME_SCOPE, hold_id, events, events_json)
        if not life.accepted:
            return self._refused_by_lifetime(scope, life)
        result = self._reserve_one(scope, reservation_id, events, events_json)
        if not result.accepted:
            self.cancel(LIFETIME_SCOPE, hold_id)
        return result

    def _settle_now(self, s: LedgerStep, ride: RideAlong | None) -> ChargeResult:
        scope, reservation_id, release_id, events, events_json = (s.scope, s.reservation_id, s.release_id,
                                                                  s.events, s.events_json)
        assert reservation_id is not None and release_id is not None
        if self.lifetime_cap is not None and scope != LIFETIME_SCOPE:
            self._ride_alone(ride)
            hold_id = self._lifetime_id(scope, reservation_id)
            # lifetime first: it then counts the actual cost, while the period still holds the maximum
            life = self._settle_one(LIFETIME_SCOPE, hold_id, hold_id, events, events_json, None)
            if life.reason == "unknown_reservation":  # e.g. reserved before the lifetime scope was enabled
                life = self._charge_one(LIFETIME_SCOPE, hold_id, events, events_json, None)
            if not life.accepted:  # the actual cost exceeds the hold and does not fit: nothing may be stored
                return self._refused_by_lifetime(scope, life)
        return self._settle_one(scope, reservation_id, release_id, events, events_json, s.payload, ride)

    def _step_argv(self, s: LedgerStep) -> list[str]:
        """The ARGV of the step's one script on its period scope (:meth:`LedgerStep.later`)."""
        if s.op == "charge":
            return self._charge_argv(s.scope, s.release_id or "", s.events, s.events_json, s.payload)
        if s.op == "reserve":
            return self._reserve_argv(s.scope, s.reservation_id or "", s.events, s.events_json)
        return self._settle_argv(s.scope, s.reservation_id or "", s.release_id or "", s.events, s.events_json,
                                 s.payload)

    def confirm(self, scope: str, release_id: str, *, events: Iterable[DpEvent] = ()) -> None:
        """Return once everything the ledger holds for ``scope`` (the charge and stored payload of
        ``release_id`` included), its lifetime hold and the scope index are on ``replication.replicas``
        replicas; raise :class:`~stream_dp.replication.NotReplicated` (transient) when they are not within
        ``redis.replication_timeout_ms``. A no-op with 0 replicas. Call it before acting on a charge
        (publishing its release); ``events`` are the release's DP events (empty for a zero-cost record,
        which has no lifetime hold).

        Each slot gets a fence write (``SET <scope>:replicated <release id>``; a SET always enters the
        replication stream) followed by ``WAIT`` on the same connection of the slot's master. The scope
        index's fence comes with a ``SADD`` of the scopes (same slot, same round trip): the index's master
        may have failed over since their earlier ``SADD`` and lost it (in a cluster the charge, in another
        slot, can survive that), and once confirmed this process stops re-adding them.

        A WAIT proves that what the master it ran on holds is replicated -- not that this master still holds
        the charge: a failover between the charge and this call may have promoted a replica that never
        received it. So the fence of the scope's slot also checks (same connection, same round trip) that
        the charge of ``release_id`` is there, and raises ``NotReplicated`` when it is not: nothing was
        published, the caller computes the release again under its reservation as if it had never been
        charged. With a lifetime cap and a costly release the lifetime hold is checked the same way; if only
        the hold was lost it is charged again (idempotent per hold id; charging twice only over-counts),
        and a hold that no longer fits the lifetime cap stops the publication (``NotReplicated`` until an
        operator looks: the record is stored, never published).
        """
        policy = self.replication
        if not policy.replicas:
            return
        events, events_json = self._events(events, allow_empty=True)
        scopes = [scope]
        fence = self.keys.ledger(scope, "replicated")
        charges = self.keys.ledger(scope, "charges")
        held, = write_then_wait(self.redis, fence, policy.replicas, policy.timeout_ms,
                                lambda pipe: (pipe.set(fence, release_id), pipe.hexists(charges, release_id)))[1:]
        if not held:
            raise NotReplicated(f"the charge of release {release_id} in scope {scope} is not on its slot's "
                                "current master (a failover lost it before it was replicated); not confirmed")
        if self.lifetime_cap is not None and scope != LIFETIME_SCOPE:
            scopes.append(LIFETIME_SCOPE)
            self._confirm_lifetime_hold(scope, release_id, events, events_json)
        self._confirm_indexed(scopes, fence_value=release_id)

    def _confirm_indexed(self, scopes: list[str], *, fence_value: str) -> None:
        """Add ``scopes`` to the scope index with the index's fence write (``fence_value``) and ``WAIT`` for the
        required replicas on the index's master (same slot, one round trip); once confirmed, later operations
        skip the ``SADD``. Raises :class:`NotReplicated` when the replicas did not acknowledge in time."""
        policy = self.replication
        index_fence = self.keys.ledger_scopes_fence()  # the scope index's slot
        write_then_wait(self.redis, index_fence, policy.replicas, policy.timeout_ms,
                        lambda pipe: (pipe.set(index_fence, fence_value), pipe.sadd(self._index_key(), *scopes)))
        # these scopes are in the index on its master and its replicas: later operations may skip the SADD
        self._indexed.update(scopes)

    def _confirm_lifetime_hold(self, scope: str, release_id: str, events: list[DpEvent], events_json: str) -> None:
        """:meth:`confirm`'s step for the lifetime scope: fence + WAIT, and the costly release's hold present."""
        policy = self.replication
        hold_id = self._lifetime_id(scope, release_id)
        fence = self.keys.ledger(LIFETIME_SCOPE, "replicated")
        charges = self.keys.ledger(LIFETIME_SCOPE, "charges")
        for attempt in range(2):
            held, = write_then_wait(self.redis, fence, policy.replicas, policy.timeout_ms,
                                    lambda pipe: (pipe.set(fence, release_id), pipe.hexists(charges, hold_id)))[1:]
            if held or not events:
                return
            if attempt == 0:  # the hold was lost with a failover: charge it again, then confirm that
                life = self._charge_one(LIFETIME_SCOPE, hold_id, events, events_json, None)
                if not life.accepted:
                    raise NotReplicated(f"the lifetime hold of release {release_id} in scope {scope} was lost in a "
                                        f"failover and no longer fits the lifetime cap ({life.reason}); "
                                        "the release stays unpublished")
        raise NotReplicated(f"the lifetime hold of release {release_id} in scope {scope} is not on its slot's "
                            "current master; not confirmed")

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

    def unpublished(self, scope: str) -> list[str]:
        """Release ids charged with a payload and not yet marked published, in charge order."""
        return [decode(v) for v in self.redis.zrange(self.keys.ledger(scope, "unpublished"), 0, -1)]

    def scopes(self) -> list[str]:
        """Every scope that has been charged or reserved in (sorted)."""
        return sorted(decode(v) for v in self.redis.smembers(self._index_key()))

    def stored_cap(self, scope: str) -> BudgetCap | None:
        """The cap ``scope`` was first charged under (None: not charged yet, so the configured cap applies)."""
        return stored_cap(as_dict(self.redis.hgetall(self._scope_keys(scope)[8])), scope)

    def remaining(self, scope: str) -> ChargeResult:
        """The scope's current state as a :class:`ChargeResult` (committed + open reservations), under its
        stored cap (the configured one for a scope not charged yet)."""
        keys = self._scope_keys(scope)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(keys[0])
        pipe.hgetall(keys[5])
        pipe.hgetall(keys[8])
        totals, holds, cap = (as_dict(reply) for reply in pipe.execute())
        total = stored_totals(totals)
        for rid in sorted(holds, key=decode):  # the scripts' order: sorted reservation ids
            total = total + Cost.from_string(decode(holds[rid]))
        fields = {**total.__dict__, "accepted": True, "reason": "ok", "cap": cap}
        return self._result(scope, False, fields, None)

    def open_reservations(self, scope: str) -> int:
        """Number of reservations of the scope not yet settled or cancelled."""
        return int(self.redis.hlen(self._scope_keys(scope)[5]))

    def history(self, scope: str, *, count: int | None = None) -> list[HistoryEntry]:
        """The scope's event log, oldest first (``count``: at most that many entries)."""
        entries = self.redis.xrange(self.keys.ledger(scope, "log"), count=count) or []
        return [history_entry(entry_id, fields) for entry_id, fields in entries]

    def verify(self, scope: str) -> VerifyReport:
        """Recompute the committed totals and the open reservations from the event log; compare.

        Sums are recomputed in log order with the same float additions the scripts made, so a consistent
        ledger matches exactly. Also re-derives each entry's cost from its logged DP events, and checks the
        recomputed spend against the scope's stored cap (:func:`~stream_dp.accounting.period_caps.overspend_problems`).
        """
        keys = self._scope_keys(scope)
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
