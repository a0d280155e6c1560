"""How a release's cost and a period's budget read: one meaning and one precision for ``stream-dp tail``, the
demo, the dashboard and ``stream-dp budget``.

Two numbers, never mixed up:

- **cost** -- what one release costs *on its own*: the ε the ledger would report for its DP events alone,
  the smaller of its two accountings (basic composition Σε; approximate zCDP ρ converted at the budget's δ′,
  :func:`~stream_dp.accounting.composition.zcdp_to_epsilon`). So a first release of a period costs exactly
  what the period has then spent (seven top-k outcomes at ε 0.1: Σε 0.70, but ρ = 7 · 0.1²/8 converts to
  0.64, and 0.64 is what both read). A zCDP-only release (the Gaussian histogram) has no Σε: its cost is its ρ
  converted -- the ε it was calibrated to. δ′ is the one the record's mechanism parameters name, else the
  reader's ``budget.delta_prime`` (the ledger's; the record does not carry it), else unknown: then Σε.
- **spent** -- what the budget period has used *after* the release: the ledger's ε of everything charged
  in the period so far, composed (the same smaller-of-two rule over the period's total ρ and Σε), including
  any hold reserved before it (an alerts instance that opens in the same window reserves its ε first).

So a period's spent is **not** the sum of its releases' costs: zCDP composition adds ρ, not ε, and makes a
period of many releases cheaper than adding their ε up -- while one zCDP release in a period of pure-ε ones
moves the period from Σε to the ρ conversion, which can raise spent by more than that release's own cost
(docs/privacy.md §3). Both are ε, printed with :func:`epsilon_text` (two decimals); δ with
:func:`delta_text` (two significant digits). The dashboard's script mirrors both functions
(``static/dashboard.js``: ``fmtEps``, ``fmtDelta``).

>>> record = {"cost": {"epsilon": 0.4, "delta": 1e-07, "rho": 0.005},
...           "budget": {"scope": "2026-11-03", "epsilon_spent": 0.9, "epsilon_remaining": 9.1,
...                      "epsilon_cap": 10.0, "delta_spent": 2e-07, "delta_remaining": 9.8e-06}}
>>> cost_text(record)
'cost ε 0.40 δ 1.0e-07'
>>> spent_text(record["budget"])
'2026-11-03: ε 0.90 spent of 10.00, 9.10 left'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stream_dp.accounting.composition import zcdp_to_epsilon

EPSILON_DECIMALS = 2


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def release_epsilon(record: Mapping[str, Any], delta_prime: float | None = None) -> float | None:
    """A release's cost: the ε of its DP events alone (see the module docstring), with the δ′ its mechanism
    parameters name, else ``delta_prime`` (the reader's ``budget.delta_prime``); None when neither Σε nor a δ′
    is known.

    >>> topk = {"cost": {"epsilon": 0.7, "rho": 0.00875}}  # seven outcomes at ε 0.1
    >>> release_epsilon(topk), round(release_epsilon(topk, 1e-07), 2)
    (0.7, 0.64)
    >>> release_epsilon({"cost": {"epsilon": 0.5, "rho": 0.125}}, 1e-07)  # SVT: Σε is the smaller
    0.5
    >>> round(release_epsilon({"cost": {"epsilon": None, "rho": 0.0202},
    ...                        "mechanism": {"parameters": {"delta_prime": 1e-07}}}), 2)
    1.0
    >>> release_epsilon({"cost": {"epsilon": None, "rho": 0.02}, "mechanism": {"parameters": {}}}) is None
    True
    """
    cost = record.get("cost") or {}
    basic = _number(cost.get("epsilon"))
    rho = _number(cost.get("rho"))
    params = (record.get("mechanism") or {}).get("parameters") or {}
    named = _number(params.get("delta_prime")) if isinstance(params, Mapping) else None
    delta_prime = named if named is not None else _number(delta_prime)
    converted = (zcdp_to_epsilon(rho, delta_prime) if rho is not None and delta_prime is not None
                 and 0 < delta_prime < 1 else None)
    known = [x for x in (basic, converted) if x is not None]
    return min(known) if known else None


def epsilon_text(value: Any) -> str:
    """ε with two decimals; a positive ε below 0.005 as ``<0.01`` (never a misleading 0.00); ``–`` if unknown.

    >>> [epsilon_text(x) for x in (0.643, 10, 0.004, 0, None, float("inf"))]
    ['0.64', '10.00', '<0.01', '0.00', '–', '∞']
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == math.inf:
        return "∞"
    x = _number(value)
    if x is None:
        return "–"
    if 0 < x < 0.5 * 10 ** -EPSILON_DECIMALS:
        return "<0.01"
    return f"{x:.{EPSILON_DECIMALS}f}"


def delta_text(value: Any) -> str:
    """δ in scientific notation with two significant digits; 0 as ``0``.

    >>> [delta_text(x) for x in (2e-07, 9.8e-06, 0, None)]
    ['2.0e-07', '9.8e-06', '0', '–']
    """
    x = _number(value)
    if x is None:
        return "–"
    return "0" if x == 0 else f"{x:.1e}"


def cost_text(record: Mapping[str, Any], delta_prime: float | None = None) -> str:
    """``cost ε … δ …`` of one release (its cost on its own, :func:`release_epsilon`)."""
    cost = record.get("cost") or {}
    return f"cost ε {epsilon_text(release_epsilon(record, delta_prime))} δ {delta_text(cost.get('delta'))}"


def spent_text(budget: Mapping[str, Any]) -> str:
    """``<period>: ε … spent of …, … left`` from a record's ``budget`` block (the period after the release)."""
    spent, left = _number(budget.get("epsilon_spent")), _number(budget.get("epsilon_remaining"))
    cap = _number(budget.get("epsilon_cap"))
    if cap is None and spent is not None and left is not None:
        cap = spent + left
    return (f"{budget.get('scope', '?')}: ε {epsilon_text(spent)} spent of {epsilon_text(cap)}, "
            f"{epsilon_text(left)} left")
