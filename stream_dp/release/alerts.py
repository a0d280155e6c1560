"""Online alerts: one Adaptive SVT instance carried across windows, and the public watchlist.

**Watchlist** (public: docs/privacy.md §1): the keys of ``releases.alerts.watchlist`` plus, when
``include_released_topk`` is on, every key that a ``topk`` release of an *earlier* window released. Those keys
are public once released; they are added from the stored top-k record (:meth:`Watchlist.add_released`),
never from raw counts. The order is public and data-independent: config keys first, then released keys by
the window that first released them (then by key); each window starts at a rotating offset
(window index mod list length) so that an instance exhausted early does not starve the same keys forever.

**The sparse-vector instance** (Ding et al., Adaptive SVT with gap, seed 003; docs/privacy.md §4): its
whole ε is charged to the ledger *when it opens*, as the ``alerts`` release of the window in which it opens.
It then answers "is this watched key's count above the threshold?" for the watchlist of every following
window until it has given ``k`` positive answers (``exhausted``). At most one instance opens per window; once
the instance is exhausted the rest of that window's watchlist gets no answer (``info.unanswered``) and the
next window opens a new instance. Each answer is user-level private because each query (a count of distinct
users) has sensitivity 1 and is monotone, which is what the SVT assumes; all windows' queries share the one
instance's budget.

**Budget periods.** An instance is bound to the budget period (ledger scope) it was charged in: the first
window of a new period opens a new instance even if the old one is not exhausted. So each period's ledger
covers every window whose data an instance charged in that period looked at; no instance charged in period
P answers about data of period P+1.

**Persistence** (no recoverable noise, issue 16). The instance's state (``to_state``: public parameters, the
secret noisy threshold, answer counters) holds nothing from which past noise can be recomputed: no
generator state, seed or key -- every query draws fresh noise from the worker's CSPRNG. The state never
travels in an outbox payload: the stored release (what no-re-roll needs) is the *result*. Before a window's
alerts release is committed, the state after it is *staged* under a random reference
(``Keys.svt("alerts", "pending")``, field ``<window>:<ref>``) and only the reference goes into the
envelope. After the commit the referenced state is copied to ``Keys.svt("alerts", "state")`` by a
compare-and-set that only moves forward in window order, and every staged state of that window or earlier
is deleted. So a crash between the commit and the copy is repaired from the staged state; a stale worker's
staged state carries another reference and is never applied; a crash before the commit leaves nothing that
was released. Should the staged state be missing after a commit, the stored instance is *closed* (the next
window opens a new one and pays for it): never an instance that could give more than ``k`` positives.

When an instance closes (exhausted, or its budget period ended) its SVT state is deleted: the stored
``svt`` becomes null and only public facts (instance number, scope, last window) remain.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

import redis

from stream_dp.config import AlertsConfig
from stream_dp.mechanisms.svt import SVTAnswer, published_lower_bounds
from stream_dp.node_batches import Reads, RideAlong, evalsha_item
from stream_dp.release.records import RecordDraft, exhausted_draft
from stream_dp.release.windows import Window
from stream_dp.replication import ReplicationPolicy, write_then_wait
from stream_dp.store import scripts
from stream_dp.store.keys import Keys

SVT_NAME = "alerts"
MECHANISM = "adaptive_svt"

def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Watchlist:
    """Config keys ∪ keys released by ``topk`` in earlier windows (``Keys.release_index("watchlist")``) -- or,
    with ``releases.alerts.domain_from_released``, config keys ∪ the alerts' released domain
    (:mod:`stream_dp.release.released_domain`: the keys ``domain_sources`` published in the last
    ``domain_memory_windows`` windows), which is read under the window's claim (:meth:`learned_for`)."""

    def __init__(self, client: redis.Redis, *, keys: Keys, config: AlertsConfig) -> None:
        self.r = client
        self.name = keys.release_index("watchlist")
        self.config_keys = tuple(dict.fromkeys(config.watchlist))
        self.include_released = config.include_released_topk
        self.learns = config.domain_from_released
        # set by the release worker when the watchlist is learned: the window's domain and record block
        self.learn: Any = None

    def learned_for(self, window: Window) -> tuple[list[str], dict[str, Any]]:
        """The learned watchlist of ``window`` and the alerts record's ``domain`` block (under its claim: every
        earlier window is published)."""
        if self.learn is None:
            raise RuntimeError("a learned watchlist is read by the release worker's ReleasedDomainReader")
        return self.learn(window, list(self.config_keys))

    def add_released(self, window: Window, released_keys: list[str], *, ride: RideAlong | None = None) -> None:
        """Record keys a stored top-k release of ``window`` released (first release wins the position).
        ``ride``: queued ahead of the worker's next Redis step (``ZADD NX`` is idempotent)."""
        if not released_keys:
            return
        mapping = {k: window.start for k in released_keys}
        if ride is None:
            self.r.zadd(self.name, mapping, nx=True)
        else:
            ride.write((self.name, lambda pipe: pipe.zadd(self.name, mapping, nx=True)))

    def for_window(self, window: Window) -> Reads:
        """The watchlist of ``window`` as one read (none without released keys; ``.now()`` or batched with
        others): config keys, then keys released by top-k in windows before it. A learned watchlist parses to
        None: it is read under the window's claim (:meth:`learned_for`)."""
        if self.learns:
            return Reads([], lambda replies: None, client=self.r)
        items = []
        if self.include_released:
            items.append((self.name, lambda pipe: pipe.zrangebyscore(self.name, "-inf", f"({window.start}",
                                                                     withscores=True)))

        def parse(replies: list) -> list[str]:
            keys = list(self.config_keys)
            if replies:
                ordered = sorted(((float(score), _text(k)) for k, score in replies[0]))
                keys.extend(k for _, k in ordered)
            return list(dict.fromkeys(keys))

        return Reads(items, parse, client=self.r)


