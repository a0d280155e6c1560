"""The dashboard's state: checked release records in, the views the page draws out. Pure (no I/O).

Every view is computed from published records only, so it shows nothing the releases topic does not:

- :meth:`ReleaseBoard.releases` -- records newest first (by window, then type), filtered by type and start;
- :meth:`ReleaseBoard.trending` -- the latest ranking of each ranked type (``topk``, ``watch_topk``,
  ``argmax``, and any type whose items carry an ``interval``, e.g. ``histogram``) with each key's rank
  change against the previous released window of that type, whether the key was ever released before and --
  for a release with a public domain -- whether it was tracked (a key of the window's domain, e.g. learned from
  earlier releases: ``source = "domain"``) or newly discovered, with the record's ``domain`` block;
- :meth:`ReleaseBoard.budget` -- per budget period (the records' ``budget.scope``): spent and remaining ε
  and δ after the latest charge, and the burn-down (ε remaining after each release, in charge order);
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

import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

# types shown as rankings whatever their items carry; any type whose items carry an "interval" is too
RANKED_TYPES = ("topk", "histogram", "watch_topk", "argmax")
TYPE_ORDER = ("topk", "histogram", "alerts", "sample", "watch_topk", "argmax")
DEFAULT_CAPACITY = 20_000  # records kept (the oldest windows are dropped first)


def _type_rank(rtype: str) -> int:
    return TYPE_ORDER.index(rtype) if rtype in TYPE_ORDER else len(TYPE_ORDER)


def _newest_first(record: Mapping[str, Any]) -> tuple[Any, ...]:
    w = record["window"]
    return (-w["start"], -w["end"], _type_rank(record["type"]), record["release_id"])


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def interval_of(item: Mapping[str, Any]) -> dict[str, float] | None:
    """An item's interval as ``{"lower", "upper"}``: from ``interval`` given as ``[lo, hi]`` or as a mapping
    with ``lower``/``upper`` (or ``low``/``high``), else from ``lower_bound``/``upper_bound`` or a histogram's ``ci_low``/``ci_high``; None if none.

    >>> interval_of({"interval": [1, 3.5]}), interval_of({"interval": {"low": 2, "high": 4}})
    ({'lower': 1.0, 'upper': 3.5}, {'lower': 2.0, 'upper': 4.0})
    >>> interval_of({"key": "k", "count": 40, "ci_low": 31, "ci_high": 49})  # a histogram item
    {'lower': 31.0, 'upper': 49.0}
    """
    raw = item.get("interval")
    lo = hi = None
    if isinstance(raw, (list, tuple)) and len(raw) == 2:
        lo, hi = _number(raw[0]), _number(raw[1])
    elif isinstance(raw, Mapping):
        lo = _number(raw.get("lower", raw.get("low")))
        hi = _number(raw.get("upper", raw.get("high")))
    elif raw is None and ("lower_bound" in item or "upper_bound" in item):
        lo, hi = _number(item.get("lower_bound")), _number(item.get("upper_bound"))
    elif raw is None and ("ci_low" in item or "ci_high" in item):  # a histogram item
        lo, hi = _number(item.get("ci_low")), _number(item.get("ci_high"))
    if lo is None and hi is None:
        return None
    return {"lower": lo, "upper": hi}  # type: ignore[dict-item]


def is_ranking(record: Mapping[str, Any]) -> bool:
    """Whether the record is a ranking: a ranked type, or items that carry intervals (histogram-like)."""
    return record["type"] in RANKED_TYPES or any(
        isinstance(i, Mapping) and "interval" in i for i in record.get("items") or [])


def ranked_items(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record's items, best first, each with a ``rank`` (given, else by estimate, largest first)."""
    items = [dict(i) for i in record.get("items") or [] if isinstance(i, Mapping) and "key" in i]
    if all(isinstance(i.get("rank"), int) for i in items):
        return sorted(items, key=lambda i: i["rank"])
    items.sort(key=lambda i: -(_number(i.get("estimate", i.get("count"))) or 0.0))
    for n, item in enumerate(items, start=1):
        item["rank"] = n
    return items


