"""Contract every selection mechanism honours: the input mapping is not mutated, the same
seed gives the same output (int seed or Generator), OS entropy is the default, a bad ε raises ValueError,
and the cost is stated as DP events."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from stream_dp.accounting.events import DpEvent
from stream_dp.mechanisms import (
    LargeMargin,
    NoisyTopkWithGap,
    em_with_gap,
    em_with_gap_blackbox,
    em_with_gap_events,
    hybrid_topk_estimates,
    hybrid_topk_identity,
    large_margin_argmax,
    limited_domain_topk,
    noisy_topk_with_gap,
    noisy_topk_with_measures,
)

COUNTS = {"alpha": 40.0, "beta": 31.0, "gamma": 30.0, "delta": 2.0, ("tuple", 1): 1.0, 7: 0.0}

MECHANISMS = {
    "limited_domain_topk": (lambda c, eps, rng: limited_domain_topk(
        c, k=2, k_bar=3, epsilon=eps, delta=1e-3, max_keys_per_user=2, rng=rng), lambda eps: None),
    "large_margin_argmax": (lambda c, eps, rng: large_margin_argmax(
        c, epsilon=eps, delta=1e-3, n=1, universe_size=10**9, rng=rng),
        lambda eps: LargeMargin(epsilon=eps, delta=1e-3).privacy_map()),
    "noisy_topk_with_gap": (lambda c, eps, rng: noisy_topk_with_gap(c, k=2, epsilon=eps, rng=rng),
                            lambda eps: NoisyTopkWithGap(k=2, epsilon=eps).privacy_map()),
    "noisy_topk_with_measures": (lambda c, eps, rng: noisy_topk_with_measures(c, k=2, epsilon=eps, rng=rng),
                                 lambda eps: NoisyTopkWithGap(k=2, epsilon=eps).privacy_map()),
    "hybrid_topk_identity": (lambda c, eps, rng: hybrid_topk_identity(
        c, threshold=20.0, k=3, epsilon=eps, rng=rng), lambda eps: None),
    "hybrid_topk_estimates": (lambda c, eps, rng: hybrid_topk_estimates(
        c, threshold=20.0, k=3, epsilon=eps, rng=rng), lambda eps: None),
    "em_with_gap": (lambda c, eps, rng: em_with_gap(c, epsilon=eps, rng=rng),
                    lambda eps: em_with_gap_events(epsilon=eps)),
    "em_with_gap_blackbox": (lambda c, eps, rng: em_with_gap_blackbox(c, epsilon=eps, rng=rng),
                             lambda eps: em_with_gap_events(epsilon=eps)),
}


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_mechanism_contract(name):
    run, events_of = MECHANISMS[name]
    counts = copy.deepcopy(COUNTS)
    first = run(counts, 0.7, 123)
    assert counts == COUNTS  # not mutated
    assert run(counts, 0.7, np.random.default_rng(123)) == first  # int seed ≡ Generator with that seed
    outputs = {repr(run(counts, 0.7, None)) for _ in range(30)}  # OS entropy by default
    assert len(outputs) > 1 or name in ("limited_domain_topk", "large_margin_argmax")
    events = getattr(first, "events", None) or events_of(0.7)
    assert events and all(isinstance(e, DpEvent) for e in events)
    assert all(0 < e.basic()[0] <= 0.7 * max(getattr(e, "count", 1), 1) + 1e-12 for e in events)
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError):
            run(counts, bad, 0)
