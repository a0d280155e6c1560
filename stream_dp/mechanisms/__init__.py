"""Pure randomized mechanisms (numpy only, no I/O); every result states its cost as DP events."""

from stream_dp.mechanisms.em_gap import em_with_gap, em_with_gap_blackbox, em_with_gap_events
from stream_dp.mechanisms.hybrid_gap import (
    THRESHOLD,
    GapRelease,
    hybrid_max_events,
    hybrid_topk_estimates,
    hybrid_topk_identity,
)
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
from stream_dp.mechanisms.svt import (
    AdaptiveSVT,
    SVTAnswer,
    SVTExhaustedError,
    SVTRun,
    adaptive_svt,
    adaptive_svt_events,
)
from stream_dp.mechanisms.svt_measures import MeasuredAnswer, SVTMeasuresResult, blue_combine, svt_with_measures
from stream_dp.mechanisms.pws import (
    SampleResult,
    SampleRow,
    private_weighted_sample,
    private_weighted_sample_events,
    pws_token_estimates,
)
from stream_dp.mechanisms.pws_estimators import TokenEstimator, estimate_sum
from stream_dp.mechanisms.pws_sbh import sbh_reporting_probabilities, sbh_sample
from stream_dp.mechanisms.pws_tables import (
    SamplingScheme,
    SanitizerTable,
    pws_reporting_probabilities,
    pws_sanitizer_probabilities,
)

__all__ = [
    "GapRelease",
    "THRESHOLD",
    "em_with_gap",
    "em_with_gap_blackbox",
    "em_with_gap_events",
    "hybrid_max_events",
    "hybrid_topk_estimates",
    "hybrid_topk_identity",
    "AdaptiveSVT",
    "MeasuredAnswer",
    "SVTAnswer",
    "SVTExhaustedError",
    "SVTMeasuresResult",
    "SVTRun",
    "TopKResult",
    "UNLISTED",
    "adaptive_svt",
    "adaptive_svt_events",
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
    # private weighted sampling (seed 002)
    "SampleResult",
    "SampleRow",
    "SamplingScheme",
    "SanitizerTable",
    "TokenEstimator",
    "estimate_sum",
    "private_weighted_sample",
    "private_weighted_sample_events",
    "pws_reporting_probabilities",
    "pws_sanitizer_probabilities",
    "pws_token_estimates",
    "sbh_reporting_probabilities",
    "sbh_sample",
]
