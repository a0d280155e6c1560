"""The budget cap of a ledger scope and the one decision rule the ledger enforces.

A scope's guarantee is reported and capped as (ε, δ)-DP for each user:

- ε = min(ρ + 2·sqrt(ρ·ln(1/δ′)), Σε)  -- the smaller of the zCDP conversion (Bun & Steinke 2016,
  Prop. 1.3) and basic composition; both are valid, so the smaller one is;
- δ = max(Σδ_zCDP, Σδ_basic) + δ′      -- δ′ is committed up front, so it counts even for an empty scope.

A charge is accepted iff, with everything already charged, every open reservation and the new cost added,
ε ≤ cap.epsilon and δ ≤ cap.delta. :func:`decide` is the reference implementation; the ledger's Lua
scripts compute the same IEEE-754 expression in the same order (tests check they agree near the boundary).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stream_dp.accounting.composition import Spent, compose, zcdp_to_epsilon
from stream_dp.accounting.events import DpEvent
from stream_dp.errors import ConfigError

LIFETIME_SCOPE = "lifetime"

# Reasons a charge is refused (bounded values: usable as metric labels).
REASON_OK = "ok"
REASON_EPSILON = "epsilon_cap"
REASON_DELTA = "delta_cap"


@dataclass(frozen=True)
class BudgetCap:
    """(ε, δ) cap of one scope, δ including the conversion δ′ (BudgetConfig: budget.epsilon, .delta, .delta_prime).

    >>> BudgetCap(1.0, 1e-5, 1e-7).epsilon
    1.0
    """

    epsilon: float
    delta: float
    delta_prime: float
    name: str = "budget"  # "budget" (period cap) or "budget.lifetime": for the settings named in errors

    def setting(self, field: str) -> str:
        """The config setting behind a field: ``budget.epsilon``, ``budget.lifetime_epsilon``…"""
        if self.name == "budget.lifetime" and field != "delta_prime":
            return f"budget.lifetime_{field}"
        return f"budget.{field}" if self.name.startswith("budget") else f"{self.name}.{field}"

    def __post_init__(self) -> None:
        def bad(field: str, allowed: str, value: Any) -> ConfigError:
            return ConfigError(f"{self.setting(field)} must be {allowed}, got {value!r}")

        for setting in ("epsilon", "delta", "delta_prime"):
            value = getattr(self, setting)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise bad(setting, "a number", value)
            object.__setattr__(self, setting, float(value))
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise bad("epsilon", "a finite number > 0", self.epsilon)
        if not 0 < self.delta < 1:
            raise bad("delta", "in (0, 1)", self.delta)
        if not 0 < self.delta_prime < self.delta:
            raise bad("delta_prime", f"in (0, {self.setting('delta')} = {self.delta})", self.delta_prime)

    @classmethod
    def from_config(cls, budget: Any) -> "BudgetCap":
        """The period cap from a :class:`stream_dp.config.BudgetConfig`."""
        return cls(budget.epsilon, budget.delta, budget.delta_prime)

    @classmethod
    def lifetime_from_config(cls, budget: Any) -> "BudgetCap | None":
        """The lifetime cap (budget.lifetime_epsilon, budget.lifetime_delta or else budget.delta, same δ′),
        or None when budget.lifetime_epsilon is 0 (off). The config has checked the ranges."""
        if budget.lifetime_epsilon == 0:
            return None
        return cls(budget.lifetime_epsilon, budget.lifetime_delta or budget.delta, budget.delta_prime,
                   name="budget.lifetime")

    def to_dict(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta, "delta_prime": self.delta_prime}


def reported_epsilon(spent: Spent, delta_prime: float) -> float:
    """ε of a scope's guarantee, evaluated exactly as the Lua scripts do (same operations, same order)."""
    return min(zcdp_to_epsilon(spent.rho, delta_prime), spent.basic_epsilon)


def reported_delta(spent: Spent, delta_prime: float) -> float:
    """δ of a scope's guarantee: max(Σδ_zCDP, Σδ_basic) + δ′ (as the Lua scripts compute it)."""
    return max(spent.zcdp_delta, spent.basic_delta) + delta_prime


def decide(total: Spent, cap: BudgetCap) -> str:
    """:data:`REASON_OK` if ``total`` (everything charged + reserved + the new cost) fits ``cap``.

    >>> from stream_dp.accounting.events import PureDpEvent
    >>> decide(compose([PureDpEvent(1.0)]), BudgetCap(1.0, 1e-5, 1e-7))
    'ok'
    >>> decide(compose([PureDpEvent(1.0, count=2)]), BudgetCap(1.0, 1e-5, 1e-7))
    'epsilon_cap'
    """
    if not reported_epsilon(total, cap.delta_prime) <= cap.epsilon:
        return REASON_EPSILON
    if not reported_delta(total, cap.delta_prime) <= cap.delta:
        return REASON_DELTA
    return REASON_OK


def check_budget_covers(cap: BudgetCap, events: Iterable[DpEvent]) -> None:
    """Startup check: one worst-case release (``events``) must fit into an empty scope under ``cap``.

    Raises :class:`ConfigError` naming the cap setting that is too small, so a misconfigured service
    refuses to start instead of refusing every release.

    >>> from stream_dp.accounting.events import PureDpEvent
    >>> check_budget_covers(BudgetCap(0.5, 1e-5, 1e-7), [PureDpEvent(1.0)])
    Traceback (most recent call last):
    ...
    stream_dp.errors.ConfigError: budget.epsilon = 0.5 is smaller than one release costs (epsilon 1 ...)
    """
    events = list(events)
    spent = compose(events)
    eps = reported_epsilon(spent, cap.delta_prime)
    delta = reported_delta(spent, cap.delta_prime)
    reason = decide(spent, cap)
    if reason == REASON_EPSILON:
        raise ConfigError(f"{cap.setting('epsilon')} = {cap.epsilon:g} is smaller than one release costs "
                          f"(epsilon {eps:.6g} for {len(events)} event(s))")
    if reason == REASON_DELTA:
        raise ConfigError(f"{cap.setting('delta')} = {cap.delta:g} is smaller than one release costs "
                          f"(delta {delta:.6g} incl. budget.delta_prime = {cap.delta_prime:g})")


def scope_for(event_time_seconds: float, period_seconds: int) -> str:
    """The budget scope (period bucket) of an event time: periods are aligned to the Unix epoch.

    A one-day period is named by its UTC date; other periods by their start epoch.

    >>> scope_for(1795950000, 86400)
    '2026-11-29'
    >>> scope_for(1795950000, 3600)
    'p1795950000'
    """
    if isinstance(period_seconds, bool) or not isinstance(period_seconds, int) or period_seconds < 1:
        raise ValueError(f"period_seconds must be an integer >= 1, got {period_seconds!r}")
    if not math.isfinite(event_time_seconds):
        raise ValueError(f"event_time_seconds must be finite, got {event_time_seconds!r}")
    start = int(math.floor(event_time_seconds / period_seconds)) * period_seconds
    if period_seconds == 86400:
        return datetime.fromtimestamp(start, tz=timezone.utc).strftime("%Y-%m-%d")
    return f"p{start}"
