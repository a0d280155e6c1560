"""The release worker: close windows, run the configured releases, charge, publish -- once and only once.

One pass (:meth:`ReleaseWorker.run_once`):

1. find the closable windows on the public schedule (every window from the recorded start on, empty or not,
   with ``end <= watermarks.global``, not yet released), oldest first (:mod:`stream_dp.schedule`);
2. claim the **oldest** one (lock with fencing token and expiry, :mod:`stream_dp.release.claim`). Windows are
   released in order because the online alerts state moves window by window; several workers give
   failover, not parallel windows;
3. for each enabled type, in order (``topk`` first): if the ledger already stores this release id, publish
   the stored record (no re-roll). Otherwise reserve the worst-case cost; if the budget refuses it, commit a
   small ``budget_exhausted`` status record instead (the mechanism does not run); else read what the
   mechanism needs, run it, and settle the actual cost together with the record (one atomic ledger step).
   Then publish, mark published (:mod:`stream_dp.release.outbox`) and apply the type's after-commit step
   (top-k: add its released keys to the watchlist; alerts: move the SVT state forward);
4. when every type is published: set the retention TTL on the window's keys and mark it released (fenced).

Steps are batched, never reordered (:class:`~stream_dp.node_batches.RideAlong`): the claim's first step
(``EXISTS`` + fence ``INCR``) and the watchlist of the window guessed next go with the poll; the window's
first reads, top-k's reservation and data and the alerts' watched counts with the claim's ``SET``
(:meth:`ReleaseWorker._topk_in_claim`); the alerts' commit (or an opening instance's reservation) with
top-k's settle (the alerts watch keys of earlier windows only, :meth:`ReleaseWorker._alerts_ahead`), and
the two records then go to the broker together; a release's mark-published and after-commit writes go
ahead of the next ledger step (docs/privacy.md §4).

:meth:`ReleaseWorker.run` loops with bounded waits until ``stop`` is set; after a pass with nothing due, the
next pass's first round trip waits in Redis for ingest's close notice (:mod:`stream_dp.release.wakeup`), at
most ``release.poll_interval_seconds``, so a window is claimed right after the watermark passes its end. On
start (:meth:`ReleaseWorker.start`) it loads its Lua scripts and publishes every stored-but-unpublished
release first (:meth:`ReleaseWorker.recover`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import redis
from kafka.errors import KafkaError

from stream_dp.accounting.budget import check_budget_covers
from stream_dp.accounting.events import DpEvent
from stream_dp.backoff import Backoff
from stream_dp.config import Config
from stream_dp.keys import Keys
from stream_dp.node_batches import Pending, Reads, RideAlong, joined, load_scripts, run_reads
from stream_dp.release.alerts import AlertsRun, AlertsStore, InstanceState, Watchlist
from stream_dp.release.builders import BUILDERS, Builder, enabled_types, release_measurements
from stream_dp.release.claim import Claim, ClaimLost, WindowClaims
from stream_dp.release.ledger_port import ChargeOutcome, ReleaseLedger
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Committed, Outbox
from stream_dp.release.records import Envelope, RecordDraft, exhausted_draft, parse_release_id, release_id
from stream_dp.release.released_domain import DomainRule, ReleasedDomainReader, domain_block
from stream_dp.release.wakeup import SOCKET_TIMEOUT_SHARE, WindowCloses
from stream_dp.release.windows import Window, WindowReader
from stream_dp.refusals import refusal_of
from stream_dp.replication import NotReplicated
from stream_dp.rng import make_rng
from stream_dp.schedule import establish as establish_schedule

log = logging.getLogger(__name__)

UNREAD = object()  # release_type(stored=...): the caller did not read the stored release


@dataclass
class AlertsAhead:
    """A window's alerts release travelling in top-k's round trips (:meth:`ReleaseWorker._alerts_ahead`): the
    run (no noise drawn yet), the opening's hold queued with top-k's reservation, then the commit queued
    with top-k's settle and the envelope it stores."""

    run: AlertsRun
    rid: str
    hold: Pending | None
    commit: Pending | None = None
    envelope: Envelope | None = None


@dataclass
class TopkAhead:
    """Top-k's reservation and data, sent in the claim's round trip (:meth:`ReleaseWorker._topk_in_claim`)."""

    hold: Pending
    data: Pending


