"""Privacy accounting: DP events, their composition, and the budget ledger."""

from stream_dp.accounting.composition import Spent, compose, zcdp_to_epsilon
from stream_dp.accounting.events import (
    ApproxDpEvent,
    DpEvent,
    PureDpEvent,
    RangeBoundedEvent,
    ZCdpEvent,
    event_from_dict,
)

__all__ = [
    "ApproxDpEvent",
    "DpEvent",
    "PureDpEvent",
    "RangeBoundedEvent",
    "Spent",
    "ZCdpEvent",
    "compose",
    "event_from_dict",
    "zcdp_to_epsilon",
]
