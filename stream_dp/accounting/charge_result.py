"""The result of a ledger operation (charge, reserve, settle): :class:`ChargeResult`, and the ``budget`` block
of a release record it makes (:meth:`ChargeResult.budget_block`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stream_dp.accounting.budget import REASON_DELTA, REASON_EPSILON, BudgetCap
from stream_dp.accounting.composition import Spent

EXHAUSTED_REASONS = frozenset({REASON_EPSILON, REASON_DELTA, f"lifetime_{REASON_EPSILON}",
                               f"lifetime_{REASON_DELTA}"})


@dataclass(frozen=True)
class ChargeResult:
    """Outcome of charge / reserve / settle. ``spent`` counts committed charges plus open reservations."""

    accepted: bool
    duplicate: bool
    reason: str
    spent: Spent
    epsilon_spent: float
    delta_spent: float
    epsilon_remaining: float
    delta_remaining: float
    payload: str | None = None
    scope: str = ""
    cap: BudgetCap | None = None  # the cap the scope is checked against (stored with its first charge)
    published_block: dict[str, Any] | None = None  # a charge restored from the topic: the block it was published with

    @property
    def exhausted(self) -> bool:
        """True when refused because the budget (period or lifetime) cannot cover the cost."""
        return self.reason in EXHAUSTED_REASONS

    def budget_block(self, scope: str, cap: BudgetCap | None = None) -> dict[str, Any]:
        """The ``budget`` block of a release record (and of ``stream-dp budget show``): what ``scope`` has
        spent and has left after this result, plus the caps: the scope's own (:attr:`cap`, the cap it was
        first charged under), else ``cap`` when given (a result of a ledger older than stored caps). The one
        place its fields are written. A charge restored from the releases topic (``stream-dp budget rebuild``)
        gives the block it was published with, so that its republication is identical."""
        if self.published_block is not None:
            return dict(self.published_block)
        cap = self.cap if self.cap is not None else cap
        block: dict[str, Any] = {
            "scope": scope,
            "epsilon_spent": float(self.epsilon_spent),
            "delta_spent": float(self.delta_spent),
            "epsilon_remaining": float(self.epsilon_remaining),
            "delta_remaining": float(self.delta_remaining),
        }
        if cap is not None:
            block["epsilon_cap"] = float(cap.epsilon)
            block["delta_cap"] = float(cap.delta)
        return block
