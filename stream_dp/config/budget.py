"""``[budget]``: the privacy budget of one user per period (and over her lifetime) that the ledger enforces
(:mod:`stream_dp.accounting.budget`, docs/privacy.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from stream_dp.config.fields import AtLeastOne, Flag, Number, Positive, Probability, check, section


@section
class BudgetConfig:
    period_seconds: AtLeastOne = 86400  # length of a budget period (scope); 86400 = one UTC day
    epsilon: Positive = 10.0  # ε cap per user per period
    delta: Probability = 1e-5  # δ cap per user per period (includes delta_prime)
    delta_prime: Probability = 1e-7  # δ′ of the zCDP → (ε, δ) conversion
    lifetime_epsilon: Annotated[Number, Field(ge=0, description="0 disables it")] = 0.0  # 0 = no lifetime scope
    lifetime_delta: Number = 0.0  # δ cap of the lifetime scope (incl. delta_prime); 0 = budget.delta
    allow_partial_period: Flag = False  # start even when fewer worst-case windows fit a period than it holds

    @model_validator(mode="after")
    def _rules(self) -> BudgetConfig:
        check(self, [
            (self.delta_prime < self.delta, "delta_prime", f"< budget.delta ({self.delta})"),
            (self.lifetime_delta == 0 or self.delta_prime < self.lifetime_delta < 1, "lifetime_delta",
             f"0 (= budget.delta) or in (budget.delta_prime = {self.delta_prime}, 1)"),
        ])
        return self
