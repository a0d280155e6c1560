"""Composition of DP events: approximate zCDP and basic composition.

The ledger's currency is approximate zCDP (ρ, δ) (ALGORITHMS.md decision 1): composition adds ρ and δ;
the (ε, δ)-DP guarantee shown and capped is ε = ρ + 2·sqrt(ρ·ln(1/δ′)) with total δ = Σδ + δ′
(Bun & Steinke 2016, Prop. 1.3). Basic composition (Σε, Σδ) is tracked too; the reported ε is the
smaller valid one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from stream_dp.accounting.events import DpEvent


def zcdp_to_epsilon(rho: float, delta_prime: float) -> float:
    """ε of the (ε, δ′)-DP guarantee implied by ρ-zCDP: ρ + 2·sqrt(ρ·ln(1/δ′)).

    >>> round(zcdp_to_epsilon(0.5, 1e-6), 6)
    5.756522
    """
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    if not 0 < delta_prime < 1:
        raise ValueError(f"delta_prime must be in (0, 1), got {delta_prime!r}")
    return rho + 2 * math.sqrt(rho * math.log(1 / delta_prime))


@dataclass(frozen=True)
class Spent:
    """Composed totals of a set of events."""

    rho: float = 0.0
    zcdp_delta: float = 0.0
    basic_epsilon: float = 0.0
    basic_delta: float = 0.0

    def __add__(self, other: "Spent") -> "Spent":
        return Spent(
            self.rho + other.rho,
            self.zcdp_delta + other.zcdp_delta,
            self.basic_epsilon + other.basic_epsilon,
            self.basic_delta + other.basic_delta,
        )

    def epsilon(self, delta_prime: float) -> float:
        """The smallest valid ε of the two accountings, for total δ :meth:`delta` ``(delta_prime)``.

        Basic composition needs no δ′, but reporting one ε against one δ keeps the statement simple: the
        zCDP route gives (ε_z, Σδ + δ′), the basic route (Σε, Σδ) ⊆ (Σε, Σδ + δ′).
        """
        return min(zcdp_to_epsilon(self.rho, delta_prime), self.basic_epsilon)

    def delta(self, delta_prime: float) -> float:
        """Total δ of the guarantee: Σδ of the events plus the conversion δ′."""
        return max(self.zcdp_delta, self.basic_delta) + delta_prime


def compose(events: Iterable[DpEvent]) -> Spent:
    """Compose events by adding their (ρ, δ) and their basic (ε, δ).

    >>> from stream_dp.accounting.events import PureDpEvent
    >>> compose([PureDpEvent(1.0), PureDpEvent(1.0)]) == compose([PureDpEvent(1.0, count=2)])
    True
    """
    total = Spent()
    for event in events:
        rho, zdelta = event.zcdp()
        beps, bdelta = event.basic()
        total = total + Spent(rho, zdelta, beps, bdelta)
    return total
