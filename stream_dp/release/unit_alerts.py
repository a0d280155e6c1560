"""The alerts part of one claimed window's release (:class:`WindowAlerts`, owned by its
:class:`~stream_dp.release.unit.WindowRelease`).

The alerts of a window watch keys of *earlier* windows, so their release does not wait for the window's
top-k: when both are released fresh, the alerts ride on top-k's round trips (their watched counts read with
top-k's reservation, an opening instance's hold queued with it, their commit queued behind top-k's settle),
and the two records go to the broker together. Every step keeps its guarantees -- charged before visible,
stored once, never re-rolled, the SVT state staged before the commit that references it -- and whenever a
step cannot be queued (a lifetime cap, a scope not indexed yet, top-k not computed here) the alerts take
their own round trips (:meth:`WindowAlerts.release`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stream_dp.node_batches import Pending, RideAlong
from stream_dp.release.alerts import AlertsRun, InstanceState
from stream_dp.release.ledger_port import ChargeOutcome
from stream_dp.release.outbox import Committed
from stream_dp.release.records import Envelope, RecordDraft, release_id
from stream_dp.release.windows import Window

if TYPE_CHECKING:
    from stream_dp.release.unit import WindowRelease

UNREAD = object()  # the caller did not read it (the stored release; the alerts state field)


@dataclass
class AlertsAhead:
    """A window's alerts release travelling in top-k's round trips (:meth:`WindowAlerts.set_up_ahead`): the
    run (no noise drawn yet), the opening's hold queued with top-k's reservation, then the commit queued
    with top-k's settle and the envelope it stores."""

    run: AlertsRun
    rid: str
    hold: Pending | None
    commit: Pending | None = None
    envelope: Envelope | None = None


