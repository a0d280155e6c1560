"""The outbox: charge + store atomically in the ledger, then publish, then mark published.

Delivery semantics of a release (no re-roll: docs/privacy.md §4, "Charged before visible, exactly once"):

1. **commit** -- one atomic ledger step charges the release's DP events and stores its envelope under the
   release id (``Ledger.charge`` or ``Ledger.settle`` with ``payload``). Idempotent per release id: when the id
   was already charged, the ledger returns the *first* result and the *first* stored payload, and that is what
   gets published -- a worker that lost a race or restarted never publishes its own fresh noise;
2. **confirm** -- the ledger confirms the charge and stored record on ``redis.min_replicas_acked`` replicas
   (``Ledger.confirm``: a fence write and ``WAIT`` on the scope's master), so a master failover cannot take
   back the charge of a published release; not confirmed in time → a transient error, nothing is sent, the
   worker retries (and publishes the *stored* record, or -- if the failover lost it unseen -- releases anew);
3. **publish** -- the record is produced to the releases topic keyed by release id, by an idempotent
   producer with ``acks=all``, and the send is awaited;
4. **mark published** in the ledger -- in a round trip of its own, or queued ahead of the worker's next
   Redis step (:class:`~stream_dp.node_batches.RideAlong`): either way after the acknowledgement.

A crash between 1 and 4 leaves a stored-but-unpublished release: the worker publishes every one of them
when it starts (``ReleaseWorker.recover``, under the window's claim so that a live worker's in-flight release
is not published twice), and the window's own retry finds it stored anyway. A crash between 3 and 4 publishes the identical record twice
(same key, same bytes): at-least-once delivery of one record, never two different records for one id.

The published record is the stored record plus the ``budget`` block of the ledger's first charge result for
that id. The first result is obtained again by repeating the (idempotent) charge with the stored events,
so a republished record is byte-identical to the first publication.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stream_dp.node_batches import Pending, Reads, RideAlong
from stream_dp.release.crashpoints import NO_CRASHES, CrashPoints
from stream_dp.release.ledger_port import ChargeOutcome, LedgerStepPlan, ReleaseLedger
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.records import Envelope, events_of, with_budget
from stream_dp.release.types import REGISTRY
from stream_dp.wire import DEFAULT_MESSAGE_MAX_BYTES, message_parts

log = logging.getLogger(__name__)

SEND_TIMEOUT_SECONDS = 30.0


class Publisher:
    """Produces release records with an idempotent, ``acks=all`` Kafka producer, keyed by release id."""

    def __init__(self, producer: Any, topic: str, *, timeout: float = SEND_TIMEOUT_SECONDS,
                 max_message_bytes: int = DEFAULT_MESSAGE_MAX_BYTES) -> None:
        self.producer = producer
        self.topic = topic
        self.timeout = timeout
        self.max_message_bytes = max_message_bytes  # kafka.release_message_max_bytes: larger records go in parts

    def publish(self, record: dict[str, Any]) -> None:
        """Send one record and wait for the broker's acknowledgement (raises on failure)."""
        _, error = self.publish_all([record])
        if error is not None:
            raise error

    def publish_all(self, records: Sequence[dict[str, Any]]) -> tuple[int, Exception | None]:
        """Send every record, then wait for their acknowledgements in send order, so a record does not wait
        out the broker round trip of the one before it. Returns how many records, from the first, the broker
        acknowledged, and the error that stopped the rest (None: every one was).

        ``flush`` hands the records to the sender at once instead of after the producer's ``linger_ms``: a
        release is awaited right away, so lingering is pure latency. The producer is idempotent with
        ``acks=all``, so on one partition the records are appended in send order; a record sent after one
        that failed may have been appended all the same, but is not counted: its release stays
        stored-but-unpublished and is published again (identical bytes), as after a crash.

        A record whose JSON is larger than ``max_message_bytes`` (``kafka.release_message_max_bytes``) goes out
        as consecutive part messages (:func:`~stream_dp.wire.message_parts`, the same key, cut the
        same way every time) and counts as acknowledged once all of them are: a record too large for one
        message never blocks the releases after it.
        """
        sent: list[tuple[list[Any], bool]] = []  # per record: the futures of its messages, all of them sent?
        error = None
        for record in records:
            key = record["release_id"].encode()
            futures: list[Any] = []
            try:
                for value in message_parts(record, self.max_message_bytes):
                    futures.append(self.producer.send(self.topic, key=key, value=value))
            except Exception as exc:  # noqa: BLE001 - handed back with the acknowledged count, then raised
                error = exc
                if futures:  # some of its parts went: not acknowledged, so it is published again, whole
                    sent.append((futures, False))
                break
            sent.append((futures, True))
        flush = getattr(self.producer, "flush", None)  # stand-ins without a send buffer have none
        try:
            if sent and flush is not None:
                flush(timeout=self.timeout)
        except Exception as exc:  # noqa: BLE001 - as above (none counted: which ones arrived is unknown)
            return 0, exc
        for acked, (futures, whole) in enumerate(sent):
            try:
                for future in futures:
                    future.get(timeout=self.timeout)
            except Exception as exc:  # noqa: BLE001 - as above
                return acked, exc
            if not whole:
                return acked, error
        return len(sent), error

    def close(self) -> None:
        self.producer.close()


