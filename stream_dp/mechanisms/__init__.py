"""Pure randomized mechanisms (numpy only, no I/O); each is reachable as a measurement carrying its privacy map
(:mod:`stream_dp.mechanisms.measurement`), and every result states its cost as DP events."""

from stream_dp.mechanisms.em_gap import em_with_gap, em_with_gap_blackbox, em_with_gap_events
from stream_dp.mechanisms.hybrid_gap import (
    THRESHOLD,
    GapRelease,
    hybrid_max_events,
    hybrid_topk_estimates,
    hybrid_topk_identity,
)
from stream_dp.mechanisms.large_margin import UNLISTED, LargeMargin, large_margin_argmax
from stream_dp.mechanisms.limited_domain import (
    LimitedDomainTopk,
    TopKResult,
    limited_domain_topk,
)
from stream_dp.mechanisms.noisy_topk_gap import (
    NoisyTopkWithGap,
    blue_estimates,
    noisy_topk_with_gap,
    noisy_topk_with_measures,
)
from stream_dp.mechanisms.svt import (
    AdaptiveSVT,
    AdaptiveSvtInstance,
    SVTAnswer,
    SVTExhaustedError,
    SVTRun,
    adaptive_svt,
)
from stream_dp.mechanisms.svt_measures import MeasuredAnswer, SVTMeasuresResult, blue_combine, svt_with_measures
from stream_dp.mechanisms.pws import (
    PrivateWeightedSample,
    SampleResult,
    SampleRow,
    private_weighted_sample,
    pws_token_estimates,
)
from stream_dp.mechanisms.known_domain import KnownDomainTopk
from stream_dp.mechanisms.measurement import GaussianHistogram, LaplaceHistogram, Measurement, WeightedHistogram
from stream_dp.mechanisms.pws_estimators import TokenEstimator, estimate_sum
from stream_dp.mechanisms.pws_sbh import sbh_reporting_probabilities, sbh_sample
from stream_dp.mechanisms.pws_reporting import pws_reporting_probabilities, pws_sanitizer_probabilities
from stream_dp.mechanisms.pws_schemes import SamplingScheme
from stream_dp.mechanisms.pws_tables import SanitizerTable

__all__ = [
    # measurements: mechanisms with their privacy maps (stream_dp.mechanisms.measurement)
    "AdaptiveSvtInstance",
    "GaussianHistogram",
    "LaplaceHistogram",
    "KnownDomainTopk",
    "LargeMargin",
    "LimitedDomainTopk",
    "Measurement",
    "NoisyTopkWithGap",
    "PrivateWeightedSample",
    "WeightedHistogram",
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
    "blue_combine",
    "blue_estimates",
    "large_margin_argmax",
    "limited_domain_topk",
    "noisy_topk_with_gap",
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
    "pws_reporting_probabilities",
    "pws_sanitizer_probabilities",
    "pws_token_estimates",
    "sbh_reporting_probabilities",
    "sbh_sample",
]
