"""Budget periods as the dashboard shows them, from the records' ``budget`` blocks and ``cost`` (published only).

Each record says what its release cost on its own and what its budget period had spent right after it
(:mod:`stream_dp.budget_text`: one meaning of "cost" and "spent" for the dashboard, tail, the demo and
``stream-dp budget``). A period's points are put in charge order -- spent only grows within a period -- so
they draw its burn-down: ε left after each release.

>>> def rec(start, rtype, spent, cost):
...     return {"release_id": f"{start}.{rtype}", "type": rtype, "status": "released",
...             "window": {"start": start, "end": start + 60}, "cost": {"epsilon": cost, "delta": 0.0},
...             "budget": {"scope": "d", "epsilon_spent": spent, "epsilon_remaining": 10 - spent,
...                        "epsilon_cap": 10.0, "delta_spent": 0.0, "delta_remaining": 1e-5}}
>>> p = period("d", [rec(0, "sample", 0.9, 0.5), rec(0, "topk", 0.4, 0.4)])
>>> [(q["type"], q["cost_epsilon"], q["epsilon_spent"]) for q in p["points"]]
[('topk', 0.4, 0.4), ('sample', 0.5, 0.9)]
>>> p["epsilon_spent"], p["epsilon_remaining"], p["epsilon_cap"]
(0.9, 9.1, 10.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stream_dp.budget_text import release_epsilon
from stream_dp.dashboard.trends import number, type_rank


def _charge_order(record: dict[str, Any]) -> tuple[Any, ...]:
    b = record["budget"]
    return (number(b.get("epsilon_spent")) or 0.0, number(b.get("delta_spent")) or 0.0, record["window"]["start"],
            type_rank(record["type"]))


def period(scope: str, records: Iterable[dict[str, Any]], delta_prime: float | None = None) -> dict[str, Any]:
    """One budget period: its state after the latest charge and its charge-ordered points (``delta_prime``: the
    budget's δ′, for each release's cost on its own)."""
    recs = sorted(records, key=_charge_order)
    last = recs[-1]["budget"]
    spent, left = number(last.get("epsilon_spent")) or 0.0, number(last.get("epsilon_remaining")) or 0.0
    cap = number(last.get("epsilon_cap")) or spent + left
    dspent, dleft = number(last.get("delta_spent")) or 0.0, number(last.get("delta_remaining")) or 0.0
    return {
        "scope": scope, "epsilon_cap": cap, "epsilon_spent": spent, "epsilon_remaining": left,
        "delta_cap": number(last.get("delta_cap")) or dspent + dleft, "delta_spent": dspent,
        "delta_remaining": dleft, "releases": len(recs),
        "budget_exhausted": sum(1 for r in recs if r["status"] == "budget_exhausted"),
        "first_window_start": min(r["window"]["start"] for r in recs),
        "last_window_end": max(r["window"]["end"] for r in recs),
        "points": [{"release_id": r["release_id"], "type": r["type"], "status": r["status"],
                    "window_start": r["window"]["start"], "cost_epsilon": release_epsilon(r, delta_prime),
                    "epsilon_spent": number(r["budget"].get("epsilon_spent")),
                    "epsilon_remaining": number(r["budget"].get("epsilon_remaining"))} for r in recs],
    }
