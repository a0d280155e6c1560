"""Online alerts: one Adaptive SVT instance carried across windows, and the public watchlist.

**Watchlist** (DESIGN §3): the keys of ``releases.alerts.watchlist`` plus, when
``include_released_topk`` is on, every key that a ``topk`` release of an *earlier* window released. Those keys
are public once released; they are added from the stored top-k record (:meth:`Watchlist.add_released`),
never from raw counts. The order is public and data-independent: config keys first, then released keys by
the window that first released them (then by key); each window starts at a rotating offset
(window index mod list length) so that an instance exhausted early does not starve the same keys forever.

**The sparse-vector instance** (Ding et al., Adaptive SVT with gap, seed 003; ALGORITHMS decision 5): its
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

**Persistence.** The instance's state (``to_state``: noisy threshold, answers so far, ...) is private. The
state *after* window W travels inside W's outbox envelope (stored atomically with W's charge) and is then
copied to ``Keys.svt("alerts", "state")`` by a compare-and-set that only moves forward in window order. So a
crash between the charge and the copy, or a stale worker, can neither roll the instance back (which would
let it answer more than ``k`` positives) nor fork it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis

from stream_dp.config import AlertsConfig
from stream_dp.keys import Keys
from stream_dp.release.records import RecordDraft, exhausted_draft
from stream_dp.release.windows import Window
from stream_dp.rng import make_rng

SVT_NAME = "alerts"
MECHANISM = "adaptive_svt"

_CAS_STATE = """
-- KEYS[1]: state key ; ARGV[1]: window start ; ARGV[2]: state JSON
local cur = redis.call('HGET', KEYS[1], 'window')
if cur and tonumber(cur) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'window', ARGV[1], 'state', ARGV[2])
return 1
"""


class Watchlist:
    """Config keys ∪ keys released by ``topk`` in earlier windows (``Keys.release_index("watchlist")``)."""

    def __init__(self, client: redis.Redis, *, keys: Keys, config: AlertsConfig) -> None:
        self.r = client
        self.name = keys.release_index("watchlist")
        self.config_keys = tuple(dict.fromkeys(config.watchlist))
        self.include_released = config.include_released_topk

    def add_released(self, window: Window, released_keys: list[str]) -> None:
        """Record keys a stored top-k release of ``window`` released (first release wins the position)."""
        if released_keys:
            self.r.zadd(self.name, {k: window.start for k in released_keys}, nx=True)

    def for_window(self, window: Window) -> list[str]:
        """The watchlist of ``window``: config keys, then keys released by top-k in windows before it."""
        keys = list(self.config_keys)
        if self.include_released:
            earlier = self.r.zrangebyscore(self.name, "-inf", f"({window.start}", withscores=True)
            ordered = sorted(((score, k.decode()) for k, score in earlier))
            keys.extend(k for _, k in ordered)
        return list(dict.fromkeys(keys))


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
    """The persisted alerts state: which instance, in which scope, its SVT state, last window applied."""

    instance: int
    scope: str
    svt: dict[str, Any]
    window: int

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "scope": self.scope, "svt": self.svt, "window": self.window}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InstanceState":
        return cls(int(d["instance"]), str(d["scope"]), dict(d["svt"]), int(d["window"]))


class AlertsStore:
    """Loads the current instance state and moves it forward (compare-and-set on the window)."""

    def __init__(self, client: redis.Redis, *, keys: Keys) -> None:
        self.r = client
        self.key = keys.svt(SVT_NAME, "state")
        self._cas = client.register_script(_CAS_STATE)

    def load(self) -> InstanceState | None:
        raw = self.r.hget(self.key, "state")
        return None if raw is None else InstanceState.from_dict(json.loads(raw))

    def advance(self, state: InstanceState) -> bool:
        """Store ``state`` if it is for a later window than the stored one; False if it was stale."""
        return bool(self._cas(keys=[self.key], args=[state.window, json.dumps(state.to_dict(), sort_keys=True)]))


def parameters(cfg: AlertsConfig) -> dict[str, Any]:
    return {"threshold": cfg.threshold, "k": cfg.k, "epsilon": cfg.epsilon, "noise": cfg.noise,
            "theta": cfg.theta or None, "confidence": cfg.confidence, "monotone": True}


def needs_new_instance(current: InstanceState | None, scope: str, *, svt_exhausted: bool) -> bool:
    """A window opens an instance when there is none, it is exhausted, or it belongs to another period."""
    return current is None or svt_exhausted or current.scope != scope


class AlertsRun:
    """One window's alerts: decide whether an instance opens (and what it costs), then answer the watchlist.

    Use: ``run = AlertsRun(cfg, window, scope, current, watchlist, rng)``; reserve ``run.open_events`` in the
    ledger (empty when the current instance continues); if that is refused call :meth:`exhausted`, else
    :meth:`answer` with the watched keys' counts.
    """

    def __init__(self, cfg: AlertsConfig, window: Window, scope: str, current: InstanceState | None,
                 watchlist: list[str], rng: Any = None) -> None:
        from stream_dp.mechanisms import AdaptiveSVT

        self.cfg = cfg
        self.window = window
        self.scope = scope
        self.current = current
        self.watchlist = rotate(watchlist, window)
        # a continuing instance resumes its own stored generator: a retry after a crash replays, not re-rolls
        svt = AdaptiveSVT.from_state(current.svt) if current is not None else None
        self.opens = bool(self.watchlist) and needs_new_instance(current, scope,
                                                                 svt_exhausted=bool(svt and svt.exhausted))
        if self.opens:
            svt = AdaptiveSVT(cfg.threshold, k=cfg.k, epsilon=cfg.epsilon, noise=cfg.noise, monotone=True,
                              theta=cfg.theta or None, rng=own_generator(rng))
        self.svt = svt
        self.instance = (current.instance if current else 0) + (1 if self.opens else 0)
        self.open_events = (svt.privacy_event(),) if self.opens and svt is not None else ()

    def _state_after(self) -> dict[str, Any] | None:
        if self.svt is None:
            return None if self.current is None else InstanceState(
                self.current.instance, self.current.scope, self.current.svt, self.window.start).to_dict()
        return InstanceState(self.instance, self.scope if self.opens else self.current.scope,  # type: ignore[union-attr]
                             self.svt.to_state(), self.window.start).to_dict()

    def answer(self, counts: dict[str, float]) -> tuple[RecordDraft, dict[str, Any] | None]:
        """Answer the watchlist in order until the instance is exhausted; the draft and the state after."""
        items: list[dict[str, Any]] = []
        svt = self.svt
        usable = svt is not None and not svt.exhausted and (self.opens or self.current.scope == self.scope)  # type: ignore[union-attr]
        if usable:
            for key in self.watchlist:
                if svt.exhausted:
                    break
                ans = svt.process(float(counts.get(key, 0.0)))
                item: dict[str, Any] = {"key": key, "above": bool(ans.above)}
                if ans.above:
                    item["branch"] = ans.branch
                    item["gap"] = _num(ans.gap)
                    item["estimate"] = _num(ans.estimate)
                    item["lower_bound"] = _num(ans.lower_bound(self.cfg.confidence))
                items.append(item)
        info = {"instance": self.instance, "opened": self.opens, "watchlist_size": len(self.watchlist),
                "unanswered": len(self.watchlist) - len(items),
                "instance_exhausted": bool(svt.exhausted) if svt is not None else None,
                "confidence": self.cfg.confidence}
        draft = RecordDraft(self.window, "alerts", MECHANISM, parameters(self.cfg), items=items, hit_bottom=None,
                            events=self.open_events, info=info)
        return draft, self._state_after()

    def exhausted(self, reason: str) -> tuple[RecordDraft, dict[str, Any] | None]:
        """The budget could not open an instance: status record; the stored state only moves its window."""
        draft = exhausted_draft(self.window, "alerts", MECHANISM, parameters(self.cfg), reason)
        state = None
        if self.current is not None:
            state = InstanceState(self.current.instance, self.current.scope, self.current.svt,
                                  self.window.start).to_dict()
        return draft, state


def own_generator(rng: Any) -> np.random.Generator:
    """An independent generator for a new instance (a spawned child stream of the worker's generator).

    The instance stores its generator state with its SVT state and resumes it in later windows; sharing the
    worker's generator object would make a later resumed copy replay the very stream the worker goes on to
    use for other mechanisms (correlated noise). A spawned child is a statistically independent stream.
    """
    parent = make_rng(rng)
    return parent.spawn(1)[0]


def _num(x: Any) -> float | None:
    return None if x is None else float(x)
