"""After Redis lost its state: which windows were released, written back from the releases topic.

The ledger is restored by :mod:`stream_dp.release.ledger_rebuild`; this restores the release worker's
bookkeeping that decides what it does next, from the same published records (public facts only):

- the **release schedule** (``Keys.schedule``), when it is gone: the configured ``windows.start``, or the
  first window on the topic; the size the records show (it must equal ``windows.size_seconds``);
- **which windows were released**: a window is released when every enabled release type has its record on
  the topic; those go into the released index, and the ``released_through`` cursor moves over the
  consecutive ones from the first window still on the topic (windows before it were released before it:
  windows are released in order). A window with only some records on the topic is left open: the worker
  revisits it, publishes the stored records again (restored, identical) and releases the missing types;
- the **watchlist** (keys first released by a ``topk`` record, for the alerts): ``ZADD NX`` by window.

- the **alerts instance**: its sparse-vector state is private and not on the topic, so the instance of the
  last alerts record is stored *closed* (with the number of instances its period opened, from the records'
  ``info.opened``): the next alerts release opens a new instance and pays for it, never resumes one whose
  answers since its last record are unknown.

Nothing here overwrites what Redis still holds for a later window (``SET NX``, ``ZADD NX``, a cursor only moved
forward, the alerts state by compare-and-set), so it is safe after a partial loss too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stream_dp.config import Config, parse_window_start
from stream_dp.schedule import layout_record
from stream_dp.store.keys import Keys
from stream_dp.release.alerts import AlertsStore, InstanceState
from stream_dp.release.types import REGISTRY


@dataclass
class WindowsRestored:
    released: int = 0
    cursor: int | None = None
    watchlist_keys: int = 0
    schedule_written: bool = False
    alerts_closed: bool = False

    def summary(self) -> str:
        cursor = "not moved" if self.cursor is None else f"released through window {self.cursor}"
        return (f"{self.released} windows marked released ({cursor}), {self.watchlist_keys} watchlist keys"
                + ("; release schedule written" if self.schedule_written else "")
                + ("; alerts instance closed (the next alerts release opens a new one)" if self.alerts_closed else ""))


def restore_windows(client: Any, cfg: Config, records: list[dict[str, Any]]) -> WindowsRestored:
    """Restore the schedule, the released windows and the watchlist from ``records`` (each release id's
    first record, :func:`~stream_dp.release.ledger_rebuild.first_records`)."""
    keys = Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout)
    out = WindowsRestored()
    if not records:
        return out
    size = cfg.windows.size_seconds
    types_by_window: dict[int, set[str]] = {}
    for r in records:
        start, end = int(r["window"]["start"]), int(r["window"]["end"])
        if end - start != size:
            raise ValueError(f"the releases topic holds window {start}-{end}, not of windows.size_seconds = {size}")
        types_by_window.setdefault(start, set()).add(str(r["type"]))
    first = min(types_by_window)
    configured = parse_window_start(cfg.windows.start)
    schedule = {"start": configured if configured is not None else first, "size": size,
                **layout_record(cfg.windows.shards, keys.layout)}
    out.schedule_written = bool(client.set(keys.schedule(), json.dumps(schedule), nx=True))
    wanted = set(cfg.releases.enabled())
    complete = sorted(w for w, types in types_by_window.items() if wanted <= types)
    if complete:
        client.zadd(keys.release_index("released"), {str(w): w for w in complete}, nx=True)
        out.released = len(complete)
    cursor = None
    w = first
    while w in types_by_window and wanted <= types_by_window[w]:
        cursor, w = w, w + size
    if cursor is not None:
        raw = client.get(keys.release_index("released_through"))
        if raw is None or int(raw) < cursor:
            client.set(keys.release_index("released_through"), str(cursor))
            out.cursor = cursor
    for r in records:
        if feeds_watchlist(r) and r["status"] == "released" and r["items"]:
            mapping = {str(item["key"]): int(r["window"]["start"]) for item in r["items"]}
            out.watchlist_keys += int(client.zadd(keys.release_index("watchlist"), mapping, nx=True))
    out.alerts_closed = close_alerts_instance(client, keys, [r for r in records if is_stateful(r)])
    return out


def close_alerts_instance(client: Any, keys: Keys, alerts: list[dict[str, Any]]) -> bool:
    """Store the instance of the last alerts record as closed (unless Redis holds a state of that window or
    later); True when stored."""
    if not alerts:
        return False
    last = max(alerts, key=lambda r: int(r["window"]["start"]))
    scope = str(last["budget"]["scope"])
    opened = sum(1 for r in alerts if r["budget"]["scope"] == scope and r["status"] == "released"
                 and (r.get("info") or {}).get("opened"))
    instance = int((last.get("info") or {}).get("instance") or 0)
    state = InstanceState(instance, scope, None, int(last["window"]["start"]), opened)
    return AlertsStore(client, keys=keys).advance(state)


def feeds_watchlist(record: dict[str, Any]) -> bool:
    """A record of a type whose released keys join the watchlist (:attr:`ReleaseType.feeds_watchlist`)."""
    release_type = REGISTRY.get(str(record["type"]))
    return release_type is not None and release_type.feeds_watchlist


def is_stateful(record: dict[str, Any]) -> bool:
    """A record of the stateful type (the alerts' SVT instance, :attr:`ReleaseType.stateful`)."""
    release_type = REGISTRY.get(str(record["type"]))
    return release_type is not None and release_type.stateful