def window_status(record: Mapping[str, Any]) -> str:
    """``budget_exhausted``, ``empty`` (released, no items) or ``released``."""
    if record["status"] != "released":
        return str(record["status"])
    return "released" if record.get("items") else "empty"


class ReleaseBoard:
    """Release records by id (a record seen again is ignored), and the views of the module docstring.

    Thread-safe: the subscriber thread adds, the web handlers read.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
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

    def trending(self) -> dict[str, Any]:
        """The latest record of each ranking type, items with their rank change (see the module docstring)."""
        by_type: dict[str, list[dict[str, Any]]] = {}
        for rec in self._snapshot():
            if is_ranking(rec):
                by_type.setdefault(rec["type"], []).append(rec)
        rankings = [_ranking(history) for _, history in sorted(by_type.items(), key=lambda kv: _type_rank(kv[0]))]
        latest = max((r["window"] for r in rankings), key=lambda w: (w["start"], w["end"]), default=None)
        return {"window": latest, "rankings": rankings}

    def budget(self) -> dict[str, Any]:
        """Per budget period, newest first: the state after its latest charge and the ε burn-down."""
        periods: dict[str, list[dict[str, Any]]] = {}
        for rec in self._snapshot():
            block = rec.get("budget") or {}
            if isinstance(block.get("scope"), str):
                periods.setdefault(block["scope"], []).append(rec)
        out = [_period(scope, recs) for scope, recs in periods.items()]
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
                        "types": dict(sorted(types.items(), key=lambda kv: _type_rank(kv[0])))})
        return out


def _ranking(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest record of ``history`` (one type, newest first) with rank changes against the others."""
    latest = history[0]
    earlier = [r for r in history[1:] if r["status"] == "released" and r["window"]["start"] < latest["window"]["start"]]
    previous = {i["key"]: i["rank"] for i in ranked_items(earlier[0])} if earlier else {}
    ever = {i["key"] for rec in earlier for i in rec.get("items") or [] if isinstance(i, Mapping)}
    items = []
    for item in ranked_items(latest):
        prev = previous.get(item["key"])
        out = {**item, "previous_rank": prev, "change": None if prev is None else prev - item["rank"],
               "new": item["key"] not in ever}
        if item.get("source") in ("domain", "discovered"):  # a release with a public domain says which
            out["tracked"] = item["source"] == "domain"
        interval = interval_of(item)
        if interval is not None:
            out["interval"] = interval
        items.append(out)
    return {"type": latest["type"], "release_id": latest["release_id"], "window": latest["window"],
            "status": latest["status"], "hit_bottom": latest.get("hit_bottom"),
            "mechanism": latest.get("mechanism"), "items": items, "domain": latest.get("domain"),
            "compared_with": earlier[0]["window"] if earlier else None, "windows_before": len(earlier)}


def _period(scope: str, records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One budget period: charge-ordered points (spent only grows within a period) and its latest state."""
    recs = sorted(records, key=lambda r: (_number(r["budget"].get("epsilon_spent")) or 0.0,
                                          _number(r["budget"].get("delta_spent")) or 0.0,
                                          r["window"]["start"], _type_rank(r["type"])))
    last = recs[-1]["budget"]
    spent, left = _number(last.get("epsilon_spent")) or 0.0, _number(last.get("epsilon_remaining")) or 0.0
    cap = _number(last.get("epsilon_cap")) or spent + left
    dspent, dleft = _number(last.get("delta_spent")) or 0.0, _number(last.get("delta_remaining")) or 0.0
    return {
        "scope": scope, "epsilon_cap": cap, "epsilon_spent": spent, "epsilon_remaining": left,
        "delta_cap": _number(last.get("delta_cap")) or dspent + dleft, "delta_spent": dspent,
        "delta_remaining": dleft, "releases": len(recs),
        "budget_exhausted": sum(1 for r in recs if r["status"] == "budget_exhausted"),
        "first_window_start": min(r["window"]["start"] for r in recs),
        "points": [{"release_id": r["release_id"], "type": r["type"], "status": r["status"],
                    "window_start": r["window"]["start"],
                    "epsilon_spent": _number(r["budget"].get("epsilon_spent")),
                    "epsilon_remaining": _number(r["budget"].get("epsilon_remaining"))} for r in recs],
    }
