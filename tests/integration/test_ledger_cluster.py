"""The ledger on a real 3-master Redis Cluster: every script's keys share one slot, scopes spread over
nodes, and the lifetime scope (another slot) works through its hold/charge/settle steps."""

from __future__ import annotations


import pytest

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import PureDpEvent, RangeBoundedEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration


def test_ledger_on_a_real_cluster(cluster):
    keys = Keys("sdp")
    scopes = ["2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"]
    for scope in scopes + ["lifetime"]:  # all parts of a scope in one slot
        assert len({cluster.keyslot(key) for key in keys.ledger_scope(scope)}) == 1
    nodes = {cluster.get_node_from_key(keys.ledger(s, "totals")).name for s in scopes + ["lifetime"]}
    assert len(nodes) >= 2  # the scopes really live on different masters

    ledger = Ledger(cluster, BudgetCap(1.0, 1e-5, 1e-7), keys=keys,
                    lifetime_cap=BudgetCap(2.55, 1e-5, 1e-7, name="budget.lifetime"))
    for scope in scopes:
        assert ledger.charge(scope, "w.topk", [PureDpEvent(0.4)], payload=f"T-{scope}").accepted
        assert ledger.charge(scope, "w.topk", [PureDpEvent(0.4)], payload="again").payload == f"T-{scope}"
        held = ledger.reserve(scope, "w2.topk", [RangeBoundedEvent(0.05, count=10, delta=1e-7)])
        if scope == scopes[-1]:  # 4 × 0.4 + 3 × 0.3 = 2.5 in lifetime: a 0.5 hold cannot fit 2.55
            assert not held.accepted and held.reason == "lifetime_epsilon_cap"
            continue
        assert held.accepted
        settled = ledger.settle(scope, "w2.topk", "w2.topk", [RangeBoundedEvent(0.05, count=6, delta=1e-7)],
                                payload="S")
        assert settled.accepted and ledger.unpublished(scope) == ["w.topk", "w2.topk"]
    life = ledger.remaining("lifetime")
    want = compose([PureDpEvent(0.4)] * 4 + [RangeBoundedEvent(0.05, count=6, delta=1e-7)] * 3)
    assert life.spent.rho == pytest.approx(want.rho) and life.spent.basic_epsilon == pytest.approx(2.5)
    assert ledger.open_reservations("lifetime") == 0  # the refused hold of the last scope was never made
    for scope in scopes + ["lifetime"]:
        report = ledger.verify(scope)
        assert report.ok, (scope, report.problems)
    assert ledger.scopes() == sorted(scopes + ["lifetime"])
    assert [h.type for h in ledger.history(scopes[0])] == ["charge", "reserve", "settle"]
