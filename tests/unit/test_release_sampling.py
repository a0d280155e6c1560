"""The array form of private weighted sampling is private_weighted_sample, row for row."""

from __future__ import annotations

import numpy as np
import pytest

from stream_dp.mechanisms import private_weighted_sample
from stream_dp.release.sampling import sample_arrays


@pytest.mark.parametrize("scheme,tau", [("pps", 0.05), ("ppswor", 0.05), ("none", None)])
def test_same_rows_as_private_weighted_sample_for_keys_in_tie_order(scheme, tau) -> None:
    rng = np.random.default_rng(0)
    keys = sorted(f"k{j:04d}" for j in range(2000))  # tie_key order for str keys: UTF-8 bytes ascending
    counts = np.floor(rng.pareto(1.0, size=len(keys)) * 3).astype(float)
    params = dict(scheme=scheme, tau=tau, epsilon=1.0, delta=1e-5, max_keys_per_user=2)
    ours = sample_arrays(keys, counts, rng=11, **params)
    theirs = private_weighted_sample(dict(zip(keys, counts.tolist())), rng=11, **params)
    assert ours.rows == theirs.rows and ours.events == theirs.events
    assert ours.parameters() == theirs.parameters()
    assert len(ours.rows) > 10  # something was sampled: the comparison is not vacuous


def test_rejects_non_integer_or_negative_counts() -> None:
    for bad in ([1.5], [-1.0], [float("nan")]):
        with pytest.raises(ValueError, match="counts must be"):
            sample_arrays(["a"], np.array(bad), scheme="pps", tau=0.1, epsilon=1.0, delta=1e-6,
                          max_keys_per_user=1)
    with pytest.raises(ValueError, match="differ in length"):
        sample_arrays(["a", "b"], np.array([1.0]), scheme="pps", tau=0.1, epsilon=1.0, delta=1e-6,
                      max_keys_per_user=1)


# ---------------------------------------------------------------- per count class: same distribution
from collections import Counter  # noqa: E402

from scipy import stats  # noqa: E402

from stream_dp.mechanisms.pws import sanitizer_table  # noqa: E402
from stream_dp.release.sampling import (  # noqa: E402
    ClassDraw,
    count_classes,
    draw_by_count_class,
    sample_count_classes,
)

SMALL = np.array([1, 1, 2, 2, 2, 3])  # ascending: ranks 0..5 are the sorted set's ranks
TABLE_PARAMS = dict(scheme="none", tau=None, epsilon=1.0, delta=0.1, max_keys_per_user=1)


def histogram(counts: np.ndarray) -> list[tuple[float, int]]:
    values, sizes = np.unique(counts, return_counts=True)
    return [(float(v), int(n)) for v, n in zip(values, sizes)]


def joint_by_class(draw, reps: int, seed: int) -> Counter:
    """The joint outcome (token of every key, in rank order) of ``reps`` class-wise draws."""
    table = sanitizer_table(**TABLE_PARAMS)
    classes = count_classes(histogram(SMALL))
    gen = np.random.default_rng(seed)
    out: Counter = Counter()
    for _ in range(reps):
        d = draw(classes, table, gen)
        tokens = np.zeros(len(SMALL), dtype=np.int64)
        tokens[d.ranks] = d.tokens
        assert np.array_equal(SMALL[d.ranks], d.counts)
        out[tuple(tokens.tolist())] += 1
    return out


def joint_per_key(reps: int, seed: int) -> Counter:
    """The same with the existing per-key draw (``SanitizerTable.sample_tokens``, what sample_arrays uses)."""
    table = sanitizer_table(**TABLE_PARAMS)
    gen = np.random.default_rng(seed)
    out: Counter = Counter()
    for _ in range(reps):
        out[tuple(table.sample_tokens(SMALL, gen).tolist())] += 1
    return out


def exact_joint() -> dict[tuple, float]:
    """P[joint outcome] = Π_keys π_{w_key, token}: keys independent, row π_{w,·} of their own count."""
    table = sanitizer_table(**TABLE_PARAMS)
    rows = [table.dense_row(int(w)) for w in SMALL]
    probs: dict[tuple, float] = {(): 1.0}
    for row in rows:
        probs = {o + (t,): p * float(row[t]) for o, p in probs.items() for t in range(len(row)) if row[t] > 0}
    return probs


def gof_pvalue(observed: Counter, reps: int) -> float:
    """Chi-square goodness of fit of a joint-outcome histogram to the exact distribution (rare cells pooled)."""
    exact = exact_joint()
    assert set(observed) <= set(exact), "an impossible outcome was drawn"
    big = [o for o, p in exact.items() if p * reps >= 5]
    f_obs = [observed.get(o, 0) for o in big] + [reps - sum(observed.get(o, 0) for o in big)]
    f_exp = [exact[o] * reps for o in big] + [reps * (1 - sum(exact[o] for o in big))]
    return float(stats.chisquare(f_obs, f_exp).pvalue)


REPS = 30_000


@pytest.mark.slow  # a statistical audit: chi-square over 2 x 30,000 joint draws
def test_class_draw_has_exactly_the_per_key_joint_distribution() -> None:
    """Chi-square GOF of the joint outcome of 6 keys (3 count classes, 432 outcomes) against Π π_{w,t}, for
    the class-wise draw and for the existing per-key draw, and a homogeneity test between the two."""
    ours, theirs = joint_by_class(draw_by_count_class, REPS, 1), joint_per_key(REPS, 2)
    assert gof_pvalue(ours, REPS) > 1e-3
    assert gof_pvalue(theirs, REPS) > 1e-3  # the reference itself matches the exact distribution
    cells = sorted(set(ours) | set(theirs))
    common = [c for c in cells if ours.get(c, 0) + theirs.get(c, 0) >= 10]
    table = np.array([[ours.get(c, 0) for c in common], [theirs.get(c, 0) for c in common]])
    assert stats.chi2_contingency(table).pvalue > 1e-3
    assert len(common) > 20  # the comparison covers many outcomes