@dataclass
class Committed:
    """A stored release: its envelope, the ledger's first charge result, and whether this call stored it."""

    scope: str
    release_id: str
    envelope: Envelope
    result: ChargeOutcome
    fresh: bool
    epoch: Pending | None = None  # the ledger epoch as read right behind this commit (same round trip), if it was


@dataclass
class HoldStep:
    """:meth:`Outbox.reserve`: the ledger's reservation, sent now (:meth:`now`) or queued (:meth:`later`, then
    :meth:`Outbox.hold_of`). ``ride``: queued writes go ahead of the hold and queued reads (the mechanism's
    data) after it, in the same round trip."""

    outbox: Outbox
    step: LedgerStepPlan

    def now(self, ride: RideAlong | None = None) -> ChargeOutcome:
        with self.outbox.metrics.phase("ledger"):
            result = self.step.now(ride)
        self.outbox.crashpoints.reached("after_reserve")
        return result

    def later(self, ride: RideAlong) -> Pending | None:
        """Queued on ``ride`` after its next step; None when the ledger cannot queue it now (then :meth:`now`)."""
        return self.step.later(ride)


@dataclass
class CommitStep:
    """:meth:`Outbox.commit`: one atomic ledger step that charges and stores a release, sent now (:meth:`now`,
    with the ledger epoch read right behind it) or queued after another step (:meth:`later`, then
    :meth:`Outbox.committed_of`)."""

    outbox: Outbox
    scope: str
    rid: str
    envelope: Envelope
    step: LedgerStepPlan

    def now(self, ride: RideAlong | None = None) -> Committed:
        outbox = self.outbox
        with outbox.metrics.phase("ledger"):
            epoch = outbox._read_epoch_after(ride)
            result = self.step.now(ride)
        return outbox._committed(self.scope, self.rid, self.envelope, result, epoch)

    def later(self, ride: RideAlong) -> Pending:
        """Queued on ``ride`` after its next step (only when :meth:`Outbox.can_commit_later` said so)."""
        pending = self.step.later(ride)
        if pending is None:
            raise RuntimeError(f"release {self.rid}: the ledger can no longer queue its commit")
        return pending


