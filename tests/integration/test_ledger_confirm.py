"""Ledger.confirm against a real master + replica: a WAIT proves that what the master holds is replicated, so
confirm must also prove the master still holds the charge (a failover between the charge and the confirm can
promote a replica that never received it -- publishing then would show a release nobody paid for).

The failover's loss is played on the master itself (the charge's entries removed from its slot, as a promoted
replica without them would look); the replica stays attached, so the WAIT itself succeeds -- the case a fence
alone would wrongly confirm.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from stream_dp.accounting.budget import LIFETIME_SCOPE, BudgetCap
from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.dev.devstack import Service
from stream_dp.store.keys import Keys
from stream_dp.replication import NotReplicated, ReplicationPolicy
from cluster_helpers import master_with_replica

pytestmark = pytest.mark.integration

CAP = BudgetCap(10.0, 1e-5, 1e-7)
KEYS = Keys("confirm")
REPLICATED = ReplicationPolicy(1, 5000)


def ev(eps: float = 0.5) -> list[PureDpEvent]:
    return [PureDpEvent(eps, mechanism="m")]


@pytest.fixture
def master_and_replica(tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    with master_with_replica(tmp_path) as pair:
        yield pair


def lose_charge(client: redis.Redis, scope: str, release_id: str) -> None:
    """What a replica promoted before the charge reached it holds: no trace of ``release_id`` in the scope."""
    for part in ("charges", "outbox", "res_results", "settled"):
        client.hdel(KEYS.ledger(scope, part), release_id)
    client.zrem(KEYS.ledger(scope, "unpublished"), release_id)


def lose_scope(client: redis.Redis, scope: str) -> None:
    """A failover of the scope's slot that lost everything it ever held (its first writes never replicated)."""
    client.delete(*KEYS.ledger_scope(scope))


def test_a_charge_the_master_no_longer_holds_is_not_confirmed(master_and_replica) -> None:
    master, _ = master_and_replica
    with redis.Redis(port=master.port) as m:
        ledger = Ledger(m, CAP, keys=KEYS, replication=REPLICATED)
        assert ledger.charge("s", "a", ev(), payload="A").accepted
        ledger.confirm("s", "a", events=ev())  # held and replicated: confirmed
        assert ledger.charge("s", "b", ev(), payload="B").accepted
        lose_charge(m, "s", "b")
        with pytest.raises(NotReplicated, match="release b in scope s"):
            ledger.confirm("s", "b", events=ev())
        # the caller computes the release again under the same id: a fresh charge, then confirmed
        assert not ledger.charge("s", "b", ev(), payload="B2").duplicate
        ledger.confirm("s", "b", events=ev())


def test_a_lost_lifetime_hold_is_charged_again_before_confirming(master_and_replica) -> None:
    master, replica = master_and_replica
    lifetime = BudgetCap(100.0, 1e-5, 1e-7, name="budget.lifetime")
    with redis.Redis(port=master.port) as m, redis.Redis(port=replica.port) as r:
        ledger = Ledger(m, CAP, keys=KEYS, lifetime_cap=lifetime, replication=REPLICATED)
        assert ledger.charge("s", "a", ev(0.5), payload="A").accepted
        lose_scope(m, LIFETIME_SCOPE)
        assert ledger.remaining(LIFETIME_SCOPE).epsilon_spent == 0
        ledger.confirm("s", "a", events=ev(0.5))
        assert ledger.remaining(LIFETIME_SCOPE).epsilon_spent == pytest.approx(0.5)
        on_replica = Ledger(r, CAP, keys=KEYS, lifetime_cap=lifetime)
        assert on_replica.remaining(LIFETIME_SCOPE).epsilon_spent == pytest.approx(0.5)
        ledger.confirm("s", "a", events=ev(0.5))  # a repeat finds the hold: nothing charged twice
        assert ledger.remaining(LIFETIME_SCOPE).epsilon_spent == pytest.approx(0.5)


def test_a_lost_lifetime_hold_that_no_longer_fits_stops_the_publication(master_and_replica) -> None:
    master, _ = master_and_replica
    lifetime = BudgetCap(1.0, 1e-5, 1e-7, name="budget.lifetime")
    with redis.Redis(port=master.port) as m:
        ledger = Ledger(m, CAP, keys=KEYS, lifetime_cap=lifetime, replication=REPLICATED)
        assert ledger.charge("s", "a", ev(0.6), payload="A").accepted
        lose_scope(m, LIFETIME_SCOPE)
        assert ledger.charge("t", "x", ev(0.6), payload="X").accepted  # the lifetime is spent again meanwhile
        with pytest.raises(NotReplicated, match="no longer fits the lifetime cap"):
            ledger.confirm("s", "a", events=ev(0.6))
        assert ledger.remaining(LIFETIME_SCOPE).epsilon_spent == pytest.approx(0.6)


def test_a_zero_cost_record_has_no_lifetime_hold_to_find(master_and_replica) -> None:
    master, _ = master_and_replica
    lifetime = BudgetCap(1.0, 1e-5, 1e-7, name="budget.lifetime")
    with redis.Redis(port=master.port) as m:
        ledger = Ledger(m, CAP, keys=KEYS, lifetime_cap=lifetime, replication=REPLICATED)
        assert ledger.charge("s", "status", [], payload="exhausted").accepted
        ledger.confirm("s", "status")
        assert ledger.remaining(LIFETIME_SCOPE).epsilon_spent == 0
