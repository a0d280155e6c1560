"""The Redis ledger and its results fit the Protocols the release side is written against."""

from __future__ import annotations

import inspect

import redis

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.composition import Spent
from stream_dp.accounting.ledger import ChargeResult, Ledger
from stream_dp.release.ledger_port import ChargeOutcome, ReleaseLedger


def test_the_redis_ledger_is_a_release_ledger_with_the_same_signatures() -> None:
    ledger = Ledger(redis.Redis(), BudgetCap(1.0, 1e-5, 1e-7))  # no connection is made
    assert isinstance(ledger, ReleaseLedger)
    for name in ("reserve", "settle", "charge", "stored", "stored_many", "stored_many_reads", "mark_published",
                 "unpublished", "scopes"):
        want = inspect.signature(getattr(ReleaseLedger, name))
        got = inspect.signature(getattr(Ledger, name))
        assert list(got.parameters) == list(want.parameters), name
        assert [p.kind for p in got.parameters.values()] == [p.kind for p in want.parameters.values()], name


def test_a_charge_result_is_a_charge_outcome() -> None:
    result = ChargeResult(True, False, "ok", Spent(), 0.0, 0.0, 1.0, 1e-5)
    assert isinstance(result, ChargeOutcome)
    assert result.budget_block("p", BudgetCap(1.0, 1e-5, 1e-7))["epsilon_cap"] == 1.0


def test_an_object_missing_an_operation_is_not_a_release_ledger() -> None:
    class NoSettle:
        cap = BudgetCap(1.0, 1e-5, 1e-7)
        lifetime_cap = None

        def reserve(self, scope, reservation_id, events): ...
        def charge(self, scope, release_id, events, *, payload=None): ...
        def stored(self, scope, release_id): ...
        def mark_published(self, scope, release_id): ...
        def unpublished(self, scope): ...
        def scopes(self): ...

    assert not isinstance(NoSettle(), ReleaseLedger)
