"""Top-k baselines a user would pick instead of limited-domain top-k, vectorised over Monte-Carlo runs.

Each function takes the bounded counts of one window and returns an integer array of shape
``(runs, k)``: row r holds the key ids released by run r, best first, padded with ``-1`` when fewer than
k keys are released. Each has an ``*_events`` companion stating its privacy cost as DP events
(stream_dp.accounting.events), so :mod:`eval.calibration` can put every method at the same guarantee.

Privacy unit: a user, who adds 1 to at most Δ = ``max_keys_per_user`` counts (add/remove neighbours).

* :func:`full_domain_topk` -- one-shot Gumbel top-k over the *known* universe, zeros included (Durfee &
  Rogers 2019, Corollary 4.1; the exponential mechanism peeled k times). Counts are monotone with
  per-key sensitivity 1 whatever Δ is, so every peel is ε-range-bounded: k outcomes cost
  ``RangeBoundedEvent(ε, count=k)``, no δ. It needs the domain: a stream of unknown keys cannot run it.
* :func:`laplace_partition_topk` -- differentially private partition selection as in Google's DP
  library / PipelineDP / OpenDP (Korolova et al. 2009; Wilson et al. 2020): add Laplace(Δ/ε) to the count
  of every key present, keep the keys whose noisy count exceeds τ (:func:`laplace_threshold`), release the
  top k kept keys by noisy count (post-processing of the noisy histogram, so free). Cost:
  ``ApproxDpEvent(ε, δ)``.
* :func:`laplace_select_then_em` -- the PipelineDP pattern with a budget split: partition selection as
  above releases only the key set (ε_s, δ); then a Gumbel top-k over that now-public set (k peels of ε_e).

Derivation of τ (what :func:`laplace_threshold` implements). Let D' = D plus one user u. Keys touched by
u that are absent from D ("new" keys, m ≤ Δ of them) have count exactly 1 in D'. On the other keys the
count vectors differ by at most Δ in L1, so Laplace(Δ/ε) makes that part ε-DP. Write
p = P[1 + Lap(Δ/ε) > τ] = ½·exp(−(τ−1)ε/Δ) for τ ≥ 1, and δ₀ = P[some new key is kept] = 1 − (1−p)^m.
- D' → D: P[M(D') ∈ S] ≤ P[common part ∈ S] + δ₀ ≤ e^ε·P[M(D) ∈ S] + δ₀.
- D → D': with x = P[common part of M(D') ∈ S], P[M(D) ∈ S] ≤ min(1, e^ε·x) and
  P[M(D') ∈ S] ≥ (1−δ₀)·x; the largest min(1, e^ε x) − e^ε(1−δ₀)x is at x = e^{−ε}, equal to δ₀.
So the release is (ε, δ₀)-DP with δ₀ ≤ 1 − (1−p)^Δ. Solving 1 − (1−p)^Δ = δ gives p = 1 − (1−δ)^{1/Δ} and

    τ = 1 + (Δ/ε)·ln(1 / (2p))        (≈ 1 + (Δ/ε)·ln(Δ/(2δ)) for small δ).
"""

from __future__ import annotations

import math

import numpy as np

from stream_dp.accounting.events import ApproxDpEvent, DpEvent, RangeBoundedEvent
from eval.data import Histogram

CHUNK = 256  # Monte-Carlo runs per noise matrix (bounds memory at CHUNK x universe floats)


def laplace_threshold(*, epsilon: float, delta: float, max_keys_per_user: int) -> float:
    """Partition-selection threshold τ for Laplace(Δ/ε) noise so that keys only one user touched are
    released with total probability at most ``delta`` (derivation in the module docstring).

    >>> round(laplace_threshold(epsilon=1.0, delta=1e-6, max_keys_per_user=1), 4)
    14.1224
    >>> t = laplace_threshold(epsilon=0.5, delta=1e-6, max_keys_per_user=5)
    >>> p = 0.5 * math.exp(-(t - 1) * 0.5 / 5)     # P[a count-1 key is kept]
    >>> abs((1 - (1 - p) ** 5) - 1e-6) < 1e-15
    True
    """
    _check(epsilon=epsilon, delta=delta, max_keys_per_user=max_keys_per_user)
    p = -math.expm1(math.log1p(-delta) / max_keys_per_user)
    return 1.0 + (max_keys_per_user / epsilon) * math.log(1.0 / (2.0 * p))


