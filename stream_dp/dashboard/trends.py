"""Rankings over time, from published records only: rank changes, each key's rank history, rising keys.

Everything here is **post-processing** of released records (the ranks, counts and estimates a subscriber
reads on the releases topic): it costs no privacy budget and reveals nothing the records do not. A key
that is not in a window's released ranking has *no* rank there (``None``) -- not "rank k + 1", since the
ranking says nothing about where an unreleased key stood, only that it was not clearly above the rest.

- :func:`ranking` -- the newest record of one type with, per key, the change against the previous
  *released* window of that type (``previous_rank``, ``change``, ``new``: never released before), its
  released value (a histogram's noisy ``count``, or an ``estimate``) and its interval, and ``history``: its
  rank in each of the last ``windows`` windows of that type (oldest first, ``None`` where it was not
  released, or the window was not); for a release with a public domain (its record's ``domain`` block, passed
  on as ``domain``) each key is ``tracked`` (its item's ``source`` is ``"domain"``: a key of the window's
  domain, e.g. learned from earlier releases) or not (``"discovered"``: found outside it);
- ``rising`` -- the keys that climbed most within the top :data:`RISING_HORIZON` ranks since the previous
  released window: ``climb`` = the previous rank minus the current one, where a key that was not in the
  previous ranking's top :data:`RISING_HORIZON` (absent, or ranked lower) enters from just below it (that is
  all the previous release says about it, and a histogram over a large domain would otherwise make every
  key that hops into the list from rank 1,000 the top riser). Ties go to the larger rise of the released
  value when both windows carry one, then to the better rank.

>>> def rec(start, keys):
...     return {"release_id": f"{start}.topk", "type": "topk", "status": "released", "hit_bottom": True,
...             "window": {"start": start, "end": start + 60},
...             "items": [{"key": k, "rank": i + 1} for i, k in enumerate(keys)]}
>>> r = ranking([rec(120, ["c", "a", "b"]), rec(60, ["a", "b"]), rec(0, ["b"])], windows=3)
>>> [(i["key"], i["history"]) for i in r["items"]]
[('c', [None, None, 1]), ('a', [None, 1, 2]), ('b', [1, 2, 3])]
>>> [(x["key"], x["climb"], x["from_rank"]) for x in r["rising"]]
[('c', 2, None)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# types shown as rankings whatever their items carry; any type whose items carry an "interval" is too
RANKED_TYPES = ("topk", "histogram", "watch_topk", "argmax")
TYPE_ORDER = ("topk", "histogram", "alerts", "sample", "watch_topk", "argmax")  # how lists order release types
DEFAULT_HISTORY_WINDOWS = 12
RISING_SHOWN = 5
RISING_HORIZON = 20  # ranks that count for rising: a climb from below them counts from rank 21


def type_rank(rtype: str) -> int:
    """Where a release type goes in lists: :data:`TYPE_ORDER`, unknown types last."""
    return TYPE_ORDER.index(rtype) if rtype in TYPE_ORDER else len(TYPE_ORDER)


def number(value: Any) -> float | None:
    """A finite int or float as float, else None (bools are not numbers here)."""
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
        lo, hi = number(raw[0]), number(raw[1])
    elif isinstance(raw, Mapping):
        lo = number(raw.get("lower", raw.get("low")))
        hi = number(raw.get("upper", raw.get("high")))
    elif raw is None and ("lower_bound" in item or "upper_bound" in item):
        lo, hi = number(item.get("lower_bound")), number(item.get("upper_bound"))
    elif raw is None and ("ci_low" in item or "ci_high" in item):  # a histogram item
        lo, hi = number(item.get("ci_low")), number(item.get("ci_high"))
    if lo is None and hi is None:
        return None
    return {"lower": lo, "upper": hi}  # type: ignore[dict-item]


def value_of(item: Mapping[str, Any]) -> float | None:
    """The number a ranked item was released with: a histogram's noisy ``count``, else an ``estimate``."""
    return number(item.get("count", item.get("estimate")))


