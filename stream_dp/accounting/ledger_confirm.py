"""Published ⇒ charged on the replicas: the ledger's confirm step (``redis.min_replicas_acked``).

Redis acknowledges a charge before any replica has it, so a master failing right after could take it along
(docs/privacy.md §4, "Charged on replicas before visible"; docs/scaling.md). :func:`confirm` is the step
between "stored" and "published": the outbox calls it (through :meth:`Ledger.confirm
<stream_dp.accounting.ledger.Ledger.confirm>`) right before it sends a release, so *published ⇒ charge (and
stored release) on ``redis.min_replicas_acked`` replicas*.

Each slot gets a fence write (``SET <scope>:replicated <release id>``; a SET always enters the replication
stream) followed by ``WAIT`` on the same connection of the slot's master (:func:`~stream_dp.replication.
write_then_wait`); replication is ordered per master, so the fence confirms the charge written before it --
whoever wrote it (also a stored release found again after a crash, whose writer never confirmed it). The
scope index's fence comes with a ``SADD`` of the scopes (same slot, same round trip): the index's master may
have failed over since their earlier ``SADD`` and lost it (in a cluster the charge, in another slot, can
survive that), and once confirmed the process stops re-adding them.

A WAIT proves that what the master it ran on holds is replicated -- not that this master still holds the
charge: a failover between the charge and the confirmation may have promoted a replica that never received
it. So the fence of the scope's slot also checks (same connection, same round trip) that the charge of the
release is there, and raises :class:`~stream_dp.replication.NotReplicated` when it is not: nothing was
published, the caller computes the release again under its reservation as if it had never been charged.
With a lifetime cap and a costly release the lifetime hold is checked the same way; if only the hold was lost
it is charged again (idempotent per hold id; charging twice only over-counts), and a hold that no longer fits
the lifetime cap stops the publication (``NotReplicated`` until an operator looks: the record is stored,
never published).
"""

from __future__ import annotations

from stream_dp.accounting.budget import LIFETIME_SCOPE
from stream_dp.accounting.events import DpEvent
from stream_dp.accounting.ledger_scripts import ScopeScripts, lifetime_hold_id
from stream_dp.replication import NotReplicated, write_then_wait


def confirm(slot: ScopeScripts, scope: str, release_id: str, events: list[DpEvent], events_json: str) -> None:
    """Return once everything the ledger holds for ``scope`` (the charge and stored payload of ``release_id``
    included), its lifetime hold and the scope index are on ``slot.replication.replicas`` replicas; raise
    :class:`NotReplicated` (transient) when they are not within ``redis.replication_timeout_ms``, or when the
    charge (or the lifetime hold, which cannot be charged again) is not on its slot's current master. A no-op
    with 0 replicas. ``events`` are the release's DP events (empty for a zero-cost record, which has no
    lifetime hold), ``events_json`` their JSON as charged."""
    policy = slot.replication
    if not policy.replicas:
        return
    scopes = [scope]
    fence = slot.keys.ledger(scope, "replicated")
    charges = slot.keys.ledger(scope, "charges")
    held, = write_then_wait(slot.redis, fence, policy.replicas, policy.timeout_ms,
                            lambda pipe: (pipe.set(fence, release_id), pipe.hexists(charges, release_id)))[1:]
    if not held:
        raise NotReplicated(f"the charge of release {release_id} in scope {scope} is not on its slot's "
                            "current master (a failover lost it before it was replicated); not confirmed")
    if slot.lifetime_cap is not None and scope != LIFETIME_SCOPE:
        scopes.append(LIFETIME_SCOPE)
        _confirm_lifetime_hold(slot, scope, release_id, events, events_json)
    confirm_indexed(slot, scopes, fence_value=release_id)


def confirm_indexed(slot: ScopeScripts, scopes: list[str], *, fence_value: str) -> None:
    """Add ``scopes`` to the scope index with the index's fence write (``fence_value``) and ``WAIT`` for the
    required replicas on the index's master (same slot, one round trip); once confirmed, later operations
    skip the ``SADD`` (:attr:`ScopeScripts.indexed`). Raises :class:`NotReplicated` when the replicas did not
    acknowledge in time."""
    policy = slot.replication
    index_fence = slot.keys.ledger_scopes_fence()  # the scope index's slot
    write_then_wait(slot.redis, index_fence, policy.replicas, policy.timeout_ms,
                    lambda pipe: (pipe.set(index_fence, fence_value), pipe.sadd(slot.index_key(), *scopes)))
    # these scopes are in the index on its master and its replicas: later operations may skip the SADD
    slot.indexed.update(scopes)


def _confirm_lifetime_hold(slot: ScopeScripts, scope: str, release_id: str, events: list[DpEvent],
                           events_json: str) -> None:
    """:func:`confirm`'s step for the lifetime scope: fence + WAIT, and the costly release's hold present."""
    policy = slot.replication
    hold_id = lifetime_hold_id(scope, release_id)
    fence = slot.keys.ledger(LIFETIME_SCOPE, "replicated")
    charges = slot.keys.ledger(LIFETIME_SCOPE, "charges")
    for attempt in range(2):
        held, = write_then_wait(slot.redis, fence, policy.replicas, policy.timeout_ms,
                                lambda pipe: (pipe.set(fence, release_id), pipe.hexists(charges, hold_id)))[1:]
        if held or not events:
            return
        if attempt == 0:  # the hold was lost with a failover: charge it again, then confirm that
            life = slot.run("charge", LIFETIME_SCOPE,
                            slot.cost_argv("charge", LIFETIME_SCOPE, events, events_json, release_id=hold_id))
            if not life.accepted:
                raise NotReplicated(f"the lifetime hold of release {release_id} in scope {scope} was lost in a "
                                    f"failover and no longer fits the lifetime cap ({life.reason}); "
                                    "the release stays unpublished")
    raise NotReplicated(f"the lifetime hold of release {release_id} in scope {scope} is not on its slot's "
                        "current master; not confirmed")
