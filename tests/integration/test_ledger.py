"""The budget ledger against a real redis-server: cap, refusal, idempotence, outbox, reservations, verify."""

from __future__ import annotations

import json

import pytest

from stream_dp.accounting.budget import BudgetCap, decide
from stream_dp.accounting.composition import compose, zcdp_to_epsilon
from stream_dp.accounting.events import ApproxDpEvent, PureDpEvent, RangeBoundedEvent, ZCdpEvent
from stream_dp.accounting.ledger import Cost, Ledger
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration

CAP = BudgetCap(1.0, 1e-5, 1e-7)


@pytest.fixture
def ledger(redis_client):
    return Ledger(redis_client, CAP, keys=Keys("t"))


def _scope_snapshot(redis_client, scope="s"):
    """Every key of the scope with its full contents (to prove a refusal wrote nothing)."""
    out = {}
    for key in sorted(redis_client.keys(f"t:{{ledger:{scope}}}:*")):
        kind = redis_client.type(key)
        if kind == b"hash":
            out[key] = redis_client.hgetall(key)
        elif kind == b"stream":
            out[key] = redis_client.xrange(key)
        elif kind == b"zset":
            out[key] = redis_client.zrange(key, 0, -1, withscores=True)
        else:  # pragma: no cover - the ledger uses no other types
            out[key] = kind
    return out


def test_charge_accumulates_and_reports_smaller_valid_epsilon(ledger):
    r1 = ledger.charge("s", "w1.topk", [PureDpEvent(0.3, mechanism="m")], payload="P1")
    assert r1.accepted and not r1.duplicate and r1.reason == "ok" and r1.payload == "P1"
    assert r1.epsilon_spent == pytest.approx(0.3)  # basic composition beats the zCDP conversion here
    assert r1.delta_spent == pytest.approx(CAP.delta_prime)
    r2 = ledger.charge("s", "w2.topk", [PureDpEvent(0.3)])
    assert r2.spent == compose([PureDpEvent(0.3), PureDpEvent(0.3)])
    assert r2.epsilon_remaining == pytest.approx(0.4)
    assert ledger.remaining("s").spent == r2.spent
    assert ledger.verify("s").ok


def test_refusal_writes_nothing_and_names_the_cap(ledger, redis_client):
    assert ledger.charge("s", "a", [PureDpEvent(0.9)], payload="A").accepted
    before = _scope_snapshot(redis_client)
    refused = ledger.charge("s", "b", [PureDpEvent(0.2)], payload="B")
    assert not refused.accepted and refused.exhausted and refused.reason == "epsilon_cap"
    assert refused.payload is None
    assert _scope_snapshot(redis_client) == before
    assert ledger.stored("s", "b") is None and ledger.unpublished("s") == ["a"]
    # δ cap: 1e-5 total incl. δ′ = 1e-7
    refused_delta = ledger.charge("s", "c", [ApproxDpEvent(0.01, 1e-5)])
    assert refused_delta.reason == "delta_cap" and refused_delta.exhausted
    assert _scope_snapshot(redis_client) == before


def test_repeat_returns_first_result_and_first_payload(ledger):
    first = ledger.charge("s", "w1.topk", [PureDpEvent(0.5)], payload='{"noise": 1}')
    again = ledger.charge("s", "w1.topk", [PureDpEvent(0.5)], payload='{"noise": 2}')
    assert again.duplicate and again.accepted and again.payload == '{"noise": 1}'
    assert again.spent == first.spent
    assert ledger.remaining("s").spent == compose([PureDpEvent(0.5)])  # charged once
    assert ledger.verify("s").charges == 1


def test_outbox_unpublished_and_mark_published(ledger):
    for i in range(3):
        ledger.charge("s", f"r{i}", [PureDpEvent(0.1)], payload=f"P{i}")
    ledger.charge("s", "no-payload", [PureDpEvent(0.1)])
    assert ledger.unpublished("s") == ["r0", "r1", "r2"]
    ledger.mark_published("s", "r1")
    assert ledger.unpublished("s") == ["r0", "r2"]
    assert ledger.stored("s", "r1") == "P1" and ledger.stored("s", "no-payload") is None
    assert ledger.scopes() == ["s"]


