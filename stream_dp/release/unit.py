"""One claimed window's release, as a unit of work: :class:`WindowRelease`.

A unit lives for one pass of the worker (:meth:`ReleaseWorker.run_once
<stream_dp.release.worker.ReleaseWorker.run_once>`): it is made for the oldest closable window, claims it
(:meth:`WindowRelease.run`), releases every enabled type under the claim (:meth:`WindowRelease.release`)
and marks the window released (fenced), then is dropped. It owns everything that belongs to that one
window -- its watchlist and learned domain block, the alerts state read with the poll, and its plan of
Redis commands: which reads and ledger steps travel on which round trip -- so nothing of a window outlives
its pass on the long-lived worker (a window that failed midway leaves nothing behind for the next one).

For each enabled type, in order (``topk`` first): if the ledger already stores this release id, publish the
stored record (no re-roll). Otherwise reserve the worst-case cost; if the budget refuses it, commit a small
``budget_exhausted`` status record instead (the mechanism does not run); else read what the mechanism
needs, run it, and settle the actual cost together with the record (one atomic ledger step). Then publish,
mark published (:mod:`stream_dp.release.outbox`) and apply the type's after-commit step (top-k: add its
released keys to the watchlist; alerts: move the SVT state forward). When every type is published: set the
retention TTL on the window's keys and mark it released (fenced).

Steps are batched, never reordered (:class:`~stream_dp.node_batches.RideAlong`): the window's first reads,
top-k's reservation and data and the alerts' watched counts go with the claim's ``SET``
(:meth:`WindowRelease._lead_in_claim`); the alerts' commit (or an opening instance's reservation) with
top-k's settle (the alerts watch keys of earlier windows only, :meth:`WindowAlerts.set_up_ahead
<stream_dp.release.unit_alerts.WindowAlerts.set_up_ahead>`), and the
two records then go to the broker together; a release's mark-published and after-commit writes go ahead of
the next ledger step (docs/privacy.md §4). Every ledger step is one :meth:`Outbox.reserve
<stream_dp.release.outbox.Outbox.reserve>` / :meth:`Outbox.commit <stream_dp.release.outbox.Outbox.commit>`
sent ``now`` or queued ``later``: the same script and guarantees either way (charged before visible,
stored once, never re-rolled).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from stream_dp.node_batches import Pending, RideAlong, run_reads
from stream_dp.release.builders import Builder
from stream_dp.release.claim import Claim, ClaimLost
from stream_dp.release.outbox import Committed
from stream_dp.release.records import Envelope, RecordDraft, exhausted_draft, release_id
from stream_dp.release.types import REGISTRY, lead_of, stateful_of
from stream_dp.release.unit_alerts import UNREAD, WindowAlerts
from stream_dp.release.windows import Window

if TYPE_CHECKING:
    from stream_dp.release.worker import ReleaseWorker

log = logging.getLogger(__name__)



@dataclass
class LeadAhead:
    """The leading type's (top-k's) reservation and data, sent in the claim's round trip
    (:meth:`WindowRelease._lead_in_claim`)."""

    hold: Pending
    data: Pending


class WindowRelease:
    """The release of one claimed window (see the module's docstring). ``worker`` lends its collaborators
    (config, stores, outbox, metrics, random generator); the unit keeps the window's own state."""

    def __init__(self, worker: ReleaseWorker, window: Window) -> None:
        self.worker = worker
        self.cfg, self.types, self.builders, self.rng = worker.cfg, worker.types, worker.builders, worker.rng
        self.reader, self.claims, self.outbox, self.metrics = worker.reader, worker.claims, worker.outbox, worker.metrics
        self.ledger, self.watchlist, self.alerts_store = worker.ledger, worker.watchlist, worker.alerts_store
        self._client = worker.client
        self.window = window
        self.scope = worker.scope_for(window.start)
        # the type released first when it leads (top-k: :attr:`ReleaseType.leads`), and the stateful one (alerts)
        self.lead, self.stateful = lead_of(self.types), stateful_of(self.types)
        self.alerts = WindowAlerts(self)  # the window's alerts release and what of it rides on which round trip
        self._lead_ahead: LeadAhead | None = None  # the leading type's hold and data, sent with the claim

    # --- claim ------------------------------------------------------------------------------------
    def run(self, polled: tuple[Any, Any, Any] = (None, None, UNREAD)) -> bool:
        """Claim the window and release it under the claim; True when this unit released it.

        ``polled``: ``(prechecked, watchlist, alerts state field)`` as the poll read them for this window
        (:meth:`ReleaseWorker._poll_reads <stream_dp.release.worker.ReleaseWorker._poll_reads>`), or
        ``(None, None, UNREAD)``. The claim's first step is checked under the claim (the previous holder may
        have released the window since the poll); the other reads a release of the window starts with go
        right after the claim's ``SET``, in its round trip, with top-k's reservation and data and the
        alerts' watched counts (or the alerts' opening, reserved right after top-k). In the key layout the
        window's pending increments are counted first (:meth:`WindowReader.make_final
        <stream_dp.release.windows.WindowReader.make_final>`): the claim's round trip already reads counts."""
        window, scope = self.window, self.scope
        prechecked, watch, alerts_state = polled
        with self.metrics.phase("redis"):  # key layout: ingest's pending increments counted before any read
            self.reader.make_final(window, self.ledger.replication)
        rids = [release_id(window, t) for t in self.types]
        ride = RideAlong()
        first = [ride.read(r) for r in (self.reader.release_state(window), self.outbox.stored_all(scope, rids))]
        watch_read = ride.read(self.worker.watchlist_reads(window)) if watch is None else None
        state_read = ride.read(self.alerts_store.load()) if alerts_state is UNREAD else None
        self._lead_ahead = self._lead_in_claim(window, scope, ride)
        if watch is not None:
            self.alerts.watched = self.alerts.watched_reads(window, watch, ride)
            if alerts_state is not UNREAD:  # the alerts' opening (if any) reserves right after top-k
                self.alerts.state = alerts_state
                self.alerts.ahead = self.alerts.set_up_ahead(window, scope, watch, {}, ride)
        with self.metrics.phase("redis"):
            claim = self.claims.acquire_then_read(window.start, ride, prechecked)
        if claim is None:
            return False
        try:
            (done, closed_at), payloads = (p.value for p in first)
            if done:  # finish what a crash after the fenced released mark left undone (idempotent)
                with self.metrics.phase("redis"):
                    self.reader.finish_released(window, retention_seconds=self.cfg.windows.retention_seconds)
                return False
            self.release(claim, closed_at=closed_at, watch=watch if watch_read is None else watch_read.value,
                         alerts_state=alerts_state if state_read is None else state_read.value,
                         stored=self.outbox.stored_from(scope, rids, payloads))
        except ClaimLost:
            self.metrics.errors.labels("claim_lost").inc()
            log.warning("lost the claim on window %s while releasing it; another worker continues", window.label)
            return False
        finally:
            self.claims.drop(claim)
        return True

    def _lead_in_claim(self, window: Window, scope: str, ride: RideAlong) -> LeadAhead | None:
        """Queue the leading type's (top-k's) reservation and data to go right after the claim's ``SET`` (one round trip fewer
        than reserving once the claim is held). Sent whether or not the claim is won: a reservation is
        idempotent per release id, so a worker that loses the race has reserved the holder's hold, which the
        holder's own reservation returns and its settle replaces (a window already released or stored
        returns the stored release instead); the data is a read of a closed window. The mechanism still runs
        only under the claim, once the hold is accepted. None when no type leads or the lead cannot take this
        path (a known domain, a lifetime cap or a scope not indexed yet): it reserves as usual."""
        if self.lead is None:
            return None
        lead = self.builders[self.lead.name]
        data = lead.read(self.reader, window, [])  # a leading type's data and skip reason ignore the watchlist
        if data.batch is None:
            return None
        hold = self.outbox.reserve(scope, release_id(window, self.lead.name), lead.measurement.privacy_map()).later(ride)
        return None if hold is None else LeadAhead(hold, ride.read(data.batch))

    # --- release under the claim -------------------------------------------------------------------
    def release(self, claim: Claim, *, closed_at: float | None, watch: list[str] | None, alerts_state: Any,
                stored: dict[str, Committed | None]) -> None:
        """Release every enabled type of the window under ``claim``, then mark it released (fenced).

        Read under the claim by :meth:`run`: ``closed_at``, when ingest closed the window (else when this
        worker first saw it closable), for the latency metric; ``watch``, its watchlist (None: learned from
        earlier releases, read here); ``alerts_state``, the stored alerts field (:meth:`AlertsStore.load`);
        ``stored``, the stored releases of the window (:meth:`Outbox.stored_all`). Nothing else changes them
        while the claim is held: windows are released in order, each under its own claim (a release stored
        meanwhile by a worker that took the claim over still wins: every commit returns the *first* stored
        record).

        Round trips (:class:`~stream_dp.node_batches.RideAlong`): a release's mark-published and its type's
        after-commit writes are queued and go ahead of the next release's first Redis step (still after the
        acknowledgement, still before anything later); the alerts' watched counts are read in the round trip
        of top-k's reservation. Whatever is still queued is sent before the window is marked released."""
        watch = self._watchlist_under_claim(watch)
        self.alerts.state = alerts_state
        ride = RideAlong()
        self._plan_rides(watch, stored, ride)
        try:
            self._release_types(claim, watch, stored, ride)
        except Exception:
            self._send_queued_after_error(ride)
            raise
        finally:
            self.alerts.ahead = self._lead_ahead = None
        with self.metrics.phase("ledger"):
            ride.flush(self._client)  # the last mark published, before the window is marked released
        self.alerts.watched = None
        self._mark_released(claim, closed_at)

    def _watchlist_under_claim(self, watch: list[str] | None) -> list[str]:
        """The window's watchlist: as read with the claim, else now; a learned one (with its record block,
        ``releases.alerts.domain_from_released``) is read here, under the claim."""
        if watch is None:
            with self.metrics.phase("redis"):
                watch = run_reads(self._client, self.worker.watchlist_reads(self.window))[0]
        self.alerts.watch_block = None
        if watch is None:
            with self.metrics.phase("redis"):
                watch, self.alerts.watch_block = self.watchlist.learned_for(self.window)
        return watch

    def _plan_rides(self, watch: list[str], stored: dict[str, Committed | None], ride: RideAlong) -> None:
        """What of the window rides on which round trip, now that its stored releases are known: the alerts'
        watched counts with the next one (unless they came with the claim); nothing ahead for a type whose
        release is stored (it is published as stored)."""
        window, scope = self.window, self.scope
        lead_stored = self.lead is not None and stored.get(release_id(window, self.lead.name)) is not None
        alerts_stored = self.stateful is not None and stored.get(release_id(window, self.stateful.name)) is not None
        if alerts_stored:
            self.alerts.watched = None
        elif self.alerts.watched is None:
            self.alerts.watched = self.alerts.watched_reads(window, watch, ride)
        if lead_stored:
            self._lead_ahead = None
        if self.alerts.ahead is None:
            self.alerts.ahead = self.alerts.set_up_ahead(window, scope, watch, stored, ride)
        elif lead_stored or alerts_stored:
            self.alerts.ahead = None  # set up with the claim, before the stored releases were read (a queued hold is idempotent)

    def _release_types(self, claim: Claim, watch: list[str], stored: dict[str, Committed | None],
                       ride: RideAlong) -> None:
        """Each enabled type in order: its committed release published, then its after-commit step; the
        alerts committed in top-k's round trip are published with it."""
        window = self.window
        published: set[str] = set()
        for rtype in self.types:
            if rtype in published:
                continue
            self.claims.renew_if_due(claim)
            batch = [(rtype, self.release_type(rtype, watch, stored=stored[release_id(window, rtype)], ride=ride))]
            if self.alerts.committed_with(rtype):  # committed in top-k's round trip: published with it
                assert self.stateful is not None
                batch.append((self.stateful.name, self.release_type(self.stateful.name, watch, stored=None, ride=ride)))
            self.outbox.publish_all([committed for _, committed in batch], ride=ride)
            for t, committed in batch:
                self._after_commit(t, window, committed, ride)
                published.add(t)

    def _mark_released(self, claim: Claim, closed_at: float | None) -> None:
        """The window marked released, fenced by ``claim`` (:class:`ClaimLost` when it was lost meanwhile)."""
        window = self.window
        self.outbox.crashpoints.reached("before_release_window")
        with self.metrics.phase("redis"):
            ok = self.reader.mark_released(window, claim_key=claim.key, token=claim.token,
                                           retention_seconds=self.cfg.windows.retention_seconds)
        if not ok:
            raise ClaimLost(f"claim on window {window.label} lost before marking it released")
        self.worker.observe_released(window, closed_at)

    # --- one release -----------------------------------------------------------------------------
    def release_type(self, rtype: str, watch: list[str], *, stored: Committed | None | object = UNREAD,
                     ride: RideAlong | None = None) -> Committed:
        """The committed (stored) release of ``rtype`` for the window: the stored one, or a new one.
        ``stored``: the stored release (None: none) when the caller read it already, else it is read here.
        ``ride``: writes queued by the previous release go ahead of this one's first Redis step."""
        window, scope = self.window, self.scope
        rid = release_id(window, rtype)
        ride = ride if ride is not None else RideAlong()
        existing = self.outbox.stored(scope, rid) if stored is UNREAD else stored
        if isinstance(existing, Committed):
            return existing
        if REGISTRY[rtype].stateful:
            return self.alerts.release(window, scope, rid, watch, ride)
        return self._release_batch(window, self.builders[rtype], scope, rid, watch, ride)

    def _release_batch(self, window: Window, builder: Builder, scope: str, rid: str, watch: list[str],
                       ride: RideAlong) -> Committed:
        skip = builder.skip_reason(watch)  # decided from public facts only (config, watchlist)
        if skip is not None:
            draft = RecordDraft(window, builder.type, builder.mechanism, builder.parameters(), info={"skipped": skip})
            return self.outbox.commit(scope, rid, Envelope(draft.to_record()), (), settle=False).now(ride)
        # the mechanism's data, when one command reads it, comes back in the reservation's round trip (top-k's:
        # in the claim's, :meth:`_lead_in_claim`): reading a closed window reveals nothing, and the mechanism
        # still runs only once the hold is accepted
        ahead = None
        if self.lead is not None and builder.type == self.lead.name:
            ahead, self._lead_ahead = self._lead_ahead, None
        batched: Pending | None
        read = builder.read(self.reader, window, watch)  # nothing read yet
        if ahead is not None and ahead.hold.done:
            batched, hold = ahead.data, self.outbox.hold_of(ahead.hold)
        else:
            batched = read.later(ride)
            hold = self.outbox.reserve(scope, rid, builder.measurement.privacy_map()).now(ride)
        if hold.duplicate and hold.payload is not None:  # another worker settled it meanwhile
            return self.outbox.stored(scope, rid)  # type: ignore[return-value]
        if not hold.accepted:
            draft = exhausted_draft(window, builder.type, builder.mechanism, builder.parameters(), hold.reason)
            self.alerts.answer_ahead(builder.type, scope, ride)
            return self.outbox.commit(scope, rid, Envelope(draft.to_record()), (), settle=False).now(ride)
        if batched is not None and batched.done:
            data = batched.value
        else:
            with self.metrics.phase("redis"):
                data = read.now()
        with self.metrics.phase("mechanism"):
            draft = builder.run(window, data, self.rng)
        del data, batched, read
        self.alerts.answer_ahead(builder.type, scope, ride)
        return self.outbox.commit(scope, rid, Envelope(draft.to_record()), draft.events, settle=True).now(ride)

    def _after_commit(self, rtype: str, window: Window, committed: Committed, ride: RideAlong | None = None) -> None:
        """Idempotent follow-ups driven by the *stored* record (so a crash before them is repaired). With
        ``ride``, top-k's watchlist write is queued for the next round trip (the alerts of this window
        read the watchlist of *earlier* windows; the next window's is read after this one is marked)."""
        record, release_type = committed.envelope.record, REGISTRY[rtype]
        if release_type.feeds_watchlist and record["status"] == "released":
            with self.metrics.phase("redis"):
                self.watchlist.add_released(window, [item["key"] for item in record["items"]], ride=ride)
        elif release_type.stateful and committed.envelope.state is not None:
            ref = committed.envelope.state.get("alerts_state_ref")
            if ref is None:  # an envelope of an older version (its state is not trusted): close the instance
                ref = f"{window.start}:legacy"
            info = record.get("info") or {}
            with self.metrics.phase("redis"):
                self.alerts_store.apply(str(ref), window=window.start, scope=committed.scope,
                                        instance=int(info.get("instance") or 0), opened=bool(info.get("opened")),
                                        ride=ride)
                # replicated before the window is marked released (failover: docs/scaling.md)
                self.alerts_store.confirm(self.ledger.replication, window.start)

    def _send_queued_after_error(self, ride: RideAlong) -> None:
        """A step failed (claim lost, broker down, ...): still send what the ride-along holds -- the marks of
        releases the broker acknowledged and their after-commit writes, all idempotent -- so that the next
        holder of the window does not publish them again. Best effort: a Redis that is down keeps them
        unsent, and then the stored records are published again (identical bytes), as after a crash."""
        ride.reads = []
        try:
            ride.flush(self._client)
        except (redis.RedisError, OSError) as exc:
            log.debug("queued writes not sent after a failed release step (%s)", type(exc).__name__)
