"""Readable text for release records: what ``stream-dp tail`` and ``stream-dp demo`` print.

Reading the topic (schema check, de-duplication) is :mod:`stream_dp.client`; this module only renders.

A release record (schema_version 1, see ``config/release.schema.json``) is rendered as a header line
(window, type, status, mechanism), a table of its items, the release's cost and its budget period after it
(:mod:`stream_dp.budget_text`: what "cost" and "spent" mean, and their precision).
Items are shown with the columns they carry, so new release types render without code changes; known
types get a friendlier order and, for samples, a summary instead of every row.

>>> record = {"release_id": "1793577600-1793664000.topk", "schema_version": 1, "type": "topk",
...     "window": {"start": 1793577600, "end": 1793664000}, "status": "released",
...     "mechanism": {"name": "limited_domain_topk", "parameters": {"k": 3}},
...     "items": [{"rank": 1, "key": "318"}, {"rank": 2, "key": "296"}], "hit_bottom": True,
...     "cost": {"epsilon": 0.3, "delta": 1e-07, "events": []},
...     "budget": {"scope": "2026-11-02", "epsilon_spent": 2.5, "delta_spent": 1e-6,
...                "epsilon_remaining": 7.5, "delta_remaining": 9e-6}}
>>> print(format_release(record, color=False))
── 2026-11-02 00:00 → 2026-11-03 00:00 UTC · topk · released · limited_domain_topk (k=3)
  rank  key
  ----  ---
     1  318
     2  296
  ⊥ stopped early: the next key was not clearly above the rest
  cost ε 0.30 δ 1.0e-07 · budget [██████░░░░░░░░░░░░░░░░░░] 2026-11-02: ε 2.50 spent of 10.00, 7.50 left
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from stream_dp.budget_text import cost_text, spent_text

BAR_WIDTH = 24
PREFERRED_COLUMNS = ("rank", "key", "count", "ci_low", "ci_high", "above", "estimate", "lower_bound", "gap", "token",
                     "branch")


def _when(epoch: Any) -> str:
    try:
        return datetime.fromtimestamp(float(epoch), tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(epoch)


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3g}"
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def budget_bar(spent: float, remaining: float, width: int = BAR_WIDTH) -> str:
    """A text bar of the share of the budget spent.

    >>> budget_bar(2.5, 7.5, width=8)
    '[██░░░░░░]'
    """
    total = spent + remaining
    share = 0.0 if total <= 0 else min(max(spent / total, 0.0), 1.0)
    filled = int(round(share * width))
    return "[" + "█" * filled + "░" * (width - filled) + "]"


def table(rows: Sequence[Mapping[str, Any]], *, indent: str = "  ", max_rows: int | None = None) -> list[str]:
    """Rows of dicts as aligned text columns (preferred columns first, then the rest in first-seen order)."""
    if not rows:
        return []
    seen: list[str] = []
    for row in rows:
        for name in row:
            if name not in seen:
                seen.append(name)
    columns = [c for c in PREFERRED_COLUMNS if c in seen] + [c for c in seen if c not in PREFERRED_COLUMNS]
    shown = list(rows if max_rows is None else rows[:max_rows])
    cells = [[_fmt(row.get(c)) for c in columns] for row in shown]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]

    def line(values: Sequence[str], numeric: Sequence[bool]) -> str:
        return indent + "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    numeric = [all(isinstance(row.get(c), (int, float)) and not isinstance(row.get(c), bool)
                   for row in shown if row.get(c) is not None) for c in columns]
    out = [line(columns, numeric), line(["-" * w for w in widths], [False] * len(columns))]
    out += [line(r, numeric) for r in cells]
    if max_rows is not None and len(rows) > max_rows:
        out.append(f"{indent}… {len(rows) - max_rows} more")
    return out


def _items(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = []
    for i, item in enumerate(record.get("items") or [], start=1):
        if isinstance(item, Mapping):
            items.append(dict(item))
        else:
            items.append({"rank": i, "key": item})
    return items


def _mechanism(record: Mapping[str, Any]) -> str:
    mech = record.get("mechanism") or {}
    if not isinstance(mech, Mapping):
        return str(mech)
    params = mech.get("parameters") or {}
    inner = ", ".join(f"{k}={_fmt(v)}" for k, v in params.items()) if isinstance(params, Mapping) else ""
    return f"{mech.get('name', '?')}" + (f" ({inner})" if inner else "")


def format_release(record: Mapping[str, Any], *, color: bool = False, max_rows: int = 15,
                   delta_prime: float | None = None) -> str:
    """The release record as a few lines of text (see the module example); ``delta_prime``: the budget's δ′
    (``budget.delta_prime``), for the cost of a release on its own (:func:`~stream_dp.budget_text.release_epsilon`)."""
    window = record.get("window") or {}
    kind = record.get("type", "?")
    status = record.get("status", "?")
    bold, dim, red, reset = ("\033[1m", "\033[2m", "\033[31m", "\033[0m") if color else ("", "", "", "")
    status_text = f"{red}{status}{reset}" if status != "released" else status
    lines = [f"{bold}── {_when(window.get('start'))} → {_when(window.get('end'))} UTC · {kind} · "
             f"{reset}{status_text}{bold} · {_mechanism(record)}{reset}"]
    items = _items(record)
    if kind == "sample" and items:
        estimates: list[float] = [i["estimate"] for i in items if isinstance(i.get("estimate"), (int, float))]
        total = f", estimated total {_fmt(float(sum(estimates)))}" if estimates else ""
        lines.append(f"  {len(items)} sampled keys{total}; the largest estimates:")
        items = sorted(items, key=lambda i: -(i.get("estimate") or 0) if isinstance(i.get("estimate"), (int, float)) else 0)
        lines += table(items, max_rows=min(max_rows, 5))
    elif kind == "alerts" and items:
        above = [i for i in items if i.get("above")]
        lines.append(f"  {len(above)} of {len(items)} watched keys above the threshold")
        lines += table(above + [i for i in items if not i.get("above")], max_rows=max_rows)
    elif kind == "histogram" and items:
        info = record.get("info") or {}
        conf, half = info.get("confidence"), info.get("ci_half_width")
        sources = {i.get("source") for i in items}
        origin = f", all {items[0]['source']} keys" if len(sources) == 1 and items[0].get("source") else ""
        capped = " (capped at max_keys)" if info.get("capped") else ""
        interval = f"; intervals ±{_fmt(half)} at {_fmt(100 * conf)}%" if isinstance(conf, (int, float)) and half else ""
        lines.append(f"  {len(items):,} keys with a noisy count{origin}{capped}{interval}; the largest:")
        if origin:  # said once above instead of in every row
            items = [{k: v for k, v in i.items() if k != "source"} for i in items]
        lines += table(items, max_rows=max_rows)
    elif kind == "alerts" and status == "released" and (record.get("info") or {}).get("watchlist_size") == 0:
        lines.append("  no watched keys yet (the watchlist: configured keys plus keys top-k released earlier)")
    elif items:
        lines += table(items, max_rows=max_rows)
    elif status == "released":
        lines.append("  (no items)")
    info = record.get("info") or {}
    if kind == "alerts" and info.get("opened"):
        lines.append(f"  SVT instance {info.get('instance', '?')} opened in this window: charged its whole ε up front")
    if record.get("hit_bottom"):
        lines.append("  ⊥ stopped early: the next key was not clearly above the rest")
    if status == "budget_exhausted":
        lines.append(f"  {red}not released: the period's privacy budget cannot cover it{reset}")
    budget = record.get("budget") or {}
    tail = []
    if record.get("cost"):
        tail.append(cost_text(record, delta_prime))
    if budget:
        spent, left = budget.get("epsilon_spent"), budget.get("epsilon_remaining")
        bar = (budget_bar(spent, left) + " " if isinstance(spent, (int, float)) and isinstance(left, (int, float))
               else "")
        tail.append(f"budget {bar}{spent_text(budget)}")
    if tail:
        lines.append(f"  {dim}" + " · ".join(tail) + reset)
    return "\n".join(lines)


def decode(value: bytes | str) -> dict[str, Any] | None:
    """A release record from a Kafka record value, or None if it is not a JSON object."""
    try:
        obj = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def select(records: Iterable[Mapping[str, Any]], types: Sequence[str] | None) -> Iterable[Mapping[str, Any]]:
    """Only the records of the given release types (all when ``types`` is empty)."""
    for record in records:
        if not types or record.get("type") in types:
            yield record
