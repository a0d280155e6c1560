"""Empirical privacy audit of Adaptive SVT on neighbouring query streams, and of two broken variants.

Each audit runs the real object on two neighbouring monotone query streams (every query changes by at
most 1, all in the same direction: one user added) and lower-bounds ln(P[E]/P′[E]) with Clopper–Pearson
bounds (Bonferroni over events and directions). For a truly ε-DP mechanism the bound exceeds ε with
probability ≤ 1 − confidence = 1e-3 (the false-failure rate of each "no violation" check). The events and
parameters were chosen (by simulating the algorithm) where the broken variants leak clearly more than ε:

- no threshold noise: every ⊥ answer on a query at the threshold then costs ε1, so "all m ⊥" has ratio
  ≈ e^{m ε1} = e^{3.2} against the claimed ε = 1;
- middle-branch noise at half its scale: two ⊥ answers pin the noisy threshold from below, a middle ⊤
  with a small gap pins it from above, and the answered query's shift then costs 2ε1 = 3.6 instead of
  ε1 = 1.8 against the claimed ε = 2 (true log-ratios ≈ 3.6 broken, ≈ 1.7 correct, by simulation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pytest

from stream_dp.mechanisms import AdaptiveSVT
from tests.support.audit import audit_privacy

CONFIDENCE = 0.999


def audit_epsilon_lower_bound(mechanism: Callable[[Any, np.random.Generator], Any], x: Any, x_prime: Any,
                              *, trials: int, event: Callable[[Any], Hashable], rng: int) -> float:
    """Largest Clopper–Pearson lower confidence bound of ln(P[E]/P′[E]) over events E and directions
    (:func:`tests.support.audit.audit_privacy` at δ = 0; the claimed ε is compared by each test)."""
    return audit_privacy(mechanism, x, x_prime, epsilon=math.inf, trials=trials, confidence=CONFIDENCE,
                         event=event, rng=rng).epsilon_lower_bound


class _NoThresholdNoise(AdaptiveSVT):
    """BROKEN on purpose: the threshold is used without noise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._threshold_noise = 0.0


class _HalfScaleMiddle(AdaptiveSVT):
    """BROKEN on purpose: middle-branch noise at half the scale the budget needs."""

    def _set_params(self, *args: Any) -> None:
        super()._set_params(*args)
        self._middle_rate *= 2.0


def _branches(cls: type[AdaptiveSVT], **params: Any) -> Callable[[Sequence[int], np.random.Generator], Any]:
    def run(stream: Sequence[int], rng: np.random.Generator) -> tuple:
        svt = cls(0, k=1, rng=rng, **params)
        return tuple((a.branch, a.gap) for a in svt.process_many(stream))
    return run


def _all_below(out: tuple) -> str:
    return "all below" if len(out) == 4 and all(branch is None for branch, _ in out) else "other"


def _pinned(out: tuple) -> str:
    pattern = [branch for branch, _ in out] == [None, None, "middle"]
    return "pinned" if pattern and 0.0 <= out[-1][1] <= 1.0 else "other"


@pytest.mark.slow  # a statistical audit: 24,000 runs of the SVT
def test_no_threshold_noise_is_caught_and_the_real_svt_passes():
    params = dict(epsilon=1.0, theta=0.2)  # ε0 = 0.2, ε1 = 0.8
    x, x_prime = [0, 0, 0, 0], [1, 1, 1, 1]  # four counts at the threshold; a user added to all of them
    real = audit_epsilon_lower_bound(_branches(AdaptiveSVT, **params), x, x_prime, trials=12_000,
                                     event=_all_below, rng=1)
    broken = audit_epsilon_lower_bound(_branches(_NoThresholdNoise, **params), x, x_prime, trials=12_000,
                                       event=_all_below, rng=2)
    assert real <= 1.0, real
    assert broken > 1.0, broken


@pytest.mark.slow  # a statistical audit: 110,000 runs of the SVT
def test_half_scale_middle_noise_is_caught_and_the_real_svt_passes():
    params = dict(epsilon=2.0, theta=0.1)  # ε0 = 0.2, ε1 = 1.8
    x, x_prime = [1, 1, 1], [1, 1, 0]  # only the answered query loses the user
    real = audit_epsilon_lower_bound(_branches(AdaptiveSVT, **params), x, x_prime, trials=30_000,
                                     event=_pinned, rng=3)
    broken = audit_epsilon_lower_bound(_branches(_HalfScaleMiddle, **params), x, x_prime, trials=80_000,
                                       event=_pinned, rng=4)
    assert real <= 2.0, real
    assert broken > 2.0, broken


def test_real_svt_passes_on_every_branch_pattern_for_all_noises():
    """No violation on the full outcome pattern (branches) for each noise family, ε = 1."""
    x, x_prime = [2, 0, 3, 1, 2], [1, 0, 2, 0, 1]
    for seed, noise in enumerate(("laplace", "exponential", "geometric")):
        run = _branches(AdaptiveSVT, epsilon=1.0, theta=0.3, noise=noise)
        bound = audit_epsilon_lower_bound(run, x, x_prime, trials=4000,
                                          event=lambda out: tuple(b for b, _ in out), rng=10 + seed)
        assert bound <= 1.0, (noise, bound)