def test_reservation_counts_until_settled_and_settle_charges_actual(ledger):
    worst = [RangeBoundedEvent(0.1, count=10, delta=1e-7, mechanism="limited_domain_topk")]
    held = ledger.reserve("s", "w1.topk", worst)
    assert held.accepted and held.spent == compose(worst)
    assert ledger.reserve("s", "w1.topk", worst).duplicate  # idempotent hold
    assert ledger.remaining("s").spent == compose(worst)
    # a charge that fits only without the hold is refused while the hold is open
    assert not ledger.charge("s", "other", [PureDpEvent(0.2)]).accepted
    actual = [RangeBoundedEvent(0.1, count=3, delta=1e-7, mechanism="limited_domain_topk")]
    settled = ledger.settle("s", "w1.topk", "w1.topk", actual, payload="TOPK")
    assert settled.accepted and settled.payload == "TOPK" and settled.spent == compose(actual)
    assert ledger.settle("s", "w1.topk", "w1.topk", actual, payload="X").payload == "TOPK"
    assert ledger.reserve("s", "w1.topk", worst).duplicate  # settled: the repeat returns the charge
    assert ledger.charge("s", "other", [PureDpEvent(0.2)]).accepted
    report = ledger.verify("s")
    assert report.ok and report.open_reservations == 0 and report.charges == 2


def test_a_release_id_is_held_or_charged_never_both(ledger):
    """A hold and a direct charge under one id (a worker that reserved for a window while another charged
    its status record): the charge drops the hold, and a later reserve of the id returns the charge, so
    no hold is left that nothing would settle. (Without either rule verify counts an open reservation.)"""
    worst = [PureDpEvent(0.4)]
    assert ledger.reserve("s", "w1.topk", worst).accepted
    status = ledger.charge("s", "w1.topk", [], payload="EXHAUSTED")
    assert status.accepted and not status.duplicate and status.spent == Cost().spent()  # the hold is gone
    again = ledger.reserve("s", "w1.topk", worst)
    assert again.duplicate and again.payload == "EXHAUSTED"
    assert ledger.settle("s", "w1.topk", "w1.topk", worst, payload="LATE").payload == "EXHAUSTED"
    assert ledger.reserve("s", "w2.topk", worst).accepted and ledger.reserve("s", "w2.topk", worst).duplicate
    report = ledger.verify("s")
    assert report.ok and report.open_reservations == 1 and report.charges == 1, report.problems


def test_settle_unknown_reservation_is_refused(ledger, redis_client):
    result = ledger.settle("s", "nope", "r", [PureDpEvent(0.1)], payload="P")
    assert not result.accepted and result.reason == "unknown_reservation" and not result.exhausted
    assert ledger.stored("s", "r") is None


def test_cancel_drops_a_hold(ledger):
    ledger.reserve("s", "h", [PureDpEvent(0.9)])
    assert ledger.cancel("s", "h") and not ledger.cancel("s", "h")
    assert ledger.charge("s", "r", [PureDpEvent(0.9)]).accepted
    assert ledger.verify("s").ok


def test_zcdp_event_disables_basic_route(ledger):
    result = ledger.charge("s", "z", [ZCdpEvent(0.01, 1e-7)])
    assert result.spent.basic_epsilon == float("inf")
    assert result.epsilon_spent == zcdp_to_epsilon(0.01, 1e-7) < 0.01 + 2 * (0.01 * 16.11809565095832) ** 0.5
    assert ledger.verify("s").ok


def test_verify_detects_tampered_totals(ledger, redis_client):
    ledger.charge("s", "a", [PureDpEvent(0.2)])
    redis_client.hset("t:{ledger:s}:totals", "rho", "0.0001")
    report = ledger.verify("s")
    assert not report.ok and any("stored totals" in p for p in report.problems)


def test_verify_detects_a_stored_release_without_a_charge(ledger, redis_client):
    ledger.charge("s", "a", [PureDpEvent(0.2)], payload="A")
    assert ledger.verify("s").ok
    redis_client.hset("t:{ledger:s}:outbox", "sneaked", "B")
    report = ledger.verify("s")
    assert not report.ok and "a stored release has no charge in the log" in report.problems


def test_history_lists_every_operation(ledger):
    ledger.charge("s", "a", [PureDpEvent(0.2, mechanism="noisy_topk_with_gap")])
    ledger.reserve("s", "h", [PureDpEvent(0.1)])
    ledger.settle("s", "h", "b", [PureDpEvent(0.05)])
    history = ledger.history("s")
    assert [(h.type, h.id) for h in history] == [("charge", "a"), ("reserve", "h"), ("settle", "b")]
    assert history[0].events[0].mechanism == "noisy_topk_with_gap"
    json.dumps([h.to_dict() for h in history])


