"""Model-based check: random operation sequences against the ledger and a pure-Python reference model of
its semantics (cap rule, idempotence, reservations, outbox). Results and totals must match EXACTLY, since
the scripts perform the same float additions in the same order."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from stream_dp.accounting.budget import BudgetCap, decide
from stream_dp.accounting.events import ApproxDpEvent, PureDpEvent, RangeBoundedEvent, ZCdpEvent
from stream_dp.accounting.ledger import Cost, Ledger
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration

CAP = BudgetCap(3.0, 1e-4, 1e-7)
POOL = [
    [PureDpEvent(0.3)], [PureDpEvent(0.05, count=3)], [RangeBoundedEvent(0.1, count=10, delta=1e-7)],
    [RangeBoundedEvent(0.2, count=2, delta=1e-6)], [ApproxDpEvent(0.5, 1e-6)], [ApproxDpEvent(0.01, 2e-5)],
    [PureDpEvent(0.1), RangeBoundedEvent(0.05, count=4, delta=1e-8)], [ZCdpEvent(0.002, 1e-8)],
]


@dataclass
class Model:
    committed: Cost = field(default_factory=Cost)
    holds: dict[str, Cost] = field(default_factory=dict)
    settled: dict[str, str] = field(default_factory=dict)
    first: dict[str, tuple[Cost, str | None]] = field(default_factory=dict)  # release id → (view, payload)
    hold_first: dict[str, Cost] = field(default_factory=dict)

    def view(self, base: Cost | None = None, skip: str | None = None) -> Cost:
        total = self.committed if base is None else base
        for rid in sorted(self.holds):
            if rid != skip:
                total = total + self.holds[rid]
        return total

    def _commit(self, release_id: str, cost: Cost, payload: str | None):
        self.committed = self.committed + cost
        self.first[release_id] = (self.view(), payload)
        return True, False, "ok", self.first[release_id][0], payload

    def charge(self, release_id: str, cost: Cost, payload: str | None):
        if release_id in self.first:
            return (True, True, "ok", *self.first[release_id])
        reason = decide((self.view() + cost).spent(), CAP)
        if reason != "ok":
            return False, False, reason, self.view(), None
        self.cancel(release_id)  # a hold under the charged id is dropped
        return self._commit(release_id, cost, payload)

    def reserve(self, rid: str, cost: Cost):
        if rid in self.settled and self.settled[rid] in self.first:
            return (True, True, "ok", *self.first[self.settled[rid]])
        if rid in self.first:  # an id already charged as a release: that charge
            return (True, True, "ok", *self.first[rid])
        if rid in self.holds:
            return True, True, "ok", self.hold_first[rid], None
        reason = decide((self.view() + cost).spent(), CAP)
        if reason != "ok":
            return False, False, reason, self.view(), None
        self.holds[rid] = cost
        self.hold_first[rid] = self.view()
        return True, False, "ok", self.hold_first[rid], None

    def settle(self, rid: str, release_id: str, cost: Cost, payload: str | None):
        if release_id in self.first:
            return (True, True, "ok", *self.first[release_id])
        if rid not in self.holds:
            if rid in self.settled and self.settled[rid] in self.first:
                return (True, True, "ok", *self.first[self.settled[rid]])
            return False, False, "unknown_reservation", self.view(), None
        reason = decide((self.view(skip=rid) + cost).spent(), CAP)
        if reason != "ok":
            return False, False, reason, self.view(), None
        del self.holds[rid]
        self.settled[rid] = release_id
        return self._commit(release_id, cost, payload)

    def cancel(self, rid: str) -> bool:
        self.hold_first.pop(rid, None)
        return self.holds.pop(rid, None) is not None


@pytest.mark.parametrize("seed", [1, 2])
def test_random_operation_sequences_match_the_model(redis_client, seed):
    rnd = random.Random(seed)
    ledger = Ledger(redis_client, CAP, keys=Keys(f"model{seed}"))
    model = Model()
    kinds = {"charge": 0, "reserve": 0, "settle": 0, "cancel": 0}
    outcomes = set()
    for step in range(300):
        op = rnd.choices(list(kinds), weights=[5, 3, 3, 1])[0]
        events = rnd.choice(POOL)
        cost = Cost.of(events)
        payload = rnd.choice([None, f"payload-{step}"])
        # reservation and release ids overlap (r0..r3): a charge drops a hold of its id, a reserve of a charged id returns it
        rid, release = rnd.choice([f"h{rnd.randrange(12)}", f"r{rnd.randrange(4)}"]), f"r{rnd.randrange(40)}"
        if op == "charge":
            if payload is None and not events:
                continue
            got = ledger.charge("s", release, events, payload=payload)
            want = model.charge(release, cost, payload)
        elif op == "reserve":
            got = ledger.reserve("s", rid, events)
            want = model.reserve(rid, cost)
        elif op == "settle":
            got = ledger.settle("s", rid, release, events, payload=payload)
            want = model.settle(rid, release, cost, payload)
        else:
            assert ledger.cancel("s", rid) == model.cancel(rid), step
            kinds[op] += 1
            continue
        kinds[op] += 1
        accepted, duplicate, reason, view, stored = want
        assert (got.accepted, got.duplicate, got.reason, got.payload) == (accepted, duplicate, reason, stored), step
        assert got.spent == view.spent(), step  # exact: same additions, same order
        assert ledger.remaining("s").spent == model.view().spent(), step
        outcomes.add((op, accepted, duplicate, reason))
    report = ledger.verify("s")
    assert report.ok, report.problems
    assert report.open_reservations == len(model.holds)
    # the sequence exercised acceptance, refusal at the cap, duplicates and unknown reservations
    assert {("charge", True, False, "ok"), ("charge", True, True, "ok"), ("settle", False, False,
            "unknown_reservation")} <= outcomes
    assert any(not o[1] and o[3] in ("epsilon_cap", "delta_cap") for o in outcomes)