class WindowAlerts:
    """The alerts release of one window: the state field read with the poll or the claim (used once), the
    watched counts queued on the window's round trips, the release riding on top-k's (:class:`AlertsAhead`)
    and a learned watchlist's record block. ``unit`` lends its collaborators."""

    def __init__(self, unit: WindowRelease) -> None:
        self.cfg, self.types, self.builders, self.rng = unit.cfg, unit.types, unit.builders, unit.rng
        self.reader, self.outbox, self.metrics = unit.reader, unit.outbox, unit.metrics
        self.alerts_store, self._client = unit.alerts_store, unit._client
        self.window = unit.window
        # the enabled stateful type (alerts; None: off) and the type whose round trips it rides on (top-k)
        self.stateful, self.lead = unit.stateful, unit.lead
        self.watch_block: dict[str, Any] | None = None  # a learned watchlist's record block
        self.state: Any = UNREAD  # the alerts state field as read with the window's first batch
        self.watched: Pending | None = None  # the alerts' watched counts, queued on the window's ride-along
        self.ahead: AlertsAhead | None = None  # the window's alerts, riding on top-k's round trips

    def watched_reads(self, window: Window, watch: list[str], ride: RideAlong) -> Pending | None:
        """Queue the alerts' watched counts (a public key list, read-only) on ``ride``."""
        if self.stateful is None:
            return None
        return self.reader.counts_of(window, watch).later(ride)

    def set_up_ahead(self, window: Window, scope: str, watch: list[str], stored: dict[str, Committed | None],
                      ride: RideAlong) -> AlertsAhead | None:
        """Set the window's alerts up to ride on top-k's round trips, when both are released fresh here.

        The alerts of a window watch keys of *earlier* windows, so they do not wait for this window's top-k:
        the mechanism runs right after top-k's -- only once its hold (if it opens an instance) was accepted,
        and in the same order of noise draws as before -- and its commit (the stored record, charged) goes
        after top-k's settle; both records are then handed to the broker together. An opening's reservation
        is queued to go with top-k's next round trip: its reservation when top-k reserves on its own, else
        (top-k reserved with the claim) its settle, and then the alerts commit in a round trip of their own
        right after top-k's publication (:meth:`release`). Each step keeps its guarantees (charged
        before visible, stored once, never re-rolled); whenever a step cannot be queued (a lifetime cap, a
        scope not indexed yet, top-k not computed here) the alerts take their usual path."""
        if self.stateful is None or self.lead is None:
            return None
        rid, lead = release_id(window, self.stateful.name), self.builders[self.lead.name]
        if (self.watched is None or self.state is UNREAD or stored.get(rid) is not None
                or stored.get(release_id(window, self.lead.name)) is not None or lead.skip_reason(watch) is not None):
            return None
        run = AlertsRun(self.cfg.releases.alerts, window, scope, self.alerts_store.from_stored(self.state),
                        watch, rng=self.rng, domain=self.watch_block)
        hold = None
        if run.open_events:
            hold = self.outbox.reserve(scope, rid, run.open_events).later(ride)
            if hold is None:
                return None
        return AlertsAhead(run, rid, hold)

    def answer_ahead(self, rtype: str, scope: str, ride: RideAlong) -> None:
        """Right before top-k's commit: answer the window's alerts and queue their commit after it."""
        ahead = self.ahead
        if not self._leads(rtype) or ahead is None:
            return
        watched = self.watched
        if ahead.hold is not None and not ahead.hold.done:
            return  # the opening's hold goes with top-k's commit; the alerts follow on their own (:meth:`release`)
        ready = watched is not None and watched.done
        if not ready or not self.outbox.can_commit_later(scope, ahead.run.open_events):
            self.ahead = None  # the usual path (a queued hold is idempotent: it is reserved once)
            return
        run = ahead.run
        settle = bool(run.open_events)
        if ahead.hold is not None:
            hold = self.outbox.hold_of(ahead.hold)
            if hold.duplicate and hold.payload is not None:  # another worker settled it: the usual path reads it
                self.ahead = None
                return
            if not hold.accepted:
                draft, state = run.exhausted(hold.reason)
                ahead.envelope = self.envelope(draft, state, ride)
                ahead.commit = self.outbox.commit(scope, ahead.rid, ahead.envelope, (), settle=False).later(ride)
                return
        self.watched = None
        with self.metrics.phase("mechanism"):
            draft, state = run.answer(watched.value)  # type: ignore[union-attr]
        ahead.envelope = self.envelope(draft, state, ride)
        ahead.commit = self.outbox.commit(scope, ahead.rid, ahead.envelope, draft.events if settle else (),
                                          settle=settle).later(ride)

    def committed_with(self, rtype: str) -> bool:
        """Whether the window's alerts were committed in the round trip of ``rtype``'s commit (top-k's), so
        that both records are handed to the broker together (:meth:`Outbox.publish_all`: each was charged
        and stored before either is sent). Decided from which steps were queued, never from the data."""
        ahead = self.ahead
        return (self._leads(rtype) and ahead is not None and ahead.envelope is not None and ahead.commit is not None
                and ahead.commit.done)

    def _leads(self, rtype: str) -> bool:
        """``rtype`` is the type whose round trips the alerts ride on (top-k)."""
        return self.lead is not None and rtype == self.lead.name

    def release(self, window: Window, scope: str, rid: str, watch: list[str], ride: RideAlong) -> Committed:
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead.commit is not None and ahead.envelope is not None:
            self.state = UNREAD
            if not ahead.commit.done:  # top-k took another path: send what is queued now
                with self.metrics.phase("ledger"):
                    ride.flush(self._client)
            return self.outbox.committed_of(scope, rid, ahead.envelope, ahead.commit)
        raw, self.state = self.state, UNREAD  # read with the window's first batch, used once
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
                            domain=self.watch_block)
            hold = self.outbox.reserve(scope, rid, run.open_events).now(ride) if run.open_events else None
        if hold is not None:
            if hold.duplicate and hold.payload is not None:
                return self.outbox.stored(scope, rid)  # type: ignore[return-value]
            if not hold.accepted:
                draft, state = run.exhausted(hold.reason)
                return self.outbox.commit(scope, rid, self.envelope(draft, state, ride), (), settle=False).now(ride)
        counts = self._watched_counts(window, run.watchlist, ride)
        with self.metrics.phase("mechanism"):
            draft, state = run.answer(counts)
        del counts
        env = self.envelope(draft, state, ride)
        if run.open_events:
            return self.outbox.commit(scope, rid, env, draft.events, settle=True).now(ride)
        return self.outbox.commit(scope, rid, env, (), settle=False).now(ride)

    def _watched_counts(self, window: Window, watchlist: list[str], ride: RideAlong) -> dict[str, float]:
        """The watched keys' counts: as read with an earlier round trip of the window, else now (with what
        the ride-along holds)."""
        pending = self.watched
        self.watched = None
        with self.metrics.phase("redis"):
            if pending is not None and not pending.done:
                ride.flush(self._client)
            if pending is not None and pending.done:
                return pending.value
            ride.flush(self._client)
            return self.reader.counts_of(window, watchlist).now()

    def envelope(self, draft: RecordDraft, state: InstanceState | None,
                         ride: RideAlong | None = None) -> Envelope:
        """The envelope of an alerts release: the record and only a *reference* to the staged SVT state (the
        secret state itself stays out of the outbox, :mod:`stream_dp.release.alerts`). With ``ride`` the
        staging write goes ahead of the commit, in its round trip."""
        if state is None:
            return Envelope(draft.to_record())
        with self.metrics.phase("redis"):
            ref = self.alerts_store.stage(state, ride=ride)
        return Envelope(draft.to_record(), {"alerts_state_ref": ref})