def test_lua_and_python_decisions_agree_near_the_boundary(redis_client):
    """Random caps and costs placed within a few ulps of the cap: the script's accept/refuse must equal
    budget.decide on the same sums (committed, then open holds by sorted id, then the new cost)."""
    import random

    rnd = random.Random(6)
    compared = accepted = 0
    for trial in range(200):
        cap = BudgetCap(rnd.uniform(0.05, 5.0), rnd.choice([1e-6, 1e-5, 1e-3]), rnd.choice([1e-9, 1e-7]))
        ledger = Ledger(redis_client, cap, keys=Keys(f"agree{trial}"))
        committed = [PureDpEvent(rnd.uniform(0.01, cap.epsilon / 4)), RangeBoundedEvent(rnd.uniform(0.01, cap.epsilon / 10),
                     count=rnd.randint(1, 5), delta=cap.delta / 10)]
        hold = [ApproxDpEvent(rnd.uniform(0.001, cap.epsilon / 8), cap.delta / 20)]
        setup = [ledger.charge("s", f"c{i}", [e]).accepted for i, e in enumerate(committed)]
        if not (all(setup) and ledger.reserve("s", "h", hold).accepted):
            continue  # this random state does not fit the cap: not a boundary case
        compared += 1
        base = Cost.of([committed[0]]) + Cost.of([committed[1]]) + Cost.of(hold)
        # choose a pure ε that puts the reported ε (basic or zCDP route) right at the cap, then nudge by ulps
        lo, hi = 1e-12, 2 * cap.epsilon
        assert decide((base + Cost.of([PureDpEvent(lo)])).spent(), cap) == "ok"
        for _ in range(200):
            mid = (lo + hi) / 2
            if decide((base + Cost.of([PureDpEvent(mid)])).spent(), cap) == "ok":
                lo = mid
            else:
                hi = mid
        eps = lo
        for _ in range(rnd.randint(0, 3)):
            eps = float.__add__(eps, eps * 2.0**-52 * rnd.choice([-1, 1]))
        new = [PureDpEvent(eps)]
        expected = decide((base + Cost.of(new)).spent(), cap)
        got = ledger.charge("s", "new", new)
        assert got.reason == expected, (trial, cap, eps)
        accepted += got.accepted
    assert compared >= 100 and 0 < accepted < compared  # both sides of the boundary were exercised


def test_lua_caps_a_zcdp_only_scope_by_the_cks20_conversion(redis_client):
    """Only zCDP events (no basic route): the script accepts ρ up to where the CKS20 conversion reaches the
    cap and refuses just above -- the same as budget.decide. A script still on the classic
    ρ + 2·sqrt(ρ·ln(1/δ′)) would refuse the ρ just below (tried: it fails here)."""
    cap = BudgetCap(1.0, 1e-5, 1e-7)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if decide(compose([ZCdpEvent(mid)]), cap) == "ok" else (lo, mid)
    assert zcdp_to_epsilon(lo, 1e-7) <= 1.0 < lo + 2 * (lo * 16.11809565095832) ** 0.5  # the classic would refuse it
    below = Ledger(redis_client, cap, keys=Keys("zb")).charge("s", "a", [ZCdpEvent(lo)])
    above = Ledger(redis_client, cap, keys=Keys("za")).charge("s", "a", [ZCdpEvent(hi * (1 + 1e-9))])
    assert below.accepted and (not above.accepted and above.reason == "epsilon_cap")


LIFETIME = BudgetCap(1.5, 1e-5, 1e-7, name="budget.lifetime")


@pytest.fixture
def two_scope_ledger(redis_client):
    return Ledger(redis_client, CAP, keys=Keys("t"), lifetime_cap=LIFETIME)


