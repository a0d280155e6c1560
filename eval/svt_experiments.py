"""Seed 003 §9.3 ("Benefits of adaptivity") as a pure function: SVT with Gap vs Adaptive SVT with Gap.

Setup of the paper and the authors' code (Ding et al. §9, Experiments): item counts as monotone
counting queries in a fixed shuffled order; θ = 1/(1+k^{2/3}) for both algorithms; on each run the
threshold is the count at a uniformly random rank in [2k, 8k) of the counts sorted largest first; both
algorithms scan the queries until their budget rule fires or the queries end. Reported per run: answers
above (Adaptive split by branch), precision (share of "above" answers whose true count is ≥ T) and, for
Adaptive SVT, the share of ε not yet used when its k-th "above" answer is found (at the end of the
stream if it never finds k).

This is a simulation over given counts, not a release: it reads raw counts and prints aggregates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stream_dp.mechanisms.svt import AdaptiveSVT
from stream_dp.rng import RngLike, make_rng


@dataclass(frozen=True)
class AdaptivityRuns:
    """Per-run arrays of one (k, ε) cell of the experiment (length = runs)."""

    k: int
    epsilon: float
    theta: float
    svt_answers: np.ndarray
    svt_precision: np.ndarray
    adaptive_top: np.ndarray
    adaptive_middle: np.ndarray
    adaptive_precision: np.ndarray
    remaining_at_k: np.ndarray

    @property
    def adaptive_answers(self) -> np.ndarray:
        answers: np.ndarray = self.adaptive_top + self.adaptive_middle
        return answers


def _precision(values: np.ndarray, above: list[bool], threshold: float) -> float:
    picked = values[: len(above)][np.asarray(above, dtype=bool)]
    return float(np.mean(picked >= threshold)) if len(picked) else float("nan")


def adaptivity_experiment(counts: np.ndarray, *, k: int, epsilon: float = 0.7, runs: int = 100,
                          noise: str = "laplace", order: np.ndarray | None = None,
                          rng: RngLike = None) -> AdaptivityRuns:
    """Run the §9.3 comparison ``runs`` times on ``counts`` (integers, one per item).

    ``order`` is the (public, fixed) order in which the items are queried, a permutation of their
    indices; by default one random permutation drawn from ``rng`` (the authors shuffle once, seed 0).

    >>> counts = np.array([1000 // r for r in range(1, 400)])
    >>> res = adaptivity_experiment(counts, k=2, runs=5, rng=0)
    >>> bool(np.all(res.svt_answers <= 2)), bool(np.all(res.remaining_at_k <= (1 - res.theta) / 2 + 1e-12))
    (True, True)
    """
    generator = make_rng(rng)
    values = np.asarray(counts)
    order = generator.permutation(len(values)) if order is None else np.asarray(order)
    if sorted(order.tolist()) != list(range(len(values))):
        raise ValueError("order must be a permutation of the item indices")
    stream = values[order].astype(float).tolist()
    ranked = np.sort(values)[::-1]
    theta = 1.0 / (1.0 + k ** (2.0 / 3.0))
    out: dict[str, list[float]] = {name: [] for name in
                                   ("svt", "svt_p", "top", "middle", "ad_p", "remaining")}
    shuffled = values[order]
    for _ in range(runs):
        rank = int(generator.integers(2 * k, min(8 * k, len(ranked))))
        threshold = float(ranked[rank])
        svt = AdaptiveSVT(threshold, k=k, epsilon=epsilon, noise=noise, theta=theta, adaptive=False,
                          rng=generator)
        svt_above = [a.above for a in svt.process_many(stream)]
        out["svt"].append(sum(svt_above))
        out["svt_p"].append(_precision(shuffled, svt_above, threshold))
        ad = AdaptiveSVT(threshold, k=k, epsilon=epsilon, noise=noise, theta=theta, rng=generator)
        ad_above: list[bool] = []
        remaining = None
        for value in stream:
            if ad.exhausted:
                break
            answer = ad.process(value)
            ad_above.append(answer.above)
            if remaining is None and sum(ad_above) == k:
                remaining = ad.remaining_fraction()
        out["top"].append(ad.answers["top"])
        out["middle"].append(ad.answers["middle"])
        out["ad_p"].append(_precision(shuffled, ad_above, threshold))
        out["remaining"].append(ad.remaining_fraction() if remaining is None else remaining)
    arr = {name: np.asarray(vals, dtype=float) for name, vals in out.items()}
    return AdaptivityRuns(k, epsilon, theta, arr["svt"], arr["svt_p"], arr["top"], arr["middle"],
                          arr["ad_p"], arr["remaining"])
