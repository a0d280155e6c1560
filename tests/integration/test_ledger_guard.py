"""The rule that tells a Redis that lost the ledger from a new deployment (stream_dp.release.ledger_guard), row
by row against a real redis-server, with the releases topic's contents as read (TopicContents): no false
alarm for a brand-new deployment, an empty topic, a topic trimmed by retention while Redis kept its epoch,
an upgrade from a version without epochs, or several workers starting together; a refusal naming the
rebuild command when a published record's charge is missing, when the topic was trimmed and Redis has no
epoch, and while a rebuild has not finished. The rebuild itself: a scope on the topic becomes exactly what
was published (a charge made on the wiped state is replaced), idempotent, republications identical."""

from __future__ import annotations

import json

import pytest

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import Ledger
from stream_dp.store.keys import Keys
from stream_dp.release.ledger_guard import REBUILD, LedgerGuard, start_check
from stream_dp.release.ledger_rebuild import finish, first_records, rebuild
from stream_dp.release.outbox import Outbox
from stream_dp.release.records import Envelope, with_budget
from stream_dp.release.topic_reader import Published, TopicContents
from stream_dp.state_epochs import EpochMarker, StateLost

pytestmark = pytest.mark.integration

KEYS = Keys("g")
CAP = BudgetCap(5.0, 1e-5, 1e-7)
EV = [PureDpEvent(0.5, mechanism="limited_domain_topk")]


def publish(ledger: Ledger, start: int, scope: str = "d") -> dict:
    """Charge a release as the worker does and return the record it would publish."""
    rid = f"{start}-{start + 60}.topk"
    record = {"release_id": rid, "schema_version": 1, "window": {"start": start, "end": start + 60}, "type": "topk",
              "status": "released", "mechanism": {"name": "limited_domain_topk", "parameters": {}},
              "items": [{"rank": 1, "key": f"k{start}"}], "hit_bottom": False,
              "cost": {"events": [e.to_dict() for e in EV], "epsilon": 0.5, "delta": 0.0, "rho": 0.125},
              "created_at": "1970-01-01T00:01:00Z"}
    result = ledger.charge(scope, rid, EV, payload=Envelope(record).dumps())
    ledger.mark_published(scope, rid)
    return with_budget(record, result.budget_block(scope, ledger.cap))


def topic(*records, starts=None, ends=None) -> TopicContents:
    pubs = [Published(0, i, r) for i, r in enumerate(records)]
    return TopicContents("releases", pubs, starts if starts is not None else {0: 0},
                         ends if ends is not None else {0: len(pubs)})


@pytest.fixture
def ledger(redis_client):
    return Ledger(redis_client, CAP, keys=KEYS)


def test_a_new_deployment_writes_one_epoch_even_with_several_workers(redis_client) -> None:
    empty = topic()
    first = start_check(redis_client, KEYS, empty)
    assert first.origin.startswith("first start")
    assert start_check(redis_client, KEYS, empty) == first  # a second worker agrees (SET NX)


def test_a_ledger_holding_the_topic_s_last_records_starts_and_an_upgrade_gets_an_epoch(redis_client, ledger) -> None:
    records = [publish(ledger, s) for s in (0, 60)]
    epoch = start_check(redis_client, KEYS, topic(*records))  # no epoch yet: a deployment older than epochs
    assert epoch.origin.startswith("adopted")
    assert start_check(redis_client, KEYS, topic(*records)) == epoch


def test_a_published_record_whose_charge_is_gone_is_refused_naming_the_rebuild(redis_client, ledger) -> None:
    records = [publish(ledger, s) for s in (0, 60, 120)]
    start_check(redis_client, KEYS, topic(*records))
    redis_client.flushdb()
    with pytest.raises(StateLost) as info:
        start_check(redis_client, KEYS, topic(*records))
    assert "release 120-180.topk (scope d) is on the releases topic releases but its charge is not in the " \
           "ledger and 2 more" in str(info.value)
    assert info.value.recovery == REBUILD and f"`{REBUILD}`" in str(info.value)


def test_a_topic_trimmed_to_nothing_needs_the_epoch(redis_client) -> None:
    trimmed = topic(starts={0: 40}, ends={0: 40})  # every record deleted by retention
    with pytest.raises(StateLost, match="retention has deleted since"):
        start_check(redis_client, KEYS, trimmed)
    epoch = EpochMarker(redis_client, KEYS.ledger_epoch()).create("first start")
    assert start_check(redis_client, KEYS, trimmed) == epoch


def test_the_guard_stops_a_worker_whose_epoch_vanished_or_changed(redis_client) -> None:
    epoch = start_check(redis_client, KEYS, topic())
    guard = LedgerGuard(redis_client, KEYS, epoch)
    guard.check()
    EpochMarker(redis_client, KEYS.ledger_epoch()).replace("rebuilt from the releases topic")
    with pytest.raises(StateLost, match="replaced while this worker ran"):
        guard.check()
    redis_client.delete(KEYS.ledger_epoch())
    with pytest.raises(StateLost, match="is gone from Redis") as info:
        guard.check()
    assert info.value.recovery == REBUILD


