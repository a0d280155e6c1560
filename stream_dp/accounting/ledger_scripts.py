"""The ledger's Redis command plans: its four Lua scripts over the keys of one budget scope.

Every ledger operation on one scope -- ``charge``, ``reserve``, ``settle``, ``cancel`` -- is ONE Lua script
(``store/lua/ledger_<op>.lua``) over keys of one hash tag ``{ledger:<scope>}`` (cluster-friendly). The
guarantee the scripts give (docs/privacy.md §4): each checks the cost against the scope's cap with the rule of
:mod:`stream_dp.accounting.budget`, and only then writes the totals, the event log, the first result and the
payload together; a refused operation writes nothing; a repeat of a release or reservation id writes nothing
and returns the FIRST result and payload. This module is what the Python side adds around one script: the
scope's keys, the arguments (:mod:`stream_dp.accounting.ledger_args`), the scope index kept ahead of the
scripts, the script sent now (with a :class:`~stream_dp.node_batches.RideAlong`'s commands in its round trip)
or handed out as one command to queue, and its reply read as a :class:`ChargeResult` under the scope's stored
cap (:mod:`stream_dp.accounting.period_caps`). A charge over two scopes (period and lifetime) is several of
these scripts in an order: :mod:`stream_dp.accounting.ledger`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from stream_dp.accounting import ledger_args
from stream_dp.accounting.budget import LIFETIME_SCOPE, BudgetCap, reported_delta, reported_epsilon
from stream_dp.accounting.charge_result import ChargeResult
from stream_dp.accounting.events import DpEvent
from stream_dp.accounting.ledger_log import Cost, decode
from stream_dp.accounting.period_caps import CapNotices, protocol_cap, stored_cap
from stream_dp.node_batches import Reads, RideAlong, evalsha_item
from stream_dp.replication import ReplicationPolicy
from stream_dp.store import scripts
from stream_dp.store.keys import Keys

OPERATIONS = ("charge", "reserve", "settle", "cancel")


def lifetime_hold_id(scope: str, release_id: str) -> str:
    """The id under which the ``lifetime`` scope holds the cost of ``release_id`` of period ``scope``."""
    return f"{scope}/{release_id}"


class ScopeScripts:
    """The ledger's scripts over ``redis_client``, with the configured period ``cap`` (and ``lifetime_cap``
    for the ``lifetime`` scope): the cap a scope stores with its first write; a scope already written keeps
    its stored cap, and a result is reported under that one (``cap_notices`` says so once per scope).

    ``indexed`` are the scopes this process knows to be in the scope index durably enough to skip re-adding
    them before each script (one round trip per operation): after its ``SADD`` when no replica is required,
    else only once :func:`~stream_dp.accounting.ledger_confirm.confirm_indexed` has WAITed on the index's
    master (a failover may lose an unreplicated ``SADD``, and then the next operation must add the scope
    again). Scopes are never removed from the index."""

    def __init__(self, redis_client: redis.Redis, cap: BudgetCap, *, keys: Keys, lifetime_cap: BudgetCap | None,
                 replication: ReplicationPolicy, cap_notices: CapNotices) -> None:
        self.redis = redis_client
        self.cap = cap
        self.lifetime_cap = lifetime_cap
        self.keys = keys
        self.replication = replication
        self.cap_notices = cap_notices
        self.indexed: set[str] = set()
        self._scripts = {op: scripts.register(redis_client, f"ledger_{op}") for op in OPERATIONS}

    @property
    def scripts(self) -> tuple[Any, ...]:
        """The four scripts (charge, reserve, settle, cancel), e.g. to load them when a worker starts."""
        return tuple(self._scripts.values())

    def scope_keys(self, scope: str) -> list[str]:
        """The keys of ``scope``'s slot, in the scripts' order (``ValueError`` for a name that is not a scope)."""
        if not isinstance(scope, str) or not scope or "{" in scope or "}" in scope:
            raise ValueError(f"scope must be a non-empty string without braces, got {scope!r}")
        return self.keys.ledger_scope(scope)

    def index_key(self) -> str:
        """The set of every scope ever charged or reserved in."""
        return self.keys.ledger_scopes()

    def cap_for(self, scope: str) -> BudgetCap:
        """The configured cap of ``scope``: the lifetime cap for the ``lifetime`` scope, else the period cap."""
        if scope == LIFETIME_SCOPE:
            if self.lifetime_cap is None:
                raise ValueError("the lifetime scope is only available with a lifetime cap")
            return self.lifetime_cap
        return self.cap

    def argv(self, op: str, scope: str, payload: str | None = None, **fields: Any) -> list[str]:
        """The script's ARGV: its named arguments (:mod:`stream_dp.accounting.ledger_args`) and the payload."""
        lifetime = None if scope == LIFETIME_SCOPE else self.lifetime_cap
        return ledger_args.encode(op, cap=protocol_cap(self.cap_for(scope), lifetime),
                                  payload=payload, now=time.time(), **fields)

    def cost_argv(self, op: str, scope: str, events: list[DpEvent], events_json: str, *,
                  release_id: str | None = None, reservation_id: str | None = None,
                  payload: str | None = None) -> list[str]:
        """ARGV of a costly operation (``charge``: ``release_id``; ``reserve``: ``reservation_id``; ``settle``:
        both): the ids, the events' cost and the events themselves, and the payload to store."""
        ids = {name: value for name, value in (("reservation_id", reservation_id), ("release_id", release_id))
               if value is not None}
        return self.argv(op, scope, payload, **ids, cost=Cost.of(events).fields(), events=events_json)

    def run(self, op: str, scope: str, args: list[str], ride: RideAlong | None = None) -> ChargeResult:
        """Run the script of ``op`` on ``scope`` now (``ride``'s writes ahead of it, its reads after it, in the
        same round trip); the scope goes into the index first -- an indexed scope may be empty, never lost."""
        keys = self.scope_keys(scope)
        if scope not in self.indexed:
            self.redis.sadd(self.index_key(), scope)
            if not self.replication.replicas:
                self.indexed.add(scope)
        script = self._scripts[op]
        if ride:
            out, = ride.run(self.redis, [evalsha_item(script, keys, args)], [script])
        else:
            out = script(keys=keys, args=args)
        return self.result(scope, *self._decode(out))

    def queued(self, op: str, scope: str, args: list[str]) -> Reads:
        """The script of ``op`` as one command to queue on a :class:`RideAlong` (its reply parsed to the
        :class:`ChargeResult`); only for a scope already in :attr:`indexed`."""
        script = self._scripts[op]
        return Reads([evalsha_item(script, self.scope_keys(scope), args)],
                     lambda replies: self.result(scope, *self._decode(replies[0])), [script])

    def cancel(self, scope: str, reservation_id: str) -> bool:
        """Run the cancel script: drop the open reservation (True if there was one)."""
        out = self._scripts["cancel"](keys=self.scope_keys(scope),
                                      args=self.argv("cancel", scope, reservation_id=reservation_id))
        return bool(int(out))

    @staticmethod
    def _decode(out: Any) -> tuple[bool, dict[str, Any], str | None]:
        duplicate, result, payload = out
        return bool(int(duplicate)), json.loads(decode(result)), None if payload is None else decode(payload)

    def result(self, scope: str, duplicate: bool, data: dict[str, Any], payload: str | None) -> ChargeResult:
        """A script's reply (or a scope's state in the same fields) as a :class:`ChargeResult`, under the
        scope's stored cap (the configured one for a result of an older ledger, which stored none)."""
        configured = self.cap_for(scope)
        cap = stored_cap(data.get("cap"), scope) or configured
        self.cap_notices.note(scope, cap, configured)
        spent = Cost.from_fields(data).spent()
        eps = reported_epsilon(spent, cap.delta_prime)
        delta = reported_delta(spent, cap.delta_prime)
        return ChargeResult(accepted=bool(data["accepted"]), duplicate=duplicate, reason=str(data["reason"]),
                            spent=spent, epsilon_spent=eps, delta_spent=delta,
                            epsilon_remaining=max(0.0, cap.epsilon - eps),
                            delta_remaining=max(0.0, cap.delta - delta), payload=payload, scope=scope, cap=cap,
                            published_block=data.get("block"))
