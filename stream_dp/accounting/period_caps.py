"""The cap belongs to the period: a budget scope keeps the cap it was first charged under.

docs/privacy.md §1 promises, per budget period P, ε_P ≤ the cap its records state (``budget.epsilon_cap``).
If the cap travelled with each charge from the charging worker's config, a restart with a larger
``budget.epsilon`` would raise the cap of a period half spent -- after its records had told subscribers
otherwise. So the ledger's first write to a scope (a charge, a settlement or a reservation) stores the cap
it was checked against in the scope's own slot (``{ledger:<scope>}:cap``, :mod:`stream_dp.accounting.ledger`,
``lua/common.lua``), and every later operation of the scope is checked against that stored cap, whatever
the worker's config says:

- a worker whose config differs applies its cap from the next period on (the first charge of the next scope
  stores it) and logs that once per scope (:class:`CapNotices`);
- a charged period's cap is never raised -- nor lowered: the records of a period all state one cap;
- the ``lifetime`` scope is one scope for good, so its first charge fixes the lifetime cap for the
  deployment (changing it takes a new ledger: a new ``redis.key_prefix``);
- ``stream-dp budget verify`` reports a scope whose spend, recomputed from its event log, exceeds its stored
  cap (:func:`overspend_problems`).

The stored cap is a function of the config history (public) only, so every decision made under it depends
on public inputs and earlier published outcomes, as the privacy filter requires (docs/privacy.md §3).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stream_dp.accounting.budget import LIFETIME_SCOPE, BudgetCap, decide, reported_delta, reported_epsilon
from stream_dp.accounting.composition import Spent

log = logging.getLogger(__name__)

#: The fields of a scope's stored cap (the ``cap`` hash; the period's lifetime cap is kept for the record).
CAP_FIELDS = ("epsilon", "delta", "delta_prime")
LIFETIME_FIELDS = ("lifetime_epsilon", "lifetime_delta")


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def cap_name(scope: str) -> str:
    """The settings' prefix a scope's cap comes from: ``budget`` or, for the lifetime scope, ``budget.lifetime``."""
    return "budget.lifetime" if scope == LIFETIME_SCOPE else "budget"


def stored_cap(fields: Mapping[Any, Any] | None, scope: str) -> BudgetCap | None:
    """The cap stored for ``scope`` from its ``cap`` hash (bytes or str keys and values), None when the scope
    was never charged (or was charged before caps were stored: its first later write stores one).

    >>> stored_cap({b"epsilon": b"2.0", b"delta": b"1e-05", b"delta_prime": b"1e-07"}, "2026-11-29")
    BudgetCap(epsilon=2.0, delta=1e-05, delta_prime=1e-07, name='budget')
    >>> stored_cap({}, "lifetime") is None
    True
    """
    if not fields:
        return None
    data = {_text(k): _text(v) for k, v in fields.items()}
    if not all(name in data for name in CAP_FIELDS):
        return None
    return BudgetCap(float(data["epsilon"]), float(data["delta"]), float(data["delta_prime"]), name=cap_name(scope))


def same_cap(a: BudgetCap, b: BudgetCap) -> bool:
    """Whether two caps bind the same (ε, δ, δ′) (their setting names aside)."""
    return (a.epsilon, a.delta, a.delta_prime) == (b.epsilon, b.delta, b.delta_prime)


def protocol_cap(cap: BudgetCap, lifetime: BudgetCap | None = None) -> dict[str, float]:
    """The ``cap`` argument of a ledger operation (:mod:`stream_dp.accounting.ledger_args`): the cap a scope
    with no stored cap stores, plus -- for a period scope -- the lifetime cap in force, kept for the record
    (0 when there is none)."""
    out = {name: getattr(cap, name) for name in CAP_FIELDS}
    out["lifetime_epsilon"] = lifetime.epsilon if lifetime is not None else 0.0
    out["lifetime_delta"] = lifetime.delta if lifetime is not None else 0.0
    return out


def describe(cap: BudgetCap) -> str:
    """``budget.epsilon = 2, budget.delta = 1e-05, budget.delta_prime = 1e-07`` (the settings' names)."""
    return ", ".join(f"{cap.setting(name)} = {getattr(cap, name):g}" for name in CAP_FIELDS)


class CapNotices:
    """Logs, once per scope and process, that a scope keeps its stored cap although this worker's config
    says otherwise (a config change applies from the next period; never to a charged one)."""

    def __init__(self, *, quiet: bool = False) -> None:
        self._told: set[str] = set()
        self.quiet = quiet  # read-only tools (stream-dp budget) show the stored cap instead

    def note(self, scope: str, stored: BudgetCap, configured: BudgetCap) -> None:
        if self.quiet or scope in self._told or same_cap(stored, configured):
            return
        self._told.add(scope)
        when = ("for good: the lifetime scope's cap is fixed by its first charge (a new lifetime cap needs a "
                "new ledger, redis.key_prefix)") if scope == LIFETIME_SCOPE else \
            "from the next budget period on"
        log.warning("budget scope %s keeps the cap it was first charged under (%s); this worker's config "
                    "(%s) applies %s", scope, describe(stored), describe(configured), when)


def overspend_problems(spent: Spent, cap: BudgetCap | None, scope: str) -> list[str]:
    """What ``budget verify`` reports when ``spent`` (recomputed from the scope's event log) exceeds the
    scope's stored ``cap`` under the ledger's one decision rule (:func:`~stream_dp.accounting.budget.decide`);
    nothing when it fits or no cap is stored.

    >>> from stream_dp.accounting.composition import compose
    >>> from stream_dp.accounting.events import PureDpEvent
    >>> overspend_problems(compose([PureDpEvent(3.0)]), BudgetCap(2.0, 1e-5, 1e-7), "d")
    ['spent epsilon 3 exceeds the stored cap budget.epsilon = 2 of scope d']
    >>> overspend_problems(compose([PureDpEvent(1.0)]), BudgetCap(2.0, 1e-5, 1e-7), "d")
    []
    """
    if cap is None or decide(spent, cap) == "ok":
        return []
    eps, delta = reported_epsilon(spent, cap.delta_prime), reported_delta(spent, cap.delta_prime)
    out = []
    if not eps <= cap.epsilon:
        out.append(f"spent epsilon {eps:.6g} exceeds the stored cap {cap.setting('epsilon')} = {cap.epsilon:g} "
                   f"of scope {scope}")
    if not delta <= cap.delta:
        out.append(f"spent delta {delta:.6g} exceeds the stored cap {cap.setting('delta')} = {cap.delta:g} "
                   f"of scope {scope}")
    return out
