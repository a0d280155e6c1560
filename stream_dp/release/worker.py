"""The release worker: claim the oldest closable window, run its release, sleep -- once and only once.

One pass (:meth:`ReleaseWorker.run_once`):

1. poll: find the closable windows on the public schedule (every window from the recorded start on, empty
   or not, with ``end <= watermarks.global``, not yet released), oldest first (:mod:`stream_dp.schedule`);
   the ledger epoch is read in the same round trip (a Redis that lost the ledger stops the pass, StateLost),
   and so is what a release of the window guessed next starts with (the claim's first step, its watchlist,
   the alerts state: :meth:`ReleaseWorker._poll_reads`);
2. release the **oldest** one as a unit of work (:class:`~stream_dp.release.unit.WindowRelease`): it claims
   the window (lock with fencing token and expiry, :mod:`stream_dp.release.claim`), releases every enabled
   type under the claim -- charged before visible, exactly once -- and marks the window released. Windows
   are released in order because the online alerts state moves window by window; several workers give
   failover, not parallel windows. The unit owns the window's state; nothing of it stays on the worker.

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
from typing import Any, Callable

import redis
from kafka.errors import KafkaError

from stream_dp.accounting.budget import check_budget_covers
from stream_dp.accounting.events import DpEvent
from stream_dp.backoff import Backoff
from stream_dp.config import Config
from stream_dp.store.keys import Keys
from stream_dp.node_batches import Pending, Reads, joined, load_scripts
from stream_dp.release.alerts import AlertsStore, Watchlist
from stream_dp.release.builders import Builder
from stream_dp.release.claim import WindowClaims
from stream_dp.release.ledger_port import ReleaseLedger
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox
from stream_dp.release.records import parse_release_id
from stream_dp.release.public_domain import DomainRule, domain_block
from stream_dp.release.released_domain import ReleasedDomainReader
from stream_dp.release.types import (REGISTRY, WATCHLIST_SECTION, enabled_types, release_measurements,
                                     stateful_of, watching)
from stream_dp.release.unit import UNREAD, WindowRelease
from stream_dp.release.wakeup import SOCKET_TIMEOUT_SHARE, WindowCloses
from stream_dp.release.windows import Window, WindowReader
from stream_dp.refusals import refusal_of
from stream_dp.replication import NotReplicated
from stream_dp.rng import make_rng
from stream_dp.schedule import establish as establish_schedule

log = logging.getLogger(__name__)

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
        self.keys = Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout)
        self.reader = WindowReader(client, keys=self.keys, size_seconds=cfg.windows.size_seconds)
        self.client = client
        self.claims = WindowClaims(client, keys=self.keys, worker_id=worker_id, ttl_seconds=claim_ttl_seconds or cfg.release.claim_ttl_seconds)
        self.ledger = ledger
        self.outbox = outbox
        self.metrics = metrics
        self.watchlist = Watchlist(client, keys=self.keys, config=cfg.releases.alerts)
        self.alerts_store = AlertsStore(client, keys=self.keys)
        self.types = enabled_types(cfg)
        self.builders: dict[str, Builder] = {t: build(cfg) for t in self.types
                                             if (build := REGISTRY[t].builder) is not None}
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
        watch_rule = DomainRule.of(cfg, WATCHLIST_SECTION) if watching(self.types) else None
        if watch_rule is not None:
            self.watchlist.learn = lambda window, static: domain_block(
                static, self.released_domains.domain_for(window, watch_rule))
        self.recovered = False
        self._first_seen: dict[int, float] = {}  # when this worker first saw each pending window (latency)

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
        self.reader.schedule = establish_schedule(self.client, self.keys, self.cfg.windows)
        load_scripts(self.client, [*self.reader.scripts, *self.claims.scripts, *self.alerts_store.scripts,
                                    *self.ledger.scripts])
        self.recover()
        self.recovered = True
        if self.after_start is not None:
            self.after_start()

    def run_once(self, *, wait_seconds: float = 0.0) -> Window | None:
        """Start (first call), then release the oldest closable window if one can be claimed (its unit of
        work, :class:`~stream_dp.release.unit.WindowRelease`); the window when it was released here.

        ``wait_seconds`` > 0: the pass's first round trip starts with a blocking read of ingest's close
        notices (:mod:`stream_dp.release.wakeup`): it returns when a window closes or after that long, and
        the poll's reads run right behind it. That wait (and the poll riding on it) is not phase time."""
        self.start()
        pending, polled = self._closable_windows(wait_seconds)
        if not pending:
            return None
        window = pending[0]
        return window if WindowRelease(self, window).run(polled) else None

    def _closable_windows(self, wait_seconds: float) -> tuple[list[Window], tuple[Any, Any, Any]]:
        """The closable windows, oldest first, and what the poll read for the oldest one when it was the
        window guessed next (:meth:`_poll_reads`; else ``(None, None, UNREAD)``: the unit reads them with its
        claim). The ledger epoch (:mod:`stream_dp.release.ledger_guard`) is read in every poll, after its
        wait: a pass on a Redis that lost the ledger stops (StateLost) before it claims or charges anything."""
        guess = self.reader.next_guess()
        guessed = None if guess is None else self.reader.window(guess)
        if wait_seconds > 0 and guessed is not None:
            self._index_ahead(guessed)
        polled = Pending()
        also = None if guessed is None else self._poll_reads(guessed)
        epoch = self.outbox.epoch_reads()
        if wait_seconds > 0:
            wait_for_close = self.closes.wait_reads(wait_seconds)
            pending = self.reader.closable(also=also, also_result=polled,
                                           first=wait_for_close if epoch is None else joined(wait_for_close, epoch))
        else:
            with self.metrics.phase("redis"):
                # no guard (tests, the neighbouring harness' broken readers): the call as it always was
                pending = (self.reader.closable(also=also, also_result=polled) if epoch is None else
                           self.reader.closable(also=also, also_result=polled, first=epoch))
        self.metrics.windows_pending.set(len(pending))
        now = time.time()
        for w in pending:
            self._first_seen.setdefault(w.start, now)
        fresh = polled.done and bool(pending) and pending[0].start == guess
        return pending, (polled.value if fresh else (None, None, UNREAD))

    def observe_released(self, window: Window, closed_at: float | None) -> None:
        """Count a window its unit released: the metrics and the log line. Latency from ``closed_at`` (when
        ingest closed it), else from when this worker first saw it closable."""
        self.metrics.windows_released.inc()
        first_seen = self._first_seen.pop(window.start, None)
        closed = closed_at if closed_at is not None else (first_seen if first_seen is not None else time.time())
        self.metrics.latency.observe(max(0.0, time.time() - closed))
        self.metrics.windows_pending.dec()
        log.info("window %s released (%s)", window.label, ", ".join(self.types))

    def _poll_reads(self, guess: Window) -> Reads:
        """What the poll reads for the window it guesses next: the claim's first step (``EXISTS`` + fence
        ``INCR``), its watchlist (keys first released before it) and the alerts' state; parses to
        ``(prechecked, watchlist, alerts state field)``.

        The guess is the first window after the cursor the last poll saw. When it is right, every earlier
        window was released -- its top-k keys added to the watchlist, its alerts state applied -- before
        that poll, and only a release of the guessed window itself changes them after: that part of the
        watchlist never (``ZADD NX``), the state once the window's alerts are stored, which the claim's
        round trip then reads (a stored release is published as stored, never run again)."""
        state = (self.alerts_store.load() if stateful_of(self.types) is not None
                 else Reads([], lambda replies: UNREAD))
        return joined(self.claims.precheck_reads(guess.start), self.watchlist_reads(guess), state)

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

    def watchlist_reads(self, window: Window) -> Reads:
        """The read of ``window``'s watchlist (parses to None when it is learned from earlier releases; to
        an empty list when no enabled type watches keys)."""
        if watching(self.types):
            return self.watchlist.for_window(window)
        return Reads([], lambda replies: [])

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