class Outbox:
    """Ledger-backed outbox of one worker."""

    def __init__(self, ledger: ReleaseLedger, publisher: Publisher, metrics: ReleaseMetrics, *,
                 crashpoints: CrashPoints = NO_CRASHES) -> None:
        self.ledger = ledger
        self.publisher = publisher
        self.metrics = metrics
        self.crashpoints = crashpoints  # tests inject one that kills the process at a step
        # the ledger epoch check before each publication (stream_dp.release.ledger_guard; set at start)
        self.guard: Any = None

    def check_ledger(self, batch: Sequence[Committed] = ()) -> None:
        """Raise :class:`~stream_dp.state_epochs.StateLost` when Redis no longer holds the ledger this worker
        started under (no-op without a guard): from the epoch read behind the batch's last commit when it was
        (:meth:`_read_epoch_after`), else with a round trip of its own."""
        if self.guard is None:
            return
        read = [c.epoch for c in batch if c.epoch is not None and c.epoch.done]
        if read:
            self.guard.verdict(read[-1].value)
        else:
            self.guard.check()

    def epoch_reads(self) -> Reads | None:
        """The epoch's read for the worker's poll (parses to None, or raises
        :class:`~stream_dp.state_epochs.StateLost`); None without a guard."""
        return None if self.guard is None else self.guard.reads()

    def _read_epoch_after(self, ride: RideAlong | None) -> Pending | None:
        """Queue the epoch's read right behind the commit about to use ``ride`` (after its script, in its round
        trip): the publication that follows checks it instead of reading it again. Not with a lifetime cap,
        whose commit sends the ride-along ahead of its scripts (the read would come before the commit)."""
        if self.guard is None or ride is None or self.ledger.lifetime_cap is not None:
            return None
        return ride.read(self.guard.marker.reads())

    # --- step 1 ----------------------------------------------------------------------------------
    def stored(self, scope: str, rid: str) -> Committed | None:
        """The stored release of ``rid``, if any (with its first charge result)."""
        with self.metrics.phase("ledger"):
            payload = self.ledger.stored(scope, rid)
            if payload is None:
                return None
            env = Envelope.loads(payload)
            result = self._first_result(scope, rid, env)
        return Committed(scope, rid, env, result, fresh=False)

    def stored_all(self, scope: str, rids: list[str]) -> Reads:
        """The stored payloads of every release id of a window, as one read (``.now()``, or in the window's
        first batch); parses to ``{release id: payload or None}``, then :meth:`stored_from`.

        Read before the window's first release runs; a release stored later (by a worker that took the claim
        over) still wins, because reserve / settle / charge return the *first* stored record."""
        return self.ledger.stored_many(scope, rids)

    def stored_from(self, scope: str, rids: list[str], payloads: dict[str, str | None]) -> dict[str, Committed | None]:
        """The stored releases from the payloads :meth:`stored_all` read (a stored one gets its first charge result)."""
        with self.metrics.phase("ledger"):
            out: dict[str, Committed | None] = {}
            for rid in rids:
                payload = payloads.get(rid)
                if payload is None:
                    out[rid] = None
                    continue
                env = Envelope.loads(payload)
                out[rid] = Committed(scope, rid, env, self._first_result(scope, rid, env), fresh=False)
        return out

    def reserve(self, scope: str, rid: str, events: tuple) -> HoldStep:
        """The hold of the worst case ``events`` before the mechanism runs, to send now or to queue."""
        return HoldStep(self, self.ledger.step("reserve", scope, list(events), reservation_id=rid))

    def hold_of(self, pending: Pending) -> ChargeOutcome:
        """The hold a queued :meth:`reserve` got (its round trip has returned)."""
        self.crashpoints.reached("after_reserve")
        return pending.value

    def can_commit_later(self, scope: str, events: tuple) -> bool:
        """Whether a :meth:`commit` of ``events`` can be queued now (ask before the mechanism runs: its output
        must then be committed, not recomputed)."""
        return self.ledger.queueable(scope, list(events))

    def commit(self, scope: str, rid: str, envelope: Envelope, events: tuple, *, settle: bool) -> CommitStep:
        """Charge ``events`` (possibly none with ``settle=False``: a status record) and store ``envelope``
        atomically -- ``settle``: against the hold ``rid`` -- to send now or to queue."""
        with self.metrics.phase("ledger"):
            payload = envelope.dumps()
            step = (self.ledger.step("settle", scope, list(events), reservation_id=rid, release_id=rid,
                                     payload=payload) if settle else
                    self.ledger.step("charge", scope, list(events), release_id=rid, payload=payload))
        return CommitStep(self, scope, rid, envelope, step)

    def committed_of(self, scope: str, rid: str, envelope: Envelope, pending: Pending) -> Committed:
        """The release a queued :meth:`commit` committed (its round trip has returned)."""
        return self._committed(scope, rid, envelope, pending.value)

    def _committed(self, scope: str, rid: str, envelope: Envelope, result: ChargeOutcome,
                   epoch: Pending | None = None) -> Committed:
        if result.duplicate:
            stored = Envelope.loads(result.payload) if result.payload is not None else None
            if stored is None:
                raise RuntimeError(f"ledger reports release {rid} as charged but holds no stored record")
            return Committed(scope, rid, stored, result, fresh=False, epoch=epoch)
        if not result.accepted:
            raise RuntimeError(f"ledger refused to commit release {rid} ({result.reason}) after its reservation")
        self.crashpoints.reached("after_commit")
        return Committed(scope, rid, envelope, result, fresh=True, epoch=epoch)

    def _first_result(self, scope: str, rid: str, env: Envelope) -> ChargeOutcome:
        # The ledger is idempotent per release id: re-charging the stored events is a no-op that returns
        # the first result, i.e. the budget as it was right after this release was charged.
        result = self.ledger.charge(scope, rid, events_of(env.record), payload=env.dumps())
        if not result.duplicate:  # pragma: no cover - would mean the ledger lost its idempotency record
            raise RuntimeError(f"ledger charged release {rid} again instead of returning its first result")
        return result

    # --- steps 2 to 4 ----------------------------------------------------------------------------
    def publish(self, committed: Committed, *, ride: RideAlong | None = None) -> dict[str, Any]:
        """Publish the stored record (plus the ledger's budget block) and mark it published (:meth:`publish_all`
        of one release)."""
        return self.publish_all([committed], ride=ride)[0]

    def publish_all(self, batch: Sequence[Committed], *, ride: RideAlong | None = None) -> list[dict[str, Any]]:
        """Publish stored releases together: each confirmed on the replicas, all handed to the broker before
        the first acknowledgement is awaited, then each acknowledged one marked published, in order. Every
        record of ``batch`` is committed (charged and stored) before any of them is sent, so each is still
        charged before it is visible; a record the broker did not acknowledge (or one after it) stays
        stored-but-unpublished, and the first error is raised once the acknowledged ones are marked.

        ``ride``: the marks are queued to go ahead of the worker's next Redis step (the ``after_mark`` crash
        point is reached once they went); until then the releases are stored-but-unpublished, which a crash
        turns into a republication of the identical records (as a crash before the mark always did)."""
        records = [with_budget(c.envelope.record, c.result.budget_block(c.scope, self.ledger.cap)) for c in batch]
        with self.metrics.phase("ledger"):
            self.check_ledger(batch)  # published ⇒ charged in the ledger the topic was published from (not a wiped one)
            for c in batch:  # published ⇒ charge replicated
                self.ledger.confirm(c.scope, c.release_id, events=events_of(c.envelope.record))
        with self.metrics.phase("kafka"):
            acked, error = self._produce(records)
        for committed, record in zip(batch[:acked], records):
            self.crashpoints.reached("after_publish")
            with self.metrics.phase("ledger"):
                self.ledger.mark_published(committed.scope, committed.release_id, ride=ride,
                                           on_sent=lambda: self.crashpoints.reached("after_mark"))
            self._count(record, fresh=committed.fresh)
        if error is not None:
            raise error
        return records

    def _produce(self, records: list[dict[str, Any]]) -> tuple[int, Exception | None]:
        """:meth:`Publisher.publish_all`; a publisher with ``publish`` only (a test's collector) is handed the
        records one by one, each once the one before returned."""
        publish_all = getattr(self.publisher, "publish_all", None)
        if publish_all is not None:
            return publish_all(records)
        for acked, record in enumerate(records):
            try:
                self.publisher.publish(record)
            except Exception as exc:  # noqa: BLE001 - raised by publish_all once the acknowledged are marked
                return acked, exc
        return len(records), None

    def _count(self, record: dict[str, Any], *, fresh: bool) -> None:
        m = self.metrics
        rtype = record["type"]
        outcome = record["status"] if fresh else "republished"
        m.releases.labels(rtype, outcome).inc()
        if not fresh:
            return
        m.items.labels(rtype).inc(len(record["items"]))
        release_type = REGISTRY.get(rtype)
        if release_type is not None and release_type.count is not None:  # the type's own metrics
            release_type.count(m, record)
        b = record["budget"]
        m.budget(b["scope"], epsilon_spent=b["epsilon_spent"], epsilon_remaining=b["epsilon_remaining"],
                 delta_spent=b["delta_spent"], delta_remaining=b["delta_remaining"])

    def pending(self) -> list[tuple[str, str]]:
        """Every (scope, release id) stored but not yet marked published, oldest scope first."""
        with self.metrics.phase("ledger"):
            return [(scope, rid) for scope in self.ledger.scopes() for rid in self.ledger.unpublished(scope)]

    def is_unpublished(self, scope: str, rid: str) -> bool:
        with self.metrics.phase("ledger"):
            return rid in self.ledger.unpublished(scope)