def rotate(keys: list[str], window: Window) -> list[str]:
    """Start the list at a public, window-dependent offset.

    >>> rotate(["a", "b", "c"], Window(7200, 10800))
    ['c', 'a', 'b']
    """
    if not keys:
        return keys
    size = window.end - window.start
    offset = (window.start // size) % len(keys)
    return keys[offset:] + keys[:offset]


@dataclass
class InstanceState:
    """The persisted alerts state: which instance, in which scope, its SVT state (None once the instance
    closed: the secret threshold is deleted), the last window applied."""

    instance: int
    scope: str
    svt: dict[str, Any] | None
    window: int
    opened_in_scope: int = 1  # instances opened in ``scope`` so far (public: one per record with opened)

    @property
    def closed(self) -> bool:
        return self.svt is None

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "scope": self.scope, "svt": self.svt, "window": self.window,
                "opened_in_scope": self.opened_in_scope}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InstanceState":
        svt = d.get("svt")
        return cls(int(d["instance"]), str(d["scope"]), None if svt is None else dict(svt), int(d["window"]),
                   int(d.get("opened_in_scope", 1)))


class AlertsStore:
    """Loads the current instance state; stages the state after a window and applies it after the commit."""

    def __init__(self, client: redis.Redis, *, keys: Keys) -> None:
        self.r = client
        self.key = keys.svt(SVT_NAME, "state")
        self.staged_key = keys.svt(SVT_NAME, "pending")
        self.fence = keys.svt_fence(SVT_NAME)
        self._cas = scripts.register(client, "alerts_cas_state")
        self._apply = scripts.register(client, "alerts_apply_staged")

    @property
    def scripts(self) -> tuple:
        """The state's Lua scripts (compare-and-set, apply staged), loaded when the worker starts."""
        return (self._cas, self._apply)

    def load(self) -> Reads:
        """The read of the stored state's field (``.now()`` or batched with others); turn it into the state
        with :meth:`from_stored`."""
        return Reads([(self.key, lambda pipe: pipe.hget(self.key, "state"))], lambda replies: replies[0],
                     client=self.r)

    def from_stored(self, raw: bytes | str | None) -> InstanceState | None:
        """The stored state from the field :meth:`load` read. A state written by a version before issue 16
        carries the generator state (``svt.rng``), from which past noise can be recomputed: it is closed and
        overwritten at once."""
        if raw is None:
            return None
        state = InstanceState.from_dict(json.loads(raw))
        if state.svt is not None and state.svt.get("rng") is not None:
            state = InstanceState(state.instance, state.scope, None, state.window, state.opened_in_scope)
            self.r.hset(self.key, "state", json.dumps(state.to_dict(), sort_keys=True))
        return state

    def confirm(self, policy: ReplicationPolicy, window: int) -> None:
        """Return once the instance state (and everything its master acknowledged before) is on
        ``policy.replicas`` replicas; raise :class:`~stream_dp.replication.NotReplicated` (transient) when not.

        Called after :meth:`apply` and before the window is marked released: a failover that took back an
        applied state whose window is already marked would let the next window resume the instance from an
        older state -- its positive answers of that window forgotten, so more than ``k`` positives for one
        charge. A fence write plus ``WAIT`` on the state's master, as ``Ledger.confirm``."""
        if not policy.replicas:
            return
        fence = self.fence  # same hash tag: same slot as the state
        write_then_wait(self.r, fence, policy.replicas, policy.timeout_ms,
                        lambda pipe: pipe.set(fence, str(window)))

    def stage(self, state: InstanceState, *, ride: RideAlong | None = None) -> str:
        """Store ``state`` (the state after its window) under a fresh random reference; returns the reference
        to put in the (non-secret part of the) outbox envelope. Called before the release is committed.

        ``ride``: the ``HSET`` is queued ahead of the worker's next Redis step -- the commit that stores the
        reference -- so it still runs before it. Should it fail while the commit succeeds, the reference is
        missing at :meth:`apply`, which closes the instance (never resumes one)."""
        ref = f"{state.window}:{secrets.token_hex(16)}"
        value = json.dumps(state.to_dict(), sort_keys=True)
        if ride is None:
            self.r.hset(self.staged_key, ref, value)
        else:
            ride.write((self.staged_key, lambda pipe: pipe.hset(self.staged_key, ref, value)))
        return ref

    def apply(self, ref: str, *, window: int, scope: str, instance: int, opened: bool = False,
              ride: RideAlong | None = None) -> bool:
        """After the commit of ``window``'s release: move the staged state ``ref`` forward. When it is missing
        (lost), store instance ``instance`` (from the public record; ``opened``: it opened in this window) as
        closed instead: the next window opens a new instance and pays for it, never resumes one that might
        have answered more than ``k``. ``ride``: its queued writes go ahead of the script, same round trip."""
        keys, args = [self.key, self.staged_key], [ref, str(window)]
        if ride:
            raw, = ride.run(self.r, [evalsha_item(self._apply, keys, args)], [self._apply])
        else:
            raw = self._apply(keys=keys, args=args)
        result = int(raw)
        if result != -1:
            return result == 1
        current = self.from_stored(self.load().now())
        opened_here = current.opened_in_scope if current is not None and current.scope == scope else 0
        return self.advance(InstanceState(instance, scope, None, window, opened_here + int(opened)))

    def advance(self, state: InstanceState) -> bool:
        """Store ``state`` if it is for a later window than the stored one; False if it was stale."""
        return bool(self._cas(keys=[self.key], args=[state.window, json.dumps(state.to_dict(), sort_keys=True)]))


