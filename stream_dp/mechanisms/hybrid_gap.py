"""Hybrids of Noisy Top-K and Sparse Vector with free gaps (Ding et al., "Free Gap Estimates", §7,
Algorithms 5 and 6). Both pay only for what they return.

- :func:`hybrid_topk_identity` (Algorithm 5, prioritizing identity): the threshold T joins the race as
  "query 0" with its own noise; the k+1 largest of T + η_0, q_1 + η_1, … (η ~ Exp(2k/ε)) are released in
  order with their gaps, up to and including the threshold if it places. Realized cost (Lemma 7):
  (t/k)·ε, where t counts the returned entries *including* the threshold.
- :func:`hybrid_topk_estimates` (Algorithm 6, prioritizing estimates): ε₀ = θε on the threshold,
  ε₁ = (1−θ)ε/k per answer; T~ = T + Exp(1/ε₀) − 1/ε₀, q~_i = q_i + Exp(2/ε₁) − 2/ε₁; walk the noisy
  top-k in order and release each key whose q~ ≥ T~ with its gap q~ − T~, stopping at the first failure.
  Realized cost (Lemma 8): (θ + (t/k)(1−θ))·ε with t released keys; θ defaults to the optimum
  1/(1+∛(4k²)). (The authors' code omits the division by k; we follow the paper.)

Every answer must have sensitivity 1 (no monotonicity is assumed). Each result's ``events`` is one
:class:`~stream_dp.accounting.events.PureDpEvent` of the realized ε; reserve the full ε
(:func:`hybrid_max_events`) before running.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from stream_dp.accounting.events import DpEvent, PureDpEvent
from stream_dp.mechanisms._validation import check_epsilon, check_positive_int, check_scores
from stream_dp.mechanisms._markers import Marker
from stream_dp.rng import RngLike, make_rng


THRESHOLD = Marker("THRESHOLD")
"""Marks the threshold ("query 0") in Algorithm 5's output."""


@dataclass(frozen=True)
class GapRelease:
    """Released keys (best first) with their gaps, their unbiased estimates, and the realized ε.

    ``gaps[i]`` is the noisy difference to the next entry (Alg. 5; the threshold's own gap to the entry
    behind it is dropped -- post-processing) or to the noisy threshold (Alg. 6). ``estimates[i]`` estimates
    ``values[keys[i]]`` (None when Alg. 5 did not reach the threshold). ``hit_threshold`` is True when the
    release ended at the threshold (Alg. 5) or at a key below it (Alg. 6).
    """

    keys: tuple[Hashable, ...]
    gaps: tuple[float, ...]
    estimates: tuple[float, ...] | None
    hit_threshold: bool
    cost_epsilon: float
    mechanism: str

    @property
    def events(self) -> tuple[DpEvent, ...]:
        """The realized cost: pure ``cost_epsilon``-DP."""
        return (PureDpEvent(epsilon=self.cost_epsilon, mechanism=self.mechanism),)


def hybrid_max_events(*, epsilon: float, mechanism: str) -> tuple[DpEvent, ...]:
    """Worst-case cost of either hybrid (all k released): ε. Reserve it before the call.

    >>> hybrid_max_events(epsilon=1.0, mechanism="hybrid_topk_identity")[0].epsilon
    1.0
    """
    return (PureDpEvent(epsilon=check_epsilon(epsilon), mechanism=mechanism),)


def optimal_theta(k: int) -> float:
    """θ = 1/(1 + ∛(4k²)) (Lemma 8's optimum; the same split as SVT with Gap).

    >>> round(optimal_theta(1), 4)
    0.3865
    """
    return 1.0 / (1.0 + float(np.cbrt(4.0 * k * k)))


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
            or not np.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    return float(threshold)