def default_scope_for(cfg: Config) -> Callable[[float], str]:
    from stream_dp.accounting.ledger import scope_for

    return lambda t: scope_for(t, cfg.budget.period_seconds)


class ReleaseWorker:
    """Releases closed windows. Dependencies are injected (Redis client, ledger, publisher, metrics)."""

    def __init__(self, cfg: Config, client: redis.Redis, ledger: ReleaseLedger, outbox: Outbox, metrics: ReleaseMetrics, *,
                 worker_id: str, claim_ttl_seconds: float | None = None, poll_seconds: float | None = None,
                 rng: Any = None, scope_for: Callable[[float], str] | None = None,
                 after_start: Callable[[], object] | None = None,
                 before_start: Callable[[], object] | None = None) -> None:
        self.cfg = cfg
        self.after_start = after_start  # called once start() has finished (the process freezes its start-up heap)
        # start steps of the process that need Redis and the broker (the ledger's check against the releases
        # topic, stream_dp.release.service): run first by start(), so the loop retries them until both answer
        self.before_start = before_start
        self.keys = Keys(cfg.redis.key_prefix, cfg.windows.shards)
        self.reader = WindowReader(client, keys=self.keys, size_seconds=cfg.windows.size_seconds)
        self._client = client
        self.claims = WindowClaims(client, keys=self.keys, worker_id=worker_id, ttl_seconds=claim_ttl_seconds or cfg.release.claim_ttl_seconds)
        self.ledger = ledger
        self.outbox = outbox
        self.metrics = metrics
        self.watchlist = Watchlist(client, keys=self.keys, config=cfg.releases.alerts)
        self.alerts_store = AlertsStore(client, keys=self.keys)
        self.types = enabled_types(cfg)
        self.builders: dict[str, Builder] = {t: BUILDERS[t](cfg) for t in self.types if t in BUILDERS}
        self.check_budget_covers_each_release()
        self.poll_seconds = poll_seconds or cfg.release.poll_interval_seconds
        # an idle worker's next pass waits in Redis for ingest's close notice (stream_dp.release.wakeup)
        self.closes = WindowCloses(client, self.keys,
                                   max_block_seconds=SOCKET_TIMEOUT_SHARE * cfg.redis.socket_timeout_seconds)
        self.rng = make_rng(rng)
        self.scope_for = scope_for or default_scope_for(cfg)
        # the types that learn their domain from earlier releases read them through one reader (the ledger's outbox)
        self.released_domains = ReleasedDomainReader(client, self.keys, ledger, self.scope_for, cfg.windows.size_seconds,
                                                     lambda: self.reader.schedule.start)
        for builder in self.builders.values():
            public = getattr(builder, "public_domain", None)  # the types that take a domain
            if public is not None:
                public.reader = self.released_domains
        watch_rule = DomainRule.of(cfg, "alerts") if "alerts" in self.types or "watch_topk" in self.types else None
        if watch_rule is not None:
            self.watchlist.learn = lambda window, static: domain_block(
                static, self.released_domains.domain_for(window, watch_rule))
        self._watch_block: dict[str, Any] | None = None  # a learned watchlist's record block (the window's)
        self.recovered = False
        self._first_seen: dict[int, float] = {}
        self._alerts_state: Any = UNREAD  # the alerts state field as read with the window's first batch
        self._watched: Pending | None = None  # the alerts' watched counts, queued on the window's ride-along
        self._ahead: AlertsAhead | None = None  # the window's alerts, riding on top-k's round trips
        self._topk_ahead: TopkAhead | None = None  # top-k's hold and data, sent with the claim

    def worst_case_events(self) -> dict[str, tuple[DpEvent, ...]]:
        """Per enabled release type, the DP events of its most expensive single release."""
        return {t: m.privacy_map() for t, m in release_measurements(self.cfg).items()}

    def check_budget_covers_each_release(self) -> None:
        """Refuse to start (ConfigError naming the cap setting) when a single release of any enabled type
        could never fit an empty budget period (or the lifetime cap): every window would be refused."""
        caps = [cap for cap in (self.ledger.cap, self.ledger.lifetime_cap) if cap is not None]
        for events in self.worst_case_events().values():
            for cap in caps:
                check_budget_covers(cap, events)

    # --- one pass --------------------------------------------------------------------------------
    def start(self) -> None:
        """What a worker does once, before its first window (idempotent; :meth:`run_once` calls it first):
        the public schedule (recorded by the first process of the deployment, checked against the config),
        the Lua scripts loaded into Redis (so the first window's steps are not refused with ``NOSCRIPT``
        and sent again), then every stored-but-unpublished release published (:meth:`recover`); last, once,
        ``after_start`` (the release process passes :func:`~stream_dp.processes.freeze_start_up_heap`)."""
        if self.recovered:
            return
        if self.before_start is not None:
            self.before_start()
        self.closes.start()  # before the first pass: a window closed from now on ends the first wait
        self.reader.schedule = establish_schedule(self._client, self.keys, self.cfg.windows)
        load_scripts(self._client, [*self.reader.scripts, *self.claims.scripts, *self.alerts_store.scripts,
                                    *self.ledger.scripts])
        self.recover()
        self.recovered = True
        if self.after_start is not None:
            self.after_start()

    def run_once(self, *, wait_seconds: float = 0.0) -> Window | None:
        """Start (first call), then release the oldest closable window if one can be claimed.

        ``wait_seconds`` > 0: the pass's first round trip starts with a blocking read of ingest's close
        notices (:mod:`stream_dp.release.wakeup`): it returns when a window closes or after that long, and
        the poll's reads run right behind it. That wait (and the poll riding on it) is not phase time."""
        self.start()
        guess = self.reader.next_guess()
        guessed = None if guess is None else self.reader.window(guess)
        if wait_seconds > 0 and guessed is not None:
            self._index_ahead(guessed)
        polled = Pending()
        also = None if guessed is None else self._poll_reads(guessed)
        # the ledger epoch (stream_dp.release.ledger_guard) is read in every poll, after its wait: a pass on a
        # Redis that lost the ledger stops (StateLost) before it claims or charges anything
        epoch = self.outbox.epoch_reads()
        if wait_seconds > 0:
            wait_for_close = self.closes.wait_reads(wait_seconds)
            pending = self.reader.closable(also=also, also_result=polled,
                                           first=wait_for_close if epoch is None else joined(wait_for_close, epoch))
        elif epoch is None:  # no guard (tests, the neighbouring harness' broken readers): the call as it always was
            with self.metrics.phase("redis"):
                pending = self.reader.closable(also=also, also_result=polled)
        else:
            with self.metrics.phase("redis"):
                pending = self.reader.closable(also=also, also_result=polled, first=epoch)
        self.metrics.windows_pending.set(len(pending))
        self._watch_block = None
        now = time.time()
        for w in pending:
            self._first_seen.setdefault(w.start, now)
        if not pending:
            return None
        window = pending[0]
        prechecked, watch, alerts_state = polled.value if polled.done and window.start == guess else (None, None, UNREAD)
        # checked under the claim: the previous holder may have released it since `closable()` ran
        # ... with the other reads a release of the window starts with, sent right after the claim's SET
        scope, rids = self.scope_for(window.start), [release_id(window, t) for t in self.types]
        ride = RideAlong()
        first = [ride.read(r) for r in (self.reader.release_state(window), self.outbox.stored_all(scope, rids))]
        watch_read = ride.read(self._watchlist_reads(window)) if watch is None else None
        state_read = ride.read(self.alerts_store.load()) if alerts_state is UNREAD else None
        self._forget_ahead()  # nothing of an earlier pass that failed midway
        self._topk_ahead = self._topk_in_claim(window, scope, ride)
        if watch is not None:
            self._watched = self._watched_reads(window, watch, ride)
            if alerts_state is not UNREAD:  # the alerts' opening (if any) reserves right after top-k
                self._alerts_state = alerts_state
                self._ahead = self._alerts_ahead(window, scope, watch, {}, ride)
        with self.metrics.phase("redis"):
            claim = self.claims.acquire_then_read(window.start, ride, prechecked)
        if claim is None:
            self._forget_ahead()
            return None
        try:
            (done, closed_at), payloads = (p.value for p in first)
            if watch_read is not None:
                watch = watch_read.value
            if state_read is not None:
                alerts_state = state_read.value
            with self.metrics.phase("redis"):
                if done:  # finish what a crash after the fenced released mark left undone (idempotent)
                    self.reader.finish_released(window, retention_seconds=self.cfg.windows.retention_seconds)
            if done:
                return None
            self.release_window(window, claim, closed_at=closed_at, watch=watch, alerts_state=alerts_state,
                                stored=self.outbox.stored_from(scope, rids, payloads))
        except ClaimLost:
            self.metrics.errors.labels("claim_lost").inc()
            log.warning("lost the claim on window %s while releasing it; another worker continues", window.label)
            return None
        finally:
            self._forget_ahead()
            self.claims.drop(claim)
        return window

    def _poll_reads(self, guess: Window) -> Reads:
        """What the poll reads for the window it guesses next: the claim's first step (``EXISTS`` + fence
        ``INCR``), its watchlist (keys first released before it) and the alerts' state; parses to
        ``(prechecked, watchlist, alerts state field)``.

        The guess is the first window after the cursor the last poll saw. When it is right, every earlier
        window was released -- its top-k keys added to the watchlist, its alerts state applied -- before
        that poll, and only a release of the guessed window itself changes them after: that part of the
        watchlist never (``ZADD NX``), the state once the window's alerts are stored, which the claim's
        round trip then reads (a stored release is published as stored, never run again)."""
        state = (self.alerts_store.load() if "alerts" in self.types
                 else Reads([], lambda replies: UNREAD))
        return joined(self.claims.precheck_reads(guess.start), self._watchlist_reads(guess), state)

    def _index_ahead(self, window: Window) -> None:
        """While idle (before the pass waits for a close): put the budget scope of the window expected next in
        the ledger's scope index (:meth:`~stream_dp.accounting.ledger.Ledger.index_ahead`, once per scope),
        so that the first window of each budget period reserves and commits in the same round trips as the
        others instead of adding its scope first. Only ledger bookkeeping: nothing a subscriber sees depends on
        it. Best effort: a scope not confirmed on the replicas is added by the release's own first step."""
        scope = self.scope_for(window.start)
        try:
            self.ledger.index_ahead(scope)
        except NotReplicated as exc:
            log.debug("budget scope %s not indexed ahead: %s", scope, exc)

    def _forget_ahead(self) -> None:
        """Drop what was set up to ride on a window's round trips (the window is done, lost or failed)."""
        self._topk_ahead = self._watched = self._ahead = None
        self._alerts_state = UNREAD

    def _topk_in_claim(self, window: Window, scope: str, ride: RideAlong) -> TopkAhead | None:
        """Queue top-k's reservation and data to go right after the claim's ``SET`` (one round trip fewer
        than reserving once the claim is held). Sent whether or not the claim is won: a reservation is
        idempotent per release id, so a worker that loses the race has reserved the holder's hold, which the
        holder's own reservation returns and its settle replaces (a window already released or stored
        returns the stored release instead); the data is a read of a closed window. The mechanism still runs
        only under the claim, once the hold is accepted. None when top-k cannot take this path (not first,
        a known domain, a lifetime cap or a scope not indexed yet): it reserves as usual."""
        topk = self.builders.get("topk")
        if topk is None or self.types[0] != "topk":
            return None
        reads = topk.read_in_batch(self.reader, window, [])  # top-k's data and skip reason ignore the watchlist
        if reads is None:
            return None
        hold = self.outbox.reserve(scope, release_id(window, "topk"), topk.measurement.privacy_map()).later(ride)
        return None if hold is None else TopkAhead(hold, ride.read(reads))

    def _watched_reads(self, window: Window, watch: list[str], ride: RideAlong) -> Pending | None:
        """Queue the alerts' watched counts (a public key list, read-only) on ``ride``."""
        if "alerts" not in self.types:
            return None
        reads = self.reader.counts_of_reads(window, watch)
        return ride.read(reads) if reads is not None else None

    def recover(self) -> int:
        """Publish every stored-but-unpublished release first (on start). Each under its window's claim: a
        window claimed by a live worker is skipped (that worker publishes it; if it dies, its claim expires
        and the window's retry finds the release stored). Returns how many were published."""
        n = 0
        for scope, rid in self.outbox.pending():
            window, _ = parse_release_id(rid)
            with self.metrics.phase("redis"):
                claim = self.claims.acquire(window.start)
            if claim is None:
                continue
            try:
                if self.outbox.is_unpublished(scope, rid):
                    committed = self.outbox.stored(scope, rid)
                    if committed is not None:
                        self.outbox.publish(committed)
                        n += 1
            finally:
                self.claims.drop(claim)
        if n:
            log.info("published %d stored release(s) left unpublished by an earlier run", n)
        return n

    def _watchlist_reads(self, window: Window) -> Reads:
        if "alerts" in self.types or "watch_topk" in self.types:
            return self.watchlist.for_window(window)
        return Reads([], lambda replies: [])

    def release_window(self, window: Window, claim: Claim, *, closed_at: float | None = None,
                       watch: list[str] | None = None, alerts_state: Any = UNREAD,
                       stored: dict[str, Committed | None] | None = None) -> None:
        """Release every enabled type of ``window`` under ``claim``, then mark it released (fenced).

        Read under the claim by the caller (else here): ``closed_at``, when ingest closed the window (else
        when this worker first saw it closable), for the latency metric; ``watch``, its watchlist;
        ``alerts_state``, the stored alerts field (:meth:`AlertsStore.load`); ``stored``, the stored
        releases of the window (:meth:`Outbox.stored_all`). Nothing else changes them while the claim is
        held: windows are released in order, each under its own claim (a release stored meanwhile by a
        worker that took the claim over still wins: every commit returns the *first* stored record).

        Round trips (:class:`~stream_dp.node_batches.RideAlong`): a release's mark-published and its type's
        after-commit writes are queued and go ahead of the next release's first Redis step (still after the
        acknowledgement, still before anything later); the alerts' watched counts are read in the round trip
        of top-k's reservation. Whatever is still queued is sent before the window is marked released."""
        scope = self.scope_for(window.start)
        if watch is None:
            with self.metrics.phase("redis"):
                watch = run_reads(self._client, self._watchlist_reads(window))[0]
        self._watch_block = None
        if watch is None:  # learned from earlier releases (releases.alerts.domain_from_released): read under the claim
            with self.metrics.phase("redis"):
                watch, self._watch_block = self.watchlist.learned_for(window)
        self._alerts_state = alerts_state
        if stored is None:
            rids = [release_id(window, t) for t in self.types]
            stored = self.outbox.stored_from(scope, rids, self.outbox.stored_all(scope, rids).now())
        ride = RideAlong()
        topk_stored = stored.get(release_id(window, "topk")) is not None
        alerts_stored = stored.get(release_id(window, "alerts")) is not None
        # the alerts' watched counts go with the window's next round trip (unless they came with the claim)
        if alerts_stored:
            self._watched = None
        elif self._watched is None:
            self._watched = self._watched_reads(window, watch, ride)
        if topk_stored:
            self._topk_ahead = None
        if self._ahead is None:
            self._ahead = self._alerts_ahead(window, scope, watch, stored, ride)
        elif topk_stored or alerts_stored:
            self._ahead = None  # set up with the claim, before the stored releases were read (a queued hold is idempotent)
        try:
            published: set[str] = set()
            for rtype in self.types:
                if rtype in published:
                    continue
                self.claims.renew_if_due(claim)
                batch = [(rtype, self.release_type(window, rtype, scope, watch,
                                                   stored=stored[release_id(window, rtype)], ride=ride))]
                if self._alerts_committed_with(rtype):  # committed in top-k's round trip: published with it
                    batch.append(("alerts", self.release_type(window, "alerts", scope, watch, stored=None, ride=ride)))
                self.outbox.publish_all([committed for _, committed in batch], ride=ride)
                for t, committed in batch:
                    self._after_commit(t, window, committed, ride)
                    published.add(t)
        except Exception:
            self._send_queued_after_error(ride)
            raise
        finally:
            self._ahead = self._topk_ahead = None
        with self.metrics.phase("ledger"):
            ride.flush(self._client)  # the last mark published, before the window is marked released
        self._watched = None
        self.outbox.crashpoints.reached("before_release_window")
        with self.metrics.phase("redis"):
            ok = self.reader.mark_released(window, claim_key=claim.key, token=claim.token,
                                           retention_seconds=self.cfg.windows.retention_seconds)
        if not ok:
            raise ClaimLost(f"claim on window {window.label} lost before marking it released")
        self.metrics.windows_released.inc()
        first_seen = self._first_seen.pop(window.start, None)
        closed = closed_at if closed_at is not None else (first_seen if first_seen is not None else time.time())
        self.metrics.latency.observe(max(0.0, time.time() - closed))
        self.metrics.windows_pending.dec()
        log.info("window %s released (%s)", window.label, ", ".join(self.types))

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

    # --- one release -----------------------------------------------------------------------------
    def release_type(self, window: Window, rtype: str, scope: str, watch: list[str], *,
                     stored: Committed | None | object = UNREAD, ride: RideAlong | None = None) -> Committed:
        """The committed (stored) release of ``rtype`` for ``window``: the stored one, or a new one.
        ``stored``: the stored release (None: none) when the caller read it already, else it is read here.
        ``ride``: writes queued by the previous release go ahead of this one's first Redis step."""
        rid = release_id(window, rtype)
        ride = ride if ride is not None else RideAlong()
        existing = self.outbox.stored(scope, rid) if stored is UNREAD else stored
        if isinstance(existing, Committed):
            return existing
        if rtype == "alerts":
            return self._release_alerts(window, scope, rid, watch, ride)
        return self._release_batch(window, self.builders[rtype], scope, rid, watch, ride)

    def _release_batch(self, window: Window, builder: Builder, scope: str, rid: str, watch: list[str],
                       ride: RideAlong) -> Committed:
        skip = builder.skip_reason(watch)  # decided from public facts only (config, watchlist)
        if skip is not None:
            draft = RecordDraft(window, builder.type, builder.mechanism, builder.parameters(), info={"skipped": skip})
            return self.outbox.commit(scope, rid, Envelope(draft.to_record()), (), settle=False).now(ride)
        # the mechanism's data, when one command reads it, comes back in the reservation's round trip (top-k's:
        # in the claim's, :meth:`_topk_in_claim`): reading a closed window reveals nothing, and the mechanism
        # still runs only once the hold is accepted
        ahead = None
        if builder.type == "topk":
            ahead, self._topk_ahead = self._topk_ahead, None
        batched: Pending | None
        if ahead is not None and ahead.hold.done:
            batched, hold = ahead.data, self.outbox.hold_of(ahead.hold)
        else:
            reads = builder.read_in_batch(self.reader, window, watch)
            batched = ride.read(reads) if reads is not None else None
            hold = self.outbox.reserve(scope, rid, builder.measurement.privacy_map()).now(ride)
        if hold.duplicate and hold.payload is not None:  # another worker settled it meanwhile
            return self.outbox.stored(scope, rid)  # type: ignore[return-value]
        if not hold.accepted:
            draft = exhausted_draft(window, builder.type, builder.mechanism, builder.parameters(), hold.reason)
            self._answer_alerts_ahead(builder.type, scope, ride)
            return self.outbox.commit(scope, rid, Envelope(draft.to_record()), (), settle=False).now(ride)
        if batched is not None and batched.done:
            data = batched.value
        else:
            with self.metrics.phase("redis"):
                data = builder.read(self.reader, window, watch)
        with self.metrics.phase("mechanism"):
            draft = builder.run(window, data, self.rng)
        del data, batched
        self._answer_alerts_ahead(builder.type, scope, ride)
        return self.outbox.commit(scope, rid, Envelope(draft.to_record()), draft.events, settle=True).now(ride)

    def _alerts_ahead(self, window: Window, scope: str, watch: list[str], stored: dict[str, Committed | None],
                      ride: RideAlong) -> AlertsAhead | None:
        """Set the window's alerts up to ride on top-k's round trips, when both are released fresh here.

        The alerts of a window watch keys of *earlier* windows, so they do not wait for this window's top-k:
        the mechanism runs right after top-k's -- only once its hold (if it opens an instance) was accepted,
        and in the same order of noise draws as before -- and its commit (the stored record, charged) goes
        after top-k's settle; both records are then handed to the broker together. An opening's reservation
        is queued to go with top-k's next round trip: its reservation when top-k reserves on its own, else
        (top-k reserved with the claim) its settle, and then the alerts commit in a round trip of their own
        right after top-k's publication (:meth:`_release_alerts`). Each step keeps its guarantees (charged
        before visible, stored once, never re-rolled); whenever a step cannot be queued (a lifetime cap, a
        scope not indexed yet, top-k not computed here) the alerts take their usual path."""
        rid = release_id(window, "alerts")
        topk = self.builders.get("topk")
        if (self._watched is None or topk is None or "alerts" not in self.types or self._alerts_state is UNREAD
                or stored.get(rid) is not None or stored.get(release_id(window, "topk")) is not None
                or topk.skip_reason(watch) is not None):
            return None
        run = AlertsRun(self.cfg.releases.alerts, window, scope, self.alerts_store.from_stored(self._alerts_state),
                        watch, rng=self.rng, domain=self._watch_block)
        hold = None
        if run.open_events:
            hold = self.outbox.reserve(scope, rid, run.open_events).later(ride)
            if hold is None:
                return None
        return AlertsAhead(run, rid, hold)

    def _answer_alerts_ahead(self, rtype: str, scope: str, ride: RideAlong) -> None:
        """Right before top-k's commit: answer the window's alerts and queue their commit after it."""
        ahead = self._ahead
        if rtype != "topk" or ahead is None:
            return
        watched = self._watched
        if ahead.hold is not None and not ahead.hold.done:
            return  # the opening's hold goes with top-k's commit; the alerts follow on their own (_release_alerts)
        ready = watched is not None and watched.done
        if not ready or not self.outbox.can_commit_later(scope, ahead.run.open_events):
            self._ahead = None  # the usual path (a queued hold is idempotent: it is reserved once)
            return
        run = ahead.run
        settle = bool(run.open_events)
        if ahead.hold is not None:
            hold = self.outbox.hold_of(ahead.hold)
            if hold.duplicate and hold.payload is not None:  # another worker settled it: the usual path reads it
                self._ahead = None
                return
            if not hold.accepted:
                draft, state = run.exhausted(hold.reason)
                ahead.envelope = self._alerts_envelope(draft, state, ride)
                ahead.commit = self.outbox.commit(scope, ahead.rid, ahead.envelope, (), settle=False).later(ride)
                return
        self._watched = None
        with self.metrics.phase("mechanism"):
            draft, state = run.answer(watched.value)  # type: ignore[union-attr]
        ahead.envelope = self._alerts_envelope(draft, state, ride)
        ahead.commit = self.outbox.commit(scope, ahead.rid, ahead.envelope, draft.events if settle else (),
                                          settle=settle).later(ride)

    def _alerts_committed_with(self, rtype: str) -> bool:
        """Whether the window's alerts were committed in the round trip of ``rtype``'s commit (top-k's), so
        that both records are handed to the broker together (:meth:`Outbox.publish_all`: each was charged
        and stored before either is sent). Decided from which steps were queued, never from the data."""
        ahead = self._ahead
        return (rtype == "topk" and ahead is not None and ahead.envelope is not None and ahead.commit is not None
                and ahead.commit.done)

    def _release_alerts(self, window: Window, scope: str, rid: str, watch: list[str], ride: RideAlong) -> Committed:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.commit is not None and ahead.envelope is not None:
            self._alerts_state = UNREAD
            if not ahead.commit.done:  # top-k took another path: send what is queued now
                with self.metrics.phase("ledger"):
                    ride.flush(self._client)
            return self.outbox.committed_of(scope, rid, ahead.envelope, ahead.commit)
        raw, self._alerts_state = self._alerts_state, UNREAD  # read with the window's first batch, used once
        hold: ChargeOutcome | None
        if ahead is not None and ahead.commit is None and ahead.hold is not None:
            # an opening whose hold went with top-k's commit (a queued hold not sent yet goes now)
            run = ahead.run
            if not ahead.hold.done:
                with self.metrics.phase("ledger"):
                    ride.flush(self._client)
            hold = self.outbox.hold_of(ahead.hold)
        else:
            with self.metrics.phase("redis"):
                current = self.alerts_store.from_stored(self.alerts_store.load().now() if raw is UNREAD else raw)
            run = AlertsRun(self.cfg.releases.alerts, window, scope, current, watch, rng=self.rng,
                            domain=self._watch_block)
            hold = self.outbox.reserve(scope, rid, run.open_events).now(ride) if run.open_events else None
        if hold is not None:
            if hold.duplicate and hold.payload is not None:
                return self.outbox.stored(scope, rid)  # type: ignore[return-value]
            if not hold.accepted:
                draft, state = run.exhausted(hold.reason)
                return self.outbox.commit(scope, rid, self._alerts_envelope(draft, state, ride), (), settle=False).now(ride)
        counts = self._watched_counts(window, run.watchlist, ride)
        with self.metrics.phase("mechanism"):
            draft, state = run.answer(counts)
        del counts
        env = self._alerts_envelope(draft, state, ride)
        if run.open_events:
            return self.outbox.commit(scope, rid, env, draft.events, settle=True).now(ride)
        return self.outbox.commit(scope, rid, env, (), settle=False).now(ride)

    def _watched_counts(self, window: Window, watchlist: list[str], ride: RideAlong) -> dict[str, float]:
        """The watched keys' counts: as read with an earlier round trip of the window, else now (with what
        the ride-along holds)."""
        pending = self._watched
        self._watched = None
        with self.metrics.phase("redis"):
            if pending is not None and not pending.done:
                ride.flush(self._client)
            if pending is not None and pending.done:
                return pending.value
            ride.flush(self._client)
            return self.reader.counts_of(window, watchlist)

    def _alerts_envelope(self, draft: RecordDraft, state: InstanceState | None,
                         ride: RideAlong | None = None) -> Envelope:
        """The envelope of an alerts release: the record and only a *reference* to the staged SVT state (the
        secret state itself stays out of the outbox, :mod:`stream_dp.release.alerts`). With ``ride`` the
        staging write goes ahead of the commit, in its round trip."""
        if state is None:
            return Envelope(draft.to_record())
        with self.metrics.phase("redis"):
            ref = self.alerts_store.stage(state, ride=ride)
        return Envelope(draft.to_record(), {"alerts_state_ref": ref})

    def _after_commit(self, rtype: str, window: Window, committed: Committed, ride: RideAlong | None = None) -> None:
        """Idempotent follow-ups driven by the *stored* record (so a crash before them is repaired). With
        ``ride``, top-k's watchlist write is queued for the next round trip (the alerts of this window
        read the watchlist of *earlier* windows; the next window's is read after this one is marked)."""
        record = committed.envelope.record
        if rtype == "topk" and record["status"] == "released":
            with self.metrics.phase("redis"):
                self.watchlist.add_released(window, [item["key"] for item in record["items"]], ride=ride)
        elif rtype == "alerts" and committed.envelope.state is not None:
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

    # --- the loop --------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Release windows until ``stop`` is set; bounded waits, capped exponential backoff with jitter on
        errors (:class:`~stream_dp.backoff.Backoff`, reset after a pass that succeeded)."""
        backoff = Backoff(self.cfg.release.backoff_initial_seconds, self.cfg.release.backoff_max_seconds)
        log.info("release worker %s started (types: %s)", self.claims.worker_id, ", ".join(self.types))
        wait = 0.0
        while not stop.is_set():
            try:
                released = self.run_once(wait_seconds=wait)
                backoff.reset()
            except Exception as exc:  # noqa: BLE001 - the loop survives anything one window throws, but a refusal
                refusal = refusal_of(exc)
                if refusal is not None:
                    raise refusal from None
                delay = self._retry_after(exc, backoff)
                stop.wait(delay)
                wait = 0.0  # the retry polls at once
                continue
            # nothing due: the next pass first waits (in Redis) for ingest to close a window, at most one poll
            # interval -- also the longest a stop request waits
            wait = 0.0 if released is not None else self.poll_seconds
        log.info("release worker %s stopped: stop requested", self.claims.worker_id)

    def _retry_after(self, exc: Exception, backoff: Backoff) -> float:
        """Count and log a failed pass; the delay before the next one (capped exponential backoff)."""
        delay = backoff.next_delay()
        if isinstance(exc, (redis.RedisError, redis.exceptions.RedisClusterException, OSError)):  # cluster: no node reachable
            self.metrics.errors.labels("redis").inc()
            log.warning("release pass failed: redis unavailable (%s: %s); retrying in %.2fs (attempt %d)",
                        type(exc).__name__, exc, delay, backoff.failures + 1)
            return delay
        kind = "kafka" if isinstance(exc, KafkaError) else "other"  # the loop survives anything one window throws
        self.metrics.errors.labels(kind).inc()
        cause = "releases topic unavailable" if kind == "kafka" else "unexpected error"
        log.error("release pass failed: %s (%s); retrying in %.2fs (attempt %d)", cause,
                  type(exc).__name__, delay, backoff.failures + 1, exc_info=exc)
        return delay
