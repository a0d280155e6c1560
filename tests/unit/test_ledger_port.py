"""The Redis ledger and its results fit the Protocols the release side is written against."""

from __future__ import annotations

import inspect

import redis

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.composition import Spent
from stream_dp.accounting.ledger import ChargeResult, Ledger
from stream_dp.node_batches import RideAlong
from stream_dp.release.ledger_port import ChargeOutcome, LedgerStepPlan, ReleaseLedger


def test_the_redis_ledger_is_a_release_ledger_with_the_same_signatures() -> None:
    ledger = Ledger(redis.Redis(), BudgetCap(1.0, 1e-5, 1e-7))  # no connection is made
    assert isinstance(ledger, ReleaseLedger)
    for name in ("reserve", "settle", "charge", "stored", "stored_many", "step", "queueable", "index_ahead",
                 "mark_published", "unpublished", "scopes"):
        want = inspect.signature(getattr(ReleaseLedger, name))
        got = inspect.signature(getattr(Ledger, name))
        assert list(got.parameters) == list(want.parameters), name
        assert [p.kind for p in got.parameters.values()] == [p.kind for p in want.parameters.values()], name


def test_the_port_has_no_optional_operations() -> None:
    """Every ledger operation the release side calls is in the Protocol: none is probed with getattr."""
    import pathlib

    import stream_dp.release as release

    for path in pathlib.Path(release.__file__).parent.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "getattr(self.ledger" not in text and "getattr(ledger" not in text, path.name


def test_a_ledger_step_is_a_step_plan() -> None:
    ledger = Ledger(redis.Redis(), BudgetCap(1.0, 1e-5, 1e-7))  # no connection is made
    step = ledger.step("charge", "p", [], release_id="r", payload="{}")
    assert isinstance(step, LedgerStepPlan)
    assert step.later(RideAlong()) is None  # scope "p" not indexed yet: it cannot be one queued command


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