def test_lifetime_scope_caps_across_periods(two_scope_ledger):
    ledger = two_scope_ledger
    assert ledger.charge("2026-11-28", "a", [PureDpEvent(0.9)], payload="A").accepted
    refused = ledger.charge("2026-11-29", "b", [PureDpEvent(0.9)], payload="B")  # fits the period, not lifetime
    assert not refused.accepted and refused.reason == "lifetime_epsilon_cap" and refused.exhausted
    assert ledger.stored("2026-11-29", "b") is None
    assert ledger.remaining("2026-11-29").spent == compose([])  # the period was not touched
    assert ledger.charge("2026-11-29", "c", [PureDpEvent(0.6)]).accepted  # 1.5 in lifetime: at the cap
    life = ledger.remaining("lifetime")
    assert life.epsilon_spent == pytest.approx(1.5) and ledger.verify("lifetime").open_reservations == 0
    for scope in ("2026-11-28", "2026-11-29", "lifetime"):
        assert ledger.verify(scope).ok
    assert ledger.scopes() == ["2026-11-28", "2026-11-29", "lifetime"]


def test_period_refusal_cancels_the_lifetime_hold(two_scope_ledger):
    ledger = two_scope_ledger
    assert ledger.charge("d", "a", [PureDpEvent(0.9)]).accepted
    assert ledger.charge("d", "b", [PureDpEvent(0.2)]).reason == "epsilon_cap"  # period full
    assert ledger.remaining("lifetime").spent == compose([PureDpEvent(0.9)])  # hold dropped again
    assert ledger.verify("lifetime").ok


def test_crash_between_lifetime_hold_and_period_charge_is_completed_by_the_retry(two_scope_ledger):
    ledger = two_scope_ledger
    events = [PureDpEvent(0.4)]
    ledger.reserve("lifetime", "d/a", events)  # step 1 of charge("d", "a") ... then the process died
    assert ledger.remaining("lifetime").spent == compose(events)  # counted while in doubt
    retry = ledger.charge("d", "a", events, payload="A")
    assert retry.accepted and not retry.duplicate
    assert ledger.remaining("lifetime").spent == compose(events)  # once, not twice
    assert ledger.charge("d", "a", events, payload="A2").payload == "A"
    report = ledger.verify("lifetime")
    assert report.ok and report.open_reservations == 0 and report.charges == 1


def test_lifetime_reserve_and_settle(two_scope_ledger):
    ledger = two_scope_ledger
    worst = [RangeBoundedEvent(0.1, count=10, delta=1e-7)]
    assert ledger.reserve("d", "w.topk", worst).accepted
    assert ledger.remaining("lifetime").spent == compose(worst)
    actual = [RangeBoundedEvent(0.1, count=2, delta=1e-7)]
    assert ledger.settle("d", "w.topk", "w.topk", actual, payload="T").accepted
    assert ledger.remaining("lifetime").spent == compose(actual)
    assert ledger.remaining("d").spent == compose(actual)
    assert ledger.verify("lifetime").ok and ledger.verify("d").ok


def test_zero_cost_record_goes_through_the_idempotent_outbox(two_scope_ledger):
    ledger = two_scope_ledger
    first = ledger.charge("d", "w.status", [], payload='{"status": "budget_exhausted"}')
    assert first.accepted and first.spent == compose([])
    assert ledger.charge("d", "w.status", [], payload="other").payload == '{"status": "budget_exhausted"}'
    assert ledger.unpublished("d") == ["w.status"]
    assert ledger.verify("d").ok and ledger.history("lifetime") == []
    with pytest.raises(ValueError):
        ledger.charge("d", "w.none", [])  # no events and nothing to store: a caller bug


def test_settle_never_stores_a_release_the_lifetime_scope_did_not_count(redis_client):
    # reserved while the lifetime scope was off: settling charges the lifetime directly
    Ledger(redis_client, CAP, keys=Keys("t")).reserve("d", "h", [PureDpEvent(0.2)])
    ledger = Ledger(redis_client, CAP, keys=Keys("t"), lifetime_cap=LIFETIME)
    assert ledger.settle("d", "h", "r", [PureDpEvent(0.2)], payload="R").accepted
    assert ledger.remaining("lifetime").spent == compose([PureDpEvent(0.2)])
    # an actual cost above the hold that the lifetime cannot cover: refused, nothing stored
    assert ledger.charge("d2", "x", [PureDpEvent(0.9)]).accepted  # lifetime 1.1 of 1.5
    assert ledger.reserve("d3", "h2", [PureDpEvent(0.1)]).accepted
    refused = ledger.settle("d3", "h2", "r2", [PureDpEvent(0.5)], payload="R2")
    assert not refused.accepted and refused.reason == "lifetime_epsilon_cap"
    assert ledger.stored("d3", "r2") is None
    for scope in ("d", "d2", "d3", "lifetime"):
        assert ledger.verify(scope).ok
