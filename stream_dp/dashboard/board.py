"""The dashboard's state: checked release records in, the views the page draws out. Pure (no I/O).

Every view is computed from published records only, so it shows nothing the releases topic does not:

- :meth:`ReleaseBoard.releases` -- records newest first (by window, then type), filtered by type and start;
- :meth:`ReleaseBoard.trending` -- the latest ranking of each ranked type (``topk``, ``histogram``,
  ``watch_topk``, ``argmax``, and any type whose items carry an ``interval``) with each key's rank change
  against the previous released window of that type, whether it was ever released before, its released
  count or estimate, its rank in each of the last N windows, the rising keys
  (:mod:`~stream_dp.dashboard.trends`: post-processing of released rankings only) and -- for a release with
  a public domain -- whether each key was tracked (a key of the window's domain, e.g. learned from earlier
  releases: ``source = "domain"``) or newly discovered, with the record's ``domain`` block;
- :meth:`ReleaseBoard.budget` -- per budget period (the records' ``budget.scope``), newest first: spent and
  remaining ε and δ after the latest charge, and the burn-down (each release's cost and the ε left after
  it, in charge order; :mod:`~stream_dp.dashboard.periods`);
- :meth:`ReleaseBoard.timeline` -- per window: each type's status (``released``, ``empty`` -- released with
  no items, e.g. a top-k that stopped at ⊥ before any key -- or ``budget_exhausted``).

>>> board = ReleaseBoard()
>>> def topk(start, keys):
...     return {"release_id": f"{start}-{start + 60}.topk", "window": {"start": start, "end": start + 60},
...             "type": "topk", "status": "released", "hit_bottom": True,
...             "items": [{"key": k, "rank": i + 1} for i, k in enumerate(keys)],
...             "budget": {"scope": "d", "epsilon_spent": 0.1, "epsilon_remaining": 0.9}}
>>> board.add(topk(0, ["a", "b"])), board.add(topk(60, ["b", "c", "a"])), board.add(topk(60, ["x"]))
(True, True, False)
>>> [(i["key"], i["rank"], i["change"], i["new"]) for i in board.trending()["rankings"][0]["items"]]
[('b', 1, 1, False), ('c', 2, None, True), ('a', 3, -2, False)]
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from stream_dp.dashboard.periods import period
from stream_dp.dashboard.trends import DEFAULT_HISTORY_WINDOWS, is_ranking, ranking, type_rank

DEFAULT_CAPACITY = 20_000  # records kept (the oldest windows are dropped first)

def _newest_first(record: Mapping[str, Any]) -> tuple[Any, ...]:
    w = record["window"]
    return (-w["start"], -w["end"], type_rank(record["type"]), record["release_id"])


def window_status(record: Mapping[str, Any]) -> str:
    """``budget_exhausted``, ``empty`` (released, no items) or ``released``."""
    if record["status"] != "released":
        return str(record["status"])
    return "released" if record.get("items") else "empty"


class ReleaseBoard:
    """Release records by id (a record seen again is ignored), and the views of the module docstring.

    Thread-safe: the subscriber thread adds, the web handlers read.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, delta_prime: float | None = None) -> None:
        self.capacity = capacity
        self.delta_prime = delta_prime  # budget.delta_prime: a release's cost on its own (stream_dp.budget_text)
        self._records: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.rejected = 0
        self.last_rejection: str | None = None

    def add(self, record: Mapping[str, Any]) -> bool:
        """Keep a checked record; False if its ``release_id`` is already here."""
        with self._lock:
            rid = record["release_id"]
            if rid in self._records:
                return False
            self._records[rid] = dict(record)
            if len(self._records) > self.capacity:
                oldest = max(self._records.values(), key=_newest_first)
                del self._records[oldest["release_id"]]
            return True

    def reject(self, reason: str) -> None:
        """Count a message the subscriber refused (shown by /healthz and on the page)."""
        with self._lock:
            self.rejected += 1
            self.last_rejection = reason

    def __len__(self) -> int:
        return len(self._records)

    def _snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return sorted(self._records.values(), key=_newest_first)

    # ---- views ------------------------------------------------------------------------------------
    def releases(self, *, type: str | None = None, since: int | None = None,
                 limit: int = 100) -> list[dict[str, Any]]:
        """Records newest first; only ``type``; only windows starting at or after ``since`` (epoch s)."""
        out = []
        for rec in self._snapshot():
            if type is not None and rec["type"] != type:
                continue
            if since is not None and rec["window"]["start"] < since:
                continue
            out.append(rec)
            if len(out) >= limit:
                break
        return out

    def trending(self, windows: int = DEFAULT_HISTORY_WINDOWS) -> dict[str, Any]:
        """The latest record of each ranking type, items with their rank change, their rank in each of the
        last ``windows`` windows, and the rising keys (:func:`~stream_dp.dashboard.trends.ranking`)."""
        by_type: dict[str, list[dict[str, Any]]] = {}
        for rec in self._snapshot():
            if is_ranking(rec):
                by_type.setdefault(rec["type"], []).append(rec)
        rankings = [ranking(history, windows=windows)
                    for _, history in sorted(by_type.items(), key=lambda kv: type_rank(kv[0]))]
        latest = max((r["window"] for r in rankings), key=lambda w: (w["start"], w["end"]), default=None)
        return {"window": latest, "rankings": rankings}

    def budget(self) -> dict[str, Any]:
        """Per budget period, newest first: the state after its latest charge and the ε burn-down."""
        periods: dict[str, list[dict[str, Any]]] = {}
        for rec in self._snapshot():
            block = rec.get("budget") or {}
            if isinstance(block.get("scope"), str):
                periods.setdefault(block["scope"], []).append(rec)
        out = [period(scope, recs, self.delta_prime) for scope, recs in periods.items()]
        out.sort(key=lambda p: p["first_window_start"], reverse=True)
        return {"periods": out}

    def timeline(self, limit: int = 48) -> list[dict[str, Any]]:
        """Windows newest first with each release type's status and the window's overall status."""
        windows: dict[tuple[int, int], dict[str, str]] = {}
        for rec in self._snapshot():
            key = (rec["window"]["start"], rec["window"]["end"])
            windows.setdefault(key, {})[rec["type"]] = window_status(rec)
        out = []
        for (start, end), types in list(windows.items())[:limit]:
            statuses = set(types.values())
            overall = ("released" if "released" in statuses else
                       "budget_exhausted" if "budget_exhausted" in statuses else "empty")
            out.append({"start": start, "end": end, "status": overall,
                        "types": dict(sorted(types.items(), key=lambda kv: type_rank(kv[0])))})
        return out

