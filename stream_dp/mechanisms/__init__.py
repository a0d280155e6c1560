"""Pure randomized mechanisms (numpy only, no I/O); every result states its cost as DP events."""

from stream_dp.mechanisms.limited_domain import (
    TopKResult,
    limited_domain_topk,
    limited_domain_topk_max_events,
)

__all__ = [
    "TopKResult",
    "limited_domain_topk",
    "limited_domain_topk_max_events",
]
