"""The joint exponential mechanism's sampler draws exactly exp(−ε·err/2) and is ε-DP (eval/joint_topk.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from eval.data import Histogram
from eval.joint_topk import error_levels, joint_topk, level_probabilities, sequence_error


def _order(counts: np.ndarray) -> np.ndarray:
    return np.lexsort((np.arange(len(counts)), -counts))


def em_law(counts: np.ndarray, k: int, epsilon: float, *, scale: float = 0.5) -> dict[tuple[int, ...], float]:
    """The target: P(s) ∝ exp(−scale·ε·err(s)) over sequences of k distinct key ids, by enumeration."""
    top = np.sort(counts)[::-1][:k]
    weights = {s: math.exp(-scale * epsilon * float(np.max(top - counts[list(s)])))
               for s in itertools.permutations(range(len(counts)), k)}
    total = sum(weights.values())
    return {s: w / total for s, w in weights.items()}


def sampler_law(counts: np.ndarray, k: int, epsilon: float, *, tail_like_the_rest: bool = False
                ) -> dict[tuple[int, ...], float]:
    """What joint_topk draws: level r with probability p_r, then uniform over the m(r) sequences with err ≤ r."""
    order = _order(counts)
    c = counts[order]
    b, log_m = error_levels(c, k)
    p = level_probabilities(log_m, epsilon)
    if tail_like_the_rest:  # broken: the tail level weighted as one level, not as the whole geometric tail
        w = np.exp(-epsilon * np.arange(len(p)) / 2 + log_m) * -math.expm1(-epsilon / 2)
        p = w / w.sum()
    law = {}
    for picks in itertools.permutations(range(len(c)), k):
        err = sequence_error(c, np.array(picks))
        law[tuple(int(order[j]) for j in picks)] = float(
            sum(p[r] / math.exp(log_m[r]) for r in range(err, len(p)) if np.isfinite(log_m[r])))
    return law


CASES = [(np.array([4, 2, 2, 1, 0]), 2, 0.7), (np.array([4, 2, 2, 1, 0]), 3, 2.0), (np.array([3, 3, 0, 0]), 2, 1.0),
         (np.array([6, 1, 0, 5, 2, 2]), 3, 0.3)]


@pytest.mark.parametrize("counts,k,eps", CASES)
def test_the_sampler_law_is_the_exponential_mechanism(counts: np.ndarray, k: int, eps: float) -> None:
    want, got = em_law(counts, k, eps), sampler_law(counts, k, eps)
    assert want.keys() == got.keys()
    assert max(abs(want[s] - got[s]) for s in want) < 1e-12
    broken = sampler_law(counts, k, eps, tail_like_the_rest=True)
    assert max(abs(want[s] - broken[s]) for s in want) > 1e-3


def test_draws_follow_the_law() -> None:
    counts, k, eps = np.array([4, 2, 2, 1, 0]), 2, 0.7
    law = em_law(counts, k, eps)
    draws = joint_topk(Histogram.from_arrays(np.arange(5), counts, 5), k=k, epsilon=eps, runs=40_000,
                       rng=np.random.default_rng(11))
    seen: dict[tuple[int, ...], int] = {}
    for row in draws.tolist():
        seen[tuple(row)] = seen.get(tuple(row), 0) + 1
    assert set(seen) <= set(law)
    keys = sorted(law)
    observed = np.array([seen.get(s, 0) for s in keys])
    expected = np.array([law[s] for s in keys]) * len(draws)
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def _neighbours(rng: np.random.Generator, d: int, max_keys: int) -> tuple[np.ndarray, np.ndarray]:
    base = rng.integers(0, 5, size=d)
    touched = rng.choice(d, size=int(rng.integers(1, max_keys + 1)), replace=False)
    plus = base.copy()
    plus[touched] += 1
    return base, plus


def test_err_moves_by_at_most_one_whatever_the_user_touches() -> None:
    rng = np.random.default_rng(3)
    worst_max, worst_sum = 0, 0
    for _ in range(300):
        base, plus = _neighbours(rng, 6, 6)  # a user may touch every key: no L0 bound is used
        top_b, top_p = np.sort(base)[::-1][:3], np.sort(plus)[::-1][:3]
        for s in itertools.permutations(range(6), 3):
            gap_b, gap_p = top_b - base[list(s)], top_p - plus[list(s)]
            worst_max = max(worst_max, abs(int(gap_b.max() - gap_p.max())))
            worst_sum = max(worst_sum, abs(int(gap_b.sum() - gap_p.sum())))
    assert worst_max == 1
    assert worst_sum > 1  # a summed error would have sensitivity k: the max is what makes one ε enough


def test_the_law_is_epsilon_dp_on_neighbours() -> None:
    rng = np.random.default_rng(5)
    eps, k = 0.8, 2
    ratio, broken_ratio = 0.0, 0.0
    for _ in range(60):
        base, plus = _neighbours(rng, 5, 5)
        p, q = sampler_law(base, k, eps), sampler_law(plus, k, eps)
        ratio = max(ratio, max(abs(math.log(p[s] / q[s])) for s in p))
        bp, bq = em_law(base, k, eps, scale=1.0), em_law(plus, k, eps, scale=1.0)  # broken: exp(−ε·err)
        broken_ratio = max(broken_ratio, max(abs(math.log(bp[s] / bq[s])) for s in bp))
    assert ratio <= eps + 1e-9
    assert broken_ratio > eps * 1.2


def test_k_larger_than_the_domain_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds the domain"):
        error_levels(np.array([3, 1]), 3)
