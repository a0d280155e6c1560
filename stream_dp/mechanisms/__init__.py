"""Pure randomized mechanisms (numpy only, no I/O); every result states its cost as DP events."""

from stream_dp.mechanisms.large_margin import UNLISTED, large_margin_argmax, large_margin_events
from stream_dp.mechanisms.limited_domain import (
    TopKResult,
    limited_domain_topk,
    limited_domain_topk_max_events,
)
from stream_dp.mechanisms.noisy_topk_gap import (
    blue_estimates,
    noisy_topk_with_gap,
    noisy_topk_with_gap_events,
    noisy_topk_with_measures,
)
from stream_dp.mechanisms.svt import AdaptiveSVT, SVTAnswer, SVTExhaustedError, SVTRun, adaptive_svt
from stream_dp.mechanisms.svt_measures import MeasuredAnswer, SVTMeasuresResult, blue_combine, svt_with_measures

__all__ = [
    "AdaptiveSVT",
    "MeasuredAnswer",
    "SVTAnswer",
    "SVTExhaustedError",
    "SVTMeasuresResult",
    "SVTRun",
    "TopKResult",
    "UNLISTED",
    "adaptive_svt",
    "blue_combine",
    "blue_estimates",
    "large_margin_argmax",
    "large_margin_events",
    "limited_domain_topk",
    "limited_domain_topk_max_events",
    "noisy_topk_with_gap",
    "noisy_topk_with_gap_events",
    "noisy_topk_with_measures",
    "svt_with_measures",
]