def test_an_outbox_with_a_guard_publishes_nothing_once_the_ledger_is_gone(redis_client, ledger) -> None:
    sent = []
    outbox = Outbox(ledger, type("P", (), {"publish": lambda self, r: sent.append(r)})(), None)  # type: ignore[arg-type]
    outbox.guard = LedgerGuard(redis_client, KEYS, start_check(redis_client, KEYS, topic()))
    redis_client.flushdb()
    with pytest.raises(StateLost):
        outbox.check_ledger()
    assert sent == []


def test_rebuild_makes_each_scope_exactly_what_was_published(redis_client, ledger) -> None:
    records = [publish(ledger, s) for s in (0, 60, 120)]
    other = publish(ledger, 240, scope="e")
    redis_client.flushdb()
    ledger.charge("d", "0-60.topk", [PureDpEvent(0.1)], payload=Envelope({"never": "published"}).dumps())
    ledger.charge("d", "999-1059.topk", [PureDpEvent(0.1)], payload="{}")  # charged on the wiped state
    with pytest.raises(StateLost, match="has not finished"):
        EpochMarker(redis_client, KEYS.ledger_epoch()).replace("rebuild from the releases topic in progress")
        start_check(redis_client, KEYS, topic(*records))
    report = rebuild(ledger, topic(*records, other, records[1]).records)
    report.epoch = finish(ledger)
    assert report.restored == {"d": 3, "e": 1} and report.replaced == 2
    for scope in ("d", "e"):
        assert ledger.verify(scope).ok
    assert ledger.remaining("d").spent.basic_epsilon == pytest.approx(1.5)
    assert ledger.stored("d", "999-1059.topk") is None and ledger.unpublished("d") == []
    assert ledger.stored_cap("d") == BudgetCap(5.0, 1e-5, 1e-7)  # the records' cap, δ′ from the config
    # a republication of a restored release is the record that was published, byte for byte
    outbox = Outbox(ledger, None, None)  # type: ignore[arg-type]
    committed = outbox._committed("d", "60-120.topk", Envelope({}),
                                  ledger.charge("d", "60-120.topk", EV, payload="{}"))
    republished = with_budget(committed.envelope.record, committed.result.budget_block("d", ledger.cap))
    assert json.dumps(republished, sort_keys=True) == json.dumps(records[1], sort_keys=True)
    assert start_check(redis_client, KEYS, topic(*records)) == report.epoch
    again = rebuild(ledger, topic(*records).records)
    assert again.restored == {"d": 3} and ledger.remaining("d").spent.basic_epsilon == pytest.approx(1.5)
    assert [r["release_id"] for r in first_records(topic(records[2], records[0], records[2]).records)] == \
        ["0-60.topk", "120-180.topk"]


def test_a_publication_checks_the_epoch_read_behind_its_commit(redis_client, ledger) -> None:
    """The epoch is read in the commit's own round trip (after its script) and the publication checks that
    read: no round trip of its own; a ledger wiped before the commit is caught; a stored release published
    again (no commit) reads the epoch itself."""
    from stream_dp.node_batches import RideAlong
    from stream_dp.release.metrics import ReleaseMetrics
    from prometheus_client import CollectorRegistry

    sent = []
    publisher = type("P", (), {"publish": lambda self, r: sent.append(r)})()
    outbox = Outbox(ledger, publisher, ReleaseMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    guard = LedgerGuard(redis_client, KEYS, start_check(redis_client, KEYS, topic()))
    outbox.guard = guard
    own_reads = []
    check = guard.check
    guard.check = lambda: (own_reads.append(1), check())[1]  # type: ignore[method-assign]
    record = {"release_id": "0-60.topk", "type": "topk", "status": "released", "items": [],
              "cost": {"events": [e.to_dict() for e in EV]}}
    committed = outbox.commit("d", "0-60.topk", Envelope(record), tuple(EV), settle=False).now(RideAlong())
    assert committed.epoch is not None and committed.epoch.done
    outbox.publish_all([committed])
    assert len(sent) == 1 and own_reads == []
    outbox.publish_all([outbox.stored("d", "0-60.topk")])  # republished: no commit, so its own read
    assert len(sent) == 2 and own_reads == [1]
    redis_client.delete(KEYS.ledger_epoch())  # wiped before the next commit's round trip
    again = outbox.commit("d", "60-120.topk", Envelope({**record, "release_id": "60-120.topk"}), tuple(EV),
                          settle=False).now(RideAlong())
    with pytest.raises(StateLost):
        outbox.publish_all([again])
    assert len(sent) == 2 and own_reads == [1]
