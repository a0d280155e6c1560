"""The joint exponential mechanism for top-k over a known domain (Gillenwater, Joseph, Muñoz Medina & Ribero
2022, "A Joint Exponential Mechanism for Differentially Private Top-k", ICML), as a *candidate* the evaluation
measures against the known-domain cells where stream-dp's histogram and PipelineDP's public partitions run the
same Gaussian mechanism. It is not a stream-dp release type.

Mechanism. Sort the domain's counts c_(1) ≥ … ≥ c_(d). A sequence s = (s_1, …, s_k) of distinct keys has error
err(s) = max_i (c_(i) − c_{s_i}); the mechanism outputs s with probability ∝ exp(−ε·err(s)/2).

Guarantee: pure ε-DP for users who add 1 to any number of keys (the L0 bound Δ plays no part). Adding a user
raises every count, hence every order statistic c_(i), by 0 or 1, so each c_(i) − c_{s_i} and their max move by
at most 1: err has sensitivity 1 and the exponential mechanism with exp(−ε·err/2) is ε-DP (McSherry & Talwar
2007). The paper's cost is one ε for the whole sequence, where peeling pays k times; its weakness is that the
number of sequences with a given error grows like d^k.

Sampling, exactly. Counts are integers, so err(s) is a non-negative integer (the key of s with the smallest count
sits at some position i with c_(i) ≥ c_(k) ≥ its count). With w_r = e^{−εr/2}(1 − e^{−ε/2}) for r = 0 … R − 1
and w_R = e^{−εR/2} (R = c_(1) − c_(d), beyond which every sequence qualifies), e^{−ε·err(s)/2} = Σ_{r ≥ err(s)}
w_r (the sum telescopes). So draw r with probability ∝ w_r·m(r), m(r) the number of sequences with err ≤ r,
then a uniform sequence with err ≤ r. err(s) ≤ r says c_{s_i} ≥ c_(i) − r for every i: s_i lies in the first
b_i(r) keys of the sorted order, b_i(r) = #{j : c_j ≥ c_(i) − r}, non-decreasing in i. Every earlier pick lies
in those b_i(r) keys, so position i has b_i(r) − (i − 1) choices whatever came before: m(r) = Π_i (b_i(r) − i + 1)
and the sequential uniform draw is uniform over the set (:func:`joint_topk`).
"""

from __future__ import annotations

import math

import numpy as np

from eval.data import Histogram


def sequence_error(sorted_counts: np.ndarray, picks: np.ndarray) -> int:
    """err(s) = max_i (c_(i) − c_{s_i}) for the positions ``picks`` into ``sorted_counts`` (non-increasing).

    >>> int(sequence_error(np.array([9, 7, 7, 3]), np.array([1, 3])))
    4
    """
    k = len(picks)
    return int(np.max(sorted_counts[:k] - sorted_counts[picks]))


def error_levels(sorted_counts: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For r = 0 … R: ``b[r, i]`` = b_i(r), the keys a position-i pick may come from, and ln m(r) (−inf where no
    sequence of k distinct keys has err ≤ r).

    >>> b, log_m = error_levels(np.array([9, 7, 7, 3]), 2)
    >>> b[:3].tolist(), np.exp(log_m[:3]).round().tolist()
    ([[1, 3], [1, 3], [3, 3]], [2.0, 2.0, 6.0])
    """
    c = np.asarray(sorted_counts, dtype=np.int64)
    if k > len(c):
        raise ValueError(f"k = {k} exceeds the domain's {len(c)} keys")
    r = np.arange(int(c[0] - c[-1]) + 1)
    # c is non-increasing, so -c is non-decreasing: #{j : c_j >= v} = #{j : -c_j <= -v}
    b = np.stack([np.searchsorted(-c, -(c[i] - r), side="right") for i in range(k)], axis=1)
    choices = b - np.arange(k)[None, :]
    with np.errstate(divide="ignore"):
        log_m = np.where((choices > 0).all(axis=1), np.log(np.maximum(choices, 1)).sum(axis=1), -np.inf)
    return b, log_m


def level_probabilities(log_m: np.ndarray, epsilon: float) -> np.ndarray:
    """P[r] ∝ w_r·m(r), w_r = e^{−εr/2}(1 − e^{−ε/2}) below the last level, e^{−εR/2} at it (the whole tail)."""
    r = np.arange(len(log_m))
    log_w = -epsilon * r / 2 + math.log(-math.expm1(-epsilon / 2))
    log_w[-1] = -epsilon * r[-1] / 2
    lp = log_w + log_m
    p = np.exp(lp - lp.max())
    return p / p.sum()


def joint_topk(hist: Histogram, *, k: int, epsilon: float, runs: int, rng: np.random.Generator) -> np.ndarray:
    """``runs`` draws of the joint exponential mechanism over the whole universe (zeros too): shape (runs, k),
    key ids in sequence order. ε-DP per draw (module docstring).

    >>> h = Histogram.from_arrays(np.arange(5), np.array([0, 900, 0, 800, 5]), 5)
    >>> joint_topk(h, k=2, epsilon=1.0, runs=2, rng=np.random.default_rng(0)).tolist()
    [[1, 3], [1, 3]]
    """
    if not (epsilon > 0 and k >= 1 and runs >= 1):
        raise ValueError(f"need epsilon > 0, k >= 1, runs >= 1; got {epsilon!r}, {k!r}, {runs!r}")
    dense = hist.dense()
    order = np.lexsort((np.arange(len(dense)), -dense))  # the Histogram's order: count down, key id up
    b, log_m = error_levels(dense[order], k)
    levels = rng.choice(len(log_m), size=runs, p=level_probabilities(log_m, epsilon))
    out = np.empty((runs, k), dtype=np.int64)
    for run, level in enumerate(levels):
        taken: set[int] = set()
        for i, bound in enumerate(b[level]):
            pick = int(rng.integers(bound))
            while pick in taken:  # uniform over the bound − i keys not yet taken
                pick = int(rng.integers(bound))
            taken.add(pick)
            out[run, i] = order[pick]
    return out