def full_domain_topk_events(*, k: int, epsilon: float) -> tuple[DpEvent, ...]:
    """k ε-range-bounded peels of the exponential mechanism (monotone counts, sensitivity 1)."""
    return (RangeBoundedEvent(epsilon, count=k, mechanism="full_domain_gumbel_topk"),)


def laplace_partition_events(*, epsilon: float, delta: float) -> tuple[DpEvent, ...]:
    """One (ε, δ)-DP release of the thresholded noisy histogram."""
    return (ApproxDpEvent(epsilon, delta, mechanism="laplace_partition_selection"),)


def select_then_em_events(*, k: int, select_epsilon: float, select_delta: float, em_epsilon: float
                          ) -> tuple[DpEvent, ...]:
    """Partition selection (ε_s, δ_s) then k ε_e-range-bounded peels over the selected keys."""
    return laplace_partition_events(epsilon=select_epsilon, delta=select_delta) + (
        RangeBoundedEvent(em_epsilon, count=k, mechanism="gumbel_topk_over_selected"),)


def full_domain_topk(hist: Histogram, *, k: int, epsilon: float, runs: int, rng: np.random.Generator
                     ) -> np.ndarray:
    """Gumbel(1/ε) on every count of the known universe (zeros too), top k by noisy count.

    >>> h = Histogram.from_arrays(np.arange(4), np.array([0, 500, 0, 300]), 4)
    >>> full_domain_topk(h, k=2, epsilon=1.0, runs=3, rng=np.random.default_rng(0)).tolist()
    [[1, 3], [1, 3], [1, 3]]
    """
    _check(epsilon=epsilon, k=k, runs=runs)
    dense = hist.dense().astype(float)
    out = np.empty((runs, k), dtype=np.int64)
    for lo in range(0, runs, CHUNK):
        n = min(CHUNK, runs - lo)
        noisy = dense + rng.gumbel(scale=1.0 / epsilon, size=(n, dense.size))
        out[lo:lo + n] = _topk_rows(noisy, k)
    return out


def laplace_partition_topk(hist: Histogram, *, k: int, epsilon: float, delta: float, max_keys_per_user: int,
                           runs: int, rng: np.random.Generator) -> np.ndarray:
    """Laplace(Δ/ε) on the counts of the keys present, keep noisy > τ, top k kept by noisy count.

    >>> h = Histogram.from_arrays(np.arange(3), np.array([1000, 2, 900]), 3)
    >>> laplace_partition_topk(h, k=3, epsilon=1.0, delta=1e-6, max_keys_per_user=1, runs=2,
    ...                        rng=np.random.default_rng(0)).tolist()
    [[0, 2, -1], [0, 2, -1]]
    """
    _check(epsilon=epsilon, delta=delta, max_keys_per_user=max_keys_per_user, k=k, runs=runs)
    tau = laplace_threshold(epsilon=epsilon, delta=delta, max_keys_per_user=max_keys_per_user)
    counts = hist.counts.astype(float)
    out = np.empty((runs, k), dtype=np.int64)
    for lo in range(0, runs, CHUNK):
        n = min(CHUNK, runs - lo)
        noisy = counts + rng.laplace(scale=max_keys_per_user / epsilon, size=(n, counts.size))
        noisy[noisy <= tau] = -np.inf
        out[lo:lo + n] = _to_keys(_topk_rows(noisy, k), hist.keys)
    return out