def parameters(cfg: AlertsConfig) -> dict[str, Any]:
    return {"threshold": cfg.threshold, "k": cfg.k, "epsilon": cfg.epsilon, "noise": cfg.noise,
            "theta": cfg.theta or None, "confidence": cfg.confidence, "monotone": True}


def alerts_measurement(cfg: AlertsConfig) -> Any:
    """The ``alerts`` type's measurement: one Adaptive SVT instance at the configured parameters (its whole ε
    charged in the window it opens in)."""
    from stream_dp.mechanisms import AdaptiveSvtInstance

    return AdaptiveSvtInstance(threshold=cfg.threshold, k=cfg.k, epsilon=cfg.epsilon, noise=cfg.noise,
                               theta=cfg.theta or None, monotone=True)


def needs_new_instance(current: InstanceState | None, scope: str, *, svt_exhausted: bool) -> bool:
    """A window opens an instance when there is none, it is closed or exhausted, or it belongs to another
    period."""
    return current is None or current.closed or svt_exhausted or current.scope != scope


class AlertsRun:
    """One window's alerts: decide whether an instance opens (and what it costs), then answer the watchlist.

    Use: ``run = AlertsRun(cfg, window, scope, current, watchlist, rng)``; reserve ``run.open_events`` in the
    ledger (empty when the current instance continues); if that is refused call :meth:`exhausted`, else
    :meth:`answer` with the watched keys' counts.
    """

    def __init__(self, cfg: AlertsConfig, window: Window, scope: str, current: InstanceState | None,
                 watchlist: list[str], rng: Any = None, measurement: Any = None,
                 domain: dict[str, Any] | None = None) -> None:
        from stream_dp.mechanisms import AdaptiveSVT

        self.cfg = cfg
        self.domain = domain  # the record's ``domain`` block when the watchlist is learned from earlier releases
        # the instance's measurement: opens instances, says what to reserve and what a window realized
        self.measurement = measurement if measurement is not None else alerts_measurement(cfg)
        self.window = window
        self.scope = scope
        self.current = current
        self.watchlist = rotate(watchlist, window)
        # a continuing instance keeps its noisy threshold and counters and draws fresh query noise from the
        # worker's generator (nothing stored lets anyone recompute noise already drawn)
        svt = AdaptiveSVT.from_state(current.svt, rng=rng) if current is not None and current.svt else None
        wants = bool(self.watchlist) and needs_new_instance(current, scope,
                                                            svt_exhausted=bool(svt and svt.exhausted))
        # releases.alerts.max_instances_per_period bounds the alerts' cost per period (budget planning):
        # once reached, the period's later windows get no answers (decided from public facts only)
        self.opened_here = current.opened_in_scope if current is not None and current.scope == scope else 0
        limit = cfg.max_instances_per_period
        self.limited = wants and limit > 0 and self.opened_here >= limit
        self.opens = wants and not self.limited
        # an instance opened here draws its noisy threshold when the window is answered (:meth:`answer`), once
        # its reservation was accepted: building the run draws no noise
        self._rng = rng
        self.svt = svt
        self.instance = (current.instance if current else 0) + (1 if self.opens else 0)
        # what to reserve: the whole instance's ε when one opens here (a continuing instance was paid for)
        self.open_events = self.measurement.privacy_map() if self.opens else ()

    def _state_after(self) -> InstanceState | None:
        """The state after this window; the SVT state is dropped (None) once the instance is closed."""
        if self.opens:
            return InstanceState(self.instance, self.scope, self._live_svt_state(), self.window.start,
                                 self.opened_here + 1)
        if self.current is None:
            return None
        live = self.svt is not None and not self.current.closed and self.current.scope == self.scope
        return InstanceState(self.current.instance, self.current.scope,
                             self._live_svt_state() if live else None, self.window.start,
                             self.current.opened_in_scope)

    def _live_svt_state(self) -> dict[str, Any] | None:
        return None if self.svt is None or self.svt.exhausted else self.svt.to_state()

    def answer(self, counts: dict[str, float]) -> tuple[RecordDraft, InstanceState | None]:
        """Answer the watchlist in order until the instance is exhausted; the draft and the state after."""
        items: list[dict[str, Any]] = []
        if self.opens and self.svt is None:
            self.svt = self.measurement.open(rng=self._rng)
        svt = self.svt
        if svt is not None and not svt.exhausted and (self.opens or self.current.scope == self.scope):  # type: ignore[union-attr]
            number = _int if self.cfg.noise == "geometric" else _num  # discrete noise: integers
            published: list[tuple[dict[str, Any], SVTAnswer]] = []
            for key in self.watchlist:
                if svt.exhausted:
                    break
                ans = svt.process(float(counts.get(key, 0.0)))
                item: dict[str, Any] = {"key": key, "above": bool(ans.above)}
                if ans.above:
                    item["branch"] = ans.branch
                    item["gap"] = number(ans.gap)
                    item["estimate"] = number(ans.estimate)
                    published.append((item, ans))
                items.append(item)
            # calibrated given publication (selective inference): covers the count with probability
            # ≥ confidence among the answers that are published (the window's answers bounded together);
            # a count is never negative: 0 when the answer excludes no count
            bounds = published_lower_bounds([ans for _, ans in published], self.cfg.confidence, at_least=0.0)
            for (item, _), bound in zip(published, bounds):
                item["lower_bound"] = number(bound)
        info = {"instance": self.instance, "opened": self.opens, "watchlist_size": len(self.watchlist),
                "unanswered": len(self.watchlist) - len(items),
                "instance_exhausted": bool(svt.exhausted) if svt is not None else None,
                "instance_limit_reached": self.limited, "confidence": self.cfg.confidence}
        # the realized cost of the window: the opened instance's map (its answers spent ≤ ε), else nothing new
        events = self.measurement.realized(svt) if self.opens and svt is not None else ()
        draft = RecordDraft(self.window, "alerts", MECHANISM, parameters(self.cfg), items=items, hit_bottom=None,
                            events=events, info=info, domain=self.domain)
        return draft, self._state_after()

    def exhausted(self, reason: str) -> tuple[RecordDraft, InstanceState | None]:
        """The budget could not open an instance: status record; the stored state is closed (an instance is
        only opened when the current one is closed or exhausted or of another period) and moves its window."""
        draft = exhausted_draft(self.window, "alerts", MECHANISM, parameters(self.cfg), reason)
        state = None
        if self.current is not None:
            state = InstanceState(self.current.instance, self.current.scope, None, self.window.start,
                                  self.current.opened_in_scope)
        return draft, state


def _num(x: Any) -> float | None:
    return None if x is None else float(x)


def _int(x: Any) -> int | None:
    """An integer-valued result of geometric noise as a JSON integer (it is exact: no rounding happens)."""
    if x is None:
        return None
    if float(x) != round(float(x)):
        raise ValueError("geometric noise produced a non-integer output (is the threshold an integer?)")
    return int(round(float(x)))
