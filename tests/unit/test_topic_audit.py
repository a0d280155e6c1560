"""The audit of the ledger against the releases topic (stream_dp.accounting.topic_audit), as a pure function:
both directions, costs, duplicates, pending releases and the retention rule."""

from __future__ import annotations

from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger_log import Cost
from stream_dp.accounting.topic_audit import ScopeView, audit, retention_horizon
from stream_dp.release.topic_reader import Published, TopicContents

EV = [PureDpEvent(0.5, mechanism="limited_domain_topk")]


def record(start: int, *, scope: str = "d", events=EV, items=()) -> dict:
    return {"release_id": f"{start}-{start + 60}.topk", "window": {"start": start, "end": start + 60},
            "type": "topk", "status": "released", "items": list(items),
            "cost": {"events": [e.to_dict() for e in events]}, "budget": {"scope": scope}}


def contents(*records, starts=None, partition=0) -> TopicContents:
    pubs = [Published(partition, i, r) for i, r in enumerate(records)]
    return TopicContents("releases", pubs, starts or {partition: 0}, {partition: len(pubs)})


def view_of(*starts, scope="d", events=EV, unpublished=()) -> dict[str, ScopeView]:
    rids = [f"{s}-{s + 60}.topk" for s in starts]
    return {scope: ScopeView(charges={r: Cost.of(events) for r in rids}, first_results=set(rids), stored=set(rids),
                             unpublished=set(unpublished))}


def test_a_topic_and_a_ledger_that_agree() -> None:
    report = audit(contents(record(0), record(60), record(60)), view_of(0, 60))  # a republication is fine
    assert report.ok and (report.records_checked, report.charges_checked, report.messages) == (2, 2, 3)
    assert "2 records checked against the ledger, 2 charges checked against the topic" in report.summary()
    assert report.summary().endswith("0 problems")


def test_a_published_record_whose_charge_the_ledger_lost_is_named() -> None:
    view = view_of(0)
    report = audit(contents(record(0), record(60)), view)
    assert report.problems == ["release 60-120.topk (scope d) is on the topic but its charge is not in the ledger"]
    view["d"].first_results.discard("0-60.topk")  # only its first result deleted (HDEL charges by hand)
    report = audit(contents(record(0)), view)
    assert report.problems == ["release 0-60.topk (scope d) is on the topic but its charge's first result is not "
                               "in the ledger"]


def test_a_cost_that_differs_from_the_record_is_named() -> None:
    report = audit(contents(record(0)), view_of(0, events=[PureDpEvent(0.25)]))
    assert len(report.problems) == 1 and "the ledger charged" in report.problems[0]


def test_a_charge_marked_published_but_not_on_the_topic_is_named_and_a_pending_one_is_not() -> None:
    report = audit(contents(record(0)), view_of(0, 60, 120, unpublished=("120-180.topk",)))
    assert report.pending == 1
    assert report.problems == ["release 60-120.topk (scope d) is charged and marked published in the ledger but "
                               "not on the topic"]


def test_records_deleted_by_retention_are_not_problems_but_a_gap_after_them_is() -> None:
    trimmed = contents(record(180), record(300), starts={0: 3})  # offsets 0-2 deleted: windows 0, 60, 120
    report = audit(trimmed, view_of(0, 60, 120, 180, 240, 300))
    assert report.before_retention == 3
    assert report.problems == ["release 240-300.topk (scope d) is charged and marked published in the ledger but "
                               "not on the topic"]
    assert retention_horizon(trimmed.records, trimmed.starts) == 180
    assert retention_horizon(trimmed.records, {0: 0}) == float("-inf")
    assert retention_horizon([], {0: 5}) == float("inf")  # everything deleted: nothing can be missing


def test_the_same_release_with_two_different_records_is_named() -> None:
    other = record(0, items=[{"key": "x"}])
    report = audit(contents(record(0), other), view_of(0))
    assert "release 0-60.topk is on the topic twice with different contents" in report.problems


def test_with_a_lifetime_cap_a_costly_release_must_be_counted_in_the_lifetime_scope() -> None:
    view = view_of(0)
    assert audit(contents(record(0)), view, lifetime=True).problems == [
        "release 0-60.topk (scope d) is not counted in the lifetime scope"]
    view["lifetime"] = ScopeView(holds={"d/0-60.topk"})  # an open hold counts (a crash over-counts, never under)
    assert audit(contents(record(0)), view, lifetime=True).ok
    free = record(60, events=[])
    assert audit(contents(free), view_of(60, events=[]), lifetime=True).ok  # zero cost: nothing to hold