def laplace_select_then_em(hist: Histogram, *, k: int, select_epsilon: float, select_delta: float,
                           em_epsilon: float, max_keys_per_user: int, runs: int, rng: np.random.Generator
                           ) -> np.ndarray:
    """Partition selection releasing only the kept key set, then Gumbel(1/ε_e) top-k over that set."""
    _check(epsilon=select_epsilon, delta=select_delta, max_keys_per_user=max_keys_per_user, k=k, runs=runs)
    _check(epsilon=em_epsilon)
    tau = laplace_threshold(epsilon=select_epsilon, delta=select_delta, max_keys_per_user=max_keys_per_user)
    counts = hist.counts.astype(float)
    out = np.empty((runs, k), dtype=np.int64)
    for lo in range(0, runs, CHUNK):
        n = min(CHUNK, runs - lo)
        kept = counts + rng.laplace(scale=max_keys_per_user / select_epsilon, size=(n, counts.size)) > tau
        scores = counts + rng.gumbel(scale=1.0 / em_epsilon, size=(n, counts.size))
        scores[~kept] = -np.inf
        out[lo:lo + n] = _to_keys(_topk_rows(scores, k), hist.keys)
    return out


def true_topk(hist: Histogram, *, k: int) -> np.ndarray:
    """The DP-free ceiling: the top k bounded counts (ties by smaller key id), padded with -1."""
    keys = hist.keys[:k]
    return np.concatenate([keys, -np.ones(k - len(keys), dtype=np.int64)])


def _topk_rows(values: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's k largest values, best first; -1 where the value is -inf."""
    n_rows, n_cols = values.shape
    if n_cols == 0:
        return -np.ones((n_rows, k), dtype=np.int64)
    kk = min(k, n_cols)
    part = np.argpartition(-values, kk - 1, axis=1)[:, :kk] if kk < n_cols else np.tile(np.arange(n_cols), (n_rows, 1))
    picked = np.take_along_axis(values, part, axis=1)
    order = np.argsort(-picked, axis=1, kind="stable")
    idx = np.take_along_axis(part, order, axis=1)
    idx[np.take_along_axis(picked, order, axis=1) == -np.inf] = -1
    if kk < k:
        idx = np.concatenate([idx, -np.ones((n_rows, k - kk), dtype=np.int64)], axis=1)
    return idx


def topk_rows_random_ties(values: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """:func:`_topk_rows` with ties broken uniformly at random, independently per row: every row's columns are
    shuffled first (O(columns) per row), so which of several equal values is picked, and in which order, depends
    on no column's position. Discrete noise (counts of 1-2 plus integer noise) makes many released values equal,
    and a re-rank that picks among them by array layout favours whichever method lists its columns in a
    count-correlated order (the peers list keys by true count, stream-dp's domain rows by key).

    >>> rows = topk_rows_random_ties(np.zeros((4000, 3)), 1, np.random.default_rng(0))[:, 0]
    >>> bool(np.all(np.abs(np.bincount(rows, minlength=3) / 4000 - 1 / 3) < 0.03))
    True
    >>> topk_rows_random_ties(np.array([[1.0, 3.0, 2.0, -np.inf]]), 5, np.random.default_rng(0)).tolist()
    [[1, 2, 0, -1, -1]]
    """
    n_rows, n_cols = values.shape
    if n_cols == 0:
        return -np.ones((n_rows, k), dtype=np.int64)
    perm = rng.permuted(np.broadcast_to(np.arange(n_cols), (n_rows, n_cols)), axis=1)
    picked = _topk_rows(np.take_along_axis(values, perm, axis=1), k)
    return np.where(picked >= 0, np.take_along_axis(perm, np.maximum(picked, 0), axis=1), -1)


def _to_keys(cols: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Map column indices (into ``keys``) to key ids, keeping -1 padding."""
    return np.where(cols >= 0, keys[np.maximum(cols, 0)], -1)


def _check(*, epsilon: float | None = None, delta: float | None = None, max_keys_per_user: int | None = None,
           k: int | None = None, runs: int | None = None) -> None:
    if epsilon is not None and not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if delta is not None and not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if max_keys_per_user is not None and max_keys_per_user < 1:
        raise ValueError(f"max_keys_per_user must be >= 1, got {max_keys_per_user!r}")
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    if runs is not None and runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs!r}")