def _first_ranks(classes, table, gen) -> ClassDraw:
    """Broken: reports the right number per class but always the class's first keys."""
    d = draw_by_count_class(classes, table, gen)
    ranks = d.ranks.copy()
    for cls in classes:
        mine = np.flatnonzero(d.counts == cls.count)
        ranks[mine] = cls.first + np.arange(len(mine))
    return ClassDraw(ranks, d.counts, d.tokens)


def _one_token_per_class(classes, table, gen) -> ClassDraw:
    """Broken: right keys and right per-key marginals, but one shared token per class (not independent)."""
    d = draw_by_count_class(classes, table, gen)
    tokens = d.tokens.copy()
    for cls in classes:
        mine = np.flatnonzero(d.counts == cls.count)
        tokens[mine] = tokens[mine[0]] if len(mine) else tokens[mine]
    return ClassDraw(d.ranks, d.counts, tokens)


def _row_of_next_count(classes, table, gen) -> ClassDraw:
    """Broken: draws each class from the row of the next count (the sanitizer off by one)."""
    shifted = [cls.__class__(cls.count + 1, cls.size, cls.first) for cls in classes]
    d = draw_by_count_class(shifted, table, gen)
    return ClassDraw(d.ranks, d.counts - 1, np.minimum(d.tokens, d.counts - 1).clip(1))


@pytest.mark.slow  # a statistical audit: chi-square over 30,000 joint draws
@pytest.mark.parametrize("broken", [_first_ranks, _one_token_per_class, _row_of_next_count])
def test_the_joint_distribution_test_rejects_broken_class_draws(broken) -> None:
    observed = joint_by_class(broken, REPS, 1)
    exact = exact_joint()
    if not set(observed) <= set(exact):
        return  # an impossible outcome: rejected outright
    assert gof_pvalue(observed, REPS) < 1e-6


@pytest.mark.slow  # a statistical audit: token frequencies over many releases
def test_sample_count_classes_marginals_match_sample_arrays() -> None:
    """End to end (rows, estimates, reading by rank): each key's token frequency over many releases agrees
    with sample_arrays' (PPS, a 40-key window with 6 count classes), and every row carries the key's count's
    estimate."""
    counts = np.repeat([1, 2, 3, 5, 8, 40], [15, 10, 6, 4, 3, 2]).astype(np.int64)
    keys = [f"k{j:02d}" for j in range(len(counts))]  # ascending count, then member: the sorted set's order
    params = dict(scheme="pps", tau=0.2, epsilon=1.0, delta=0.05, max_keys_per_user=1)
    classes = count_classes(histogram(counts))
    reads: list[int] = []

    def members_at(ranks: np.ndarray, want: np.ndarray) -> list[str]:
        assert np.array_equal(counts[ranks], want)
        reads.append(len(ranks))
        return [keys[int(r)] for r in ranks]

    reps = 4000
    gen_a, gen_b = np.random.default_rng(5), np.random.default_rng(6)
    ours = np.zeros((len(keys), int(counts.max()) + 1))
    theirs = np.zeros_like(ours)
    index = {k: i for i, k in enumerate(keys)}
    for _ in range(reps):
        a = sample_count_classes(classes, members_at, rng=gen_a, **params)
        b = sample_arrays(keys, counts.astype(float), rng=gen_b, **params)
        assert a.events == b.events and a.parameters() == b.parameters()
        for res, acc in ((a, ours), (b, theirs)):
            for row in res.rows:
                acc[index[row.key], row.token] += 1
    table = sanitizer_table(**params)
    for i, w in enumerate(counts.tolist()):
        expected = table.dense_row(w) * reps
        expected[0] = 0
        for acc in (ours, theirs):
            z = (acc[i, :w + 1] - expected) / np.sqrt(np.maximum(expected * (1 - expected / reps), 1.0))
            assert np.all(np.abs(z) < 5), (keys[i], acc[i, :w + 1], expected)
    assert max(reads) < len(keys)  # only reported keys are read


def test_sample_count_classes_of_an_empty_window_is_empty_and_still_charged() -> None:
    params = dict(scheme="pps", tau=0.01, epsilon=0.5, delta=1e-6, max_keys_per_user=1)

    def never(ranks, counts):
        raise AssertionError("nothing to read in an empty window")

    res = sample_count_classes(count_classes([]), never, rng=1, **params)
    assert res.rows == [] and res.events == sample_arrays([], np.zeros(0), rng=1, **params).events
    assert len(res.events) > 0


def test_count_classes_rejects_bad_histograms() -> None:
    assert [c.first for c in count_classes([(1.0, 3), (2.0, 1), (7.0, 2)])] == [0, 3, 4]
    for bad in ([(1.5, 1)], [(-1.0, 1)], [(float("nan"), 1)]):
        with pytest.raises(ValueError, match="counts must be"):
            count_classes(bad)
    with pytest.raises(ValueError, match="strictly ascending"):
        count_classes([(2.0, 1), (1.0, 1)])
    with pytest.raises(ValueError, match="at least one key"):
        count_classes([(2.0, 0)])