def is_ranking(record: Mapping[str, Any]) -> bool:
    """Whether the record is a ranking: a ranked type, or items that carry intervals (histogram-like)."""
    return record["type"] in RANKED_TYPES or any(
        isinstance(i, Mapping) and "interval" in i for i in record.get("items") or [])


def ranked_items(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record's items, best first, each with a ``rank`` (given, else by value, largest first)."""
    items = [dict(i) for i in record.get("items") or [] if isinstance(i, Mapping) and "key" in i]
    if all(isinstance(i.get("rank"), int) for i in items):
        return sorted(items, key=lambda i: i["rank"])
    items.sort(key=lambda i: -(value_of(i) or 0.0))
    for n, item in enumerate(items, start=1):
        item["rank"] = n
    return items


def ranking(history: Sequence[Mapping[str, Any]], *, windows: int = DEFAULT_HISTORY_WINDOWS) -> dict[str, Any]:
    """The newest record of ``history`` (one type, newest first) with rank changes, rank histories over the
    last ``windows`` records of the type, and the rising keys (see the module docstring)."""
    latest = history[0]
    earlier = [r for r in history[1:] if r["status"] == "released" and r["window"]["start"] < latest["window"]["start"]]
    before = ranked_items(earlier[0]) if earlier else []
    previous = {i["key"]: i for i in before}
    ever = {i["key"] for rec in earlier for i in rec.get("items") or [] if isinstance(i, Mapping)}
    shown = list(reversed(history[:windows]))  # oldest first, the latest last
    ranks = [{i["key"]: i["rank"] for i in ranked_items(r)} if r["status"] == "released" else {} for r in shown]
    items = []
    for item in ranked_items(latest):
        prev = previous.get(item["key"])
        prev_rank = prev["rank"] if prev else None
        out = {**item, "previous_rank": prev_rank, "change": None if prev_rank is None else prev_rank - item["rank"],
               "new": item["key"] not in ever, "value": value_of(item),
               "history": [r.get(item["key"]) for r in ranks]}
        if item.get("source") in ("domain", "discovered"):  # a release with a public domain says which
            out["tracked"] = item["source"] == "domain"
        interval = interval_of(item)
        if interval is not None:
            out["interval"] = interval
        items.append(out)
    return {"type": latest["type"], "release_id": latest["release_id"], "window": latest["window"],
            "status": latest["status"], "hit_bottom": latest.get("hit_bottom"),
            "mechanism": latest.get("mechanism"), "items": items, "domain": latest.get("domain"),
            "compared_with": earlier[0]["window"] if earlier else None, "windows_before": len(earlier),
            "history_windows": [{**r["window"], "status": r["status"]} for r in shown],
            "rising": rising(items, previous, len(before)) if earlier else []}


def rising(items: Sequence[Mapping[str, Any]], previous: Mapping[str, Mapping[str, Any]],
           previous_length: int, shown: int = RISING_SHOWN, horizon: int = RISING_HORIZON) -> list[dict[str, Any]]:
    """The ``shown`` keys of ``items`` that climbed most within the top ``horizon`` ranks against ``previous``
    (key → item of the previous released ranking, which held ``previous_length`` keys); only keys that
    climbed. ``from_rank`` is None for a key that entered (not in the previous ranking's top ``horizon``)."""
    below = min(previous_length, horizon) + 1  # where a key enters from
    out = []
    for item in items:
        prev = previous.get(item["key"])
        start = prev["rank"] if prev and prev["rank"] < below else below
        climb = start - item["rank"]
        if climb <= 0:
            continue
        before, now = (value_of(prev) if prev else None), item.get("value")
        out.append({"key": item["key"], "rank": item["rank"], "climb": climb,
                    "from_rank": start if start < below else None,
                    "value_change": now - before if now is not None and before is not None else None})
    out.sort(key=lambda x: (-x["climb"], -(x["value_change"] or 0.0), x["rank"]))
    return out[:shown]
