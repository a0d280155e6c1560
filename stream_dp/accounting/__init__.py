"""Privacy accounting: DP events, their composition, and the budget ledger."""

from stream_dp.accounting.budget import BudgetCap, check_budget_covers, decide, scope_for
from stream_dp.accounting.composition import (
    Spent,
    compose,
    dr19_range_bounded_epsilon,
    optimal_composition_epsilon,
    zcdp_to_epsilon,
)
from stream_dp.accounting.events import (
    ApproxDpEvent,
    DpEvent,
    PureDpEvent,
    RangeBoundedEvent,
    ZCdpAndApproxDpEvent,
    ZCdpEvent,
    event_from_dict,
)

__all__ = [
    "ApproxDpEvent",
    "BudgetCap",
    "DpEvent",
    "PureDpEvent",
    "RangeBoundedEvent",
    "Spent",
    "ZCdpAndApproxDpEvent",
    "ZCdpEvent",
    "check_budget_covers",
    "compose",
    "decide",
    "dr19_range_bounded_epsilon",
    "event_from_dict",
    "optimal_composition_epsilon",
    "scope_for",
    "zcdp_to_epsilon",
]