def hybrid_topk_identity(values: Mapping[Hashable, float], *, threshold: float, k: int, epsilon: float,
                         rng: RngLike = None) -> GapRelease:
    """Algorithm 5 (module docstring). Needs at least k values. ``keys`` excludes the threshold;
    ``hit_threshold`` tells whether it placed. Costs (t/k)·ε, t = len(keys) + hit_threshold.

    >>> r = hybrid_topk_identity({"a": 900, "b": 10, "c": 5}, threshold=500, k=2, epsilon=1.0, rng=1)
    >>> r.keys, r.hit_threshold, r.cost_epsilon
    (('a',), True, 1.0)
    """
    k = check_positive_int(k, "k")
    epsilon = check_epsilon(epsilon)
    threshold = _check_threshold(threshold)
    keys, arr = check_scores(values, name="values", nonnegative=False)
    if len(keys) < k:
        raise ValueError(f"values must hold at least k = {k} entries, got {len(keys)}")
    generator = make_rng(rng)
    scale = 2.0 * k / epsilon
    noisy = np.concatenate([[threshold], arr]) + generator.exponential(scale, len(arr) + 1)
    m = k + 1
    top = np.argpartition(-noisy, m - 1)[:m] if len(noisy) > m else np.arange(len(noisy))
    top = top[np.argsort(-noisy[top], kind="stable")]
    released: list[Hashable] = []
    gaps: list[float] = []
    hit = False
    for i in range(k):
        gaps.append(float(noisy[top[i]] - noisy[top[i + 1]]))
        if top[i] == 0:
            hit = True
            break
        released.append(keys[top[i] - 1])
    t = len(released) + int(hit)
    estimates = None
    if hit:  # q~_{j_i} − q~_0 = Σ_{s ≥ i} g_s over the gaps before the threshold; + T is unbiased
        suffix = np.cumsum(gaps[: len(released)][::-1])[::-1]
        estimates = tuple(float(threshold + s) for s in suffix)
    return GapRelease(keys=tuple(released), gaps=tuple(gaps[: len(released)]), estimates=estimates,
                      hit_threshold=hit, cost_epsilon=t / k * epsilon, mechanism="hybrid_topk_identity")


def hybrid_topk_estimates(values: Mapping[Hashable, float], *, threshold: float, k: int, epsilon: float,
                          theta: float | None = None, rng: RngLike = None) -> GapRelease:
    """Algorithm 6 (module docstring). Costs (θ + (t/k)(1−θ))·ε for t released keys.

    >>> r = hybrid_topk_estimates({"a": 900, "b": 10, "c": 5}, threshold=500, k=2, epsilon=1.0, rng=1)
    >>> r.keys, r.hit_threshold
    (('a',), True)
    >>> round(r.cost_epsilon, 4) == round(optimal_theta(2) + 0.5 * (1 - optimal_theta(2)), 4)
    True
    """
    k = check_positive_int(k, "k")
    epsilon = check_epsilon(epsilon)
    threshold = _check_threshold(threshold)
    theta = optimal_theta(k) if theta is None else float(theta)
    if not 0 < theta < 1:
        raise ValueError(f"theta must be in (0, 1), got {theta!r}")
    keys, arr = check_scores(values, name="values", nonnegative=False)
    if not keys:
        raise ValueError("values must not be empty")
    generator = make_rng(rng)
    eps0, eps1 = theta * epsilon, (1 - theta) * epsilon / k
    noisy_threshold = threshold + generator.exponential(1 / eps0) - 1 / eps0
    noisy = arr + generator.exponential(2 / eps1, len(arr)) - 2 / eps1
    m = min(k, len(arr))
    top = np.argpartition(-noisy, m - 1)[:m] if len(noisy) > m else np.arange(len(noisy))
    top = top[np.argsort(-noisy[top], kind="stable")]
    released: list[Hashable] = []
    gaps: list[float] = []
    hit = False
    for j in top:
        if noisy[j] < noisy_threshold:
            hit = True
            break
        released.append(keys[j])
        gaps.append(float(noisy[j] - noisy_threshold))
    t = len(released)
    cost = (theta + t / k * (1 - theta)) * epsilon
    return GapRelease(keys=tuple(released), gaps=tuple(gaps),
                      estimates=tuple(threshold + g for g in gaps), hit_threshold=hit,
                      cost_epsilon=min(cost, epsilon),  # equals ε at t = k (guard against rounding)
                      mechanism="hybrid_topk_estimates")
