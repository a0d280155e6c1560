"""Algorithms 3 and 4 of private weighted sampling: exact DP checks, the q ≡ 1 closed form, saturation.

Every privacy claim here is an exact numeric check (no randomness): both hockey-stick divergences between
every pair of consecutive sanitizer rows are ≤ δ (+1e-12). The early variant of Algorithm 4, implemented
below for the test only, must be flagged by the same check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stream_dp.mechanisms import pws_reporting_probabilities, pws_sanitizer_probabilities
from stream_dp.mechanisms.pws_tables import SamplingScheme, SanitizerTable, SanitizerTableCache

CASES = [  # (scheme, tau, epsilon, delta)
    ("none", None, 1.0, 2.0**-20),
    ("none", None, 0.1, 1e-2),
    ("pps", 0.05, 0.5, 1e-3),
    ("pps", 0.002, 0.25, 2.0**-10),
    ("ppswor", 0.02, 0.25, 1e-3),
    ("ppswor", 1.0, 0.5, 1e-2),  # τ > ε: the Dfix branch of pass 1 is exercised
    ("ppswor", 0.05, 1.0, 2.0**-20),
    ("pps", 0.01, 1.0, 1e-6),  # rows become shifts only up to ~1e-17 rounding: tolerant detection needed
]


def hockey_stick(p: np.ndarray, q: np.ndarray, epsilon: float) -> float:
    """D_{e^ε}(p ‖ q) = Σ max(0, p - e^ε q)."""
    return float(np.maximum(0.0, p - math.exp(epsilon) * q).sum())


def worst_dp_excess(rows: list[np.ndarray], epsilon: float, delta: float) -> float:
    """max over consecutive pairs (i-1, i) of both hockey-stick divergences, minus δ."""
    worst = -math.inf
    for i in range(1, len(rows)):
        cur = rows[i]
        prev = np.concatenate((rows[i - 1], np.zeros(len(cur) - len(rows[i - 1]))))
        worst = max(worst, hockey_stick(cur, prev, epsilon) - delta, hockey_stick(prev, cur, epsilon) - delta)
    return worst


def dense_algorithm4(q: np.ndarray, epsilon: float, delta: float, *, early: bool = False) -> list[np.ndarray]:
    """Token-by-token reference of Algorithm 4; ``early=True`` is the non-DP early variant (the authors' first code):
    no Dfix term and pass-1 cumulative sums that start at token 0."""
    up, down = math.exp(epsilon), math.exp(-epsilon)
    pi, rows = 0.0, [np.array([1.0])]
    for i in range(1, len(q)):
        prev = rows[-1]
        pi = min(q[i], up * pi + delta, 1.0 + down * (pi + delta - 1.0))
        cur = np.zeros(i + 1)
        cur[0] = 1.0 - pi
        if early:
            prev_cum, cur_cum = prev[0], cur[0]
            for j in range(1, i):
                prev_cum += prev[j]
                cur[j] = max(0.0, down * (prev_cum - delta) - cur_cum)
                cur_cum += cur[j]
            remainder = pi - (cur_cum - cur[0])
        else:
            dfix = max(0.0, down * prev[0] - cur[0])
            prev_cum = cur_cum = 0.0
            for j in range(1, i):
                prev_cum += prev[j]
                cur[j] = max(0.0, down * (prev_cum - delta) - cur_cum + dfix)
                cur_cum += cur[j]
            remainder = pi - cur_cum
        prev_tail = cur_tail = 0.0
        for j in range(i, 0, -1):
            if remainder <= 0.0:
                break
            add = min(remainder, up * prev_tail + delta - cur_tail - cur[j])
            cur[j] += add
            remainder -= add
            prev_tail += prev[j - 1] if j >= 2 else 0.0
            cur_tail += cur[j]
        rows.append(cur)
    return rows


def table_rows(table: SanitizerTable, upto: int) -> list[np.ndarray]:
    return [table.dense_row(i) for i in range(upto + 1)]


@pytest.mark.parametrize("scheme,tau,epsilon,delta", CASES)
def test_every_consecutive_pair_of_rows_is_epsilon_delta_dp(scheme, tau, epsilon, delta):
    table = SanitizerTable(SamplingScheme(scheme, tau), epsilon=epsilon, delta=delta)
    table.extend_to(400)
    upto = max(400, (table.saturation or 0) + 50)  # past saturation, through the shifted rows
    rows = table_rows(table, upto)
    assert worst_dp_excess(rows, epsilon, delta) <= 1e-12
    for i, row in enumerate(rows):  # proper distributions, realizable, optimal key reporting
        assert row.min() >= 0 and abs(row.sum() - 1.0) <= 1e-12
        assert abs((1.0 - row[0]) - table.reporting_probability(i)) <= 1e-12
        assert 1.0 - row[0] <= table.inclusion_probability(i) + 1e-12


@pytest.mark.parametrize("scheme,tau,epsilon,delta", [c for c in CASES if c[0] != "none" and c[1] < c[2]])
def test_early_variant_is_flagged_when_sampling_binds(scheme, tau, epsilon, delta):
    q = SamplingScheme(scheme, tau).inclusion_probabilities(np.arange(150))
    early = dense_algorithm4(q, epsilon, delta, early=True)
    late = dense_algorithm4(q, epsilon, delta)
    assert worst_dp_excess(early, epsilon, delta) > 10 * delta  # the check catches the broken variant
    assert worst_dp_excess(late, epsilon, delta) <= 1e-12


@pytest.mark.parametrize("scheme,tau,epsilon,delta", CASES)
def test_sparse_rows_and_shift_extension_equal_the_dense_reference(scheme, tau, epsilon, delta):
    table = SanitizerTable(SamplingScheme(scheme, tau), epsilon=epsilon, delta=delta)
    table.extend_to(60)
    # the slow way, far beyond saturation (rows beyond it are served as shifts of the saturation row)
    upto = min(3 * (table.saturation or 100), 450)
    q = SamplingScheme(scheme, tau).inclusion_probabilities(np.arange(upto + 1))
    dense = dense_algorithm4(q, epsilon, delta)
    for i in range(upto + 1):
        assert np.abs(table.dense_row(i) - dense[i]).max() <= 1e-13, i
    table.extend_until_complete()
    assert table.saturation is not None and table.saturation < 2500  # built-in schemes saturate early
    assert table.built == table.saturation  # no rows are stored beyond saturation


def test_huge_frequencies_need_no_huge_table():
    table = SanitizerTable(SamplingScheme("pps", 0.01), epsilon=0.5, delta=1e-6)
    row = table.row(10**12)
    assert table.saturation is not None and table.built == table.saturation < 1000
    k = table.saturation
    base = table.row(k)
    assert np.array_equal(row.tokens, base.tokens + (10**12 - k)) and np.array_equal(row.probs, base.probs)
    assert row.reported == 1.0


def closed_form_pi(c: int, epsilon: float, delta: float) -> float:
    """Closed form of Algorithm 3's π for q ≡ 1 (with the floor on c_l)."""
    e = math.exp(epsilon)
    c_l = math.floor(1 + math.log((e + 2 * delta - 1) / ((e + 1) * delta)) / epsilon)
    pi_l = delta * (math.exp(c_l * epsilon) - 1) / (e - 1)
    c_h = c_l + math.log(1 + (e - 1) * (1 - pi_l) / delta) / epsilon
    if c <= c_l:
        return delta * (math.exp(c * epsilon) - 1) / (e - 1)
    if c <= c_h:
        decay = math.exp(-(c - c_l) * epsilon)
        return (1 - decay) * (1 + delta / (e - 1)) + decay * pi_l
    return 1.0


@pytest.mark.parametrize("epsilon,delta", [(1.0, 2.0**-20), (0.5, 1e-6), (0.1, 1e-2), (0.25, 2.0**-10)])
def test_no_sampling_matches_the_closed_form(epsilon, delta):
    n = 400
    pi = pws_reporting_probabilities(np.r_[0.0, np.ones(n)], epsilon=epsilon, delta=delta)
    expected = np.array([closed_form_pi(c, epsilon, delta) for c in range(n + 1)])
    assert np.abs(pi - expected).max() <= 1e-12
    table = SanitizerTable(SamplingScheme("none"), epsilon=epsilon, delta=delta)
    for i in range(1, n + 1):
        row = table.dense_row(i)
        j = np.arange(1, i + 1)
        assert np.abs(row[1:] - (pi[i - j + 1] - pi[i - j])).max() <= 1e-12
        assert abs(row[0] - (1 - pi[i])) <= 1e-12


def test_paper_example_values():
    pi = pws_reporting_probabilities(np.r_[0.0, np.ones(60)], epsilon=1.0, delta=2.0**-20)
    assert pi[1] == pytest.approx(9.5367e-7, rel=1e-4)
    assert pi[10] == pytest.approx(0.0122, abs=5e-5)
    assert pi[27] < 1.0 and pi[28] == 1.0
    pi = pws_reporting_probabilities(np.r_[0.0, np.ones(60)], epsilon=0.5, delta=1e-6)
    assert pi[50] < 1.0 and pi[51] == 1.0


@pytest.mark.parametrize("scheme,tau,epsilon,delta", CASES)
def test_algorithm3_is_feasible_and_pointwise_optimal(scheme, tau, epsilon, delta):
    q = SamplingScheme(scheme, tau).inclusion_probabilities(np.arange(300))
    pi = pws_reporting_probabilities(q, epsilon=epsilon, delta=delta)
    e = math.exp(epsilon)
    prev, cur = pi[:-1], pi[1:]
    assert np.all(cur <= q[1:] + 1e-15) and np.all(np.diff(pi) >= 0)
    assert np.all(cur <= e * prev + delta + 1e-15) and np.all(prev <= e * cur + delta + 1e-15)
    assert np.all(1 - cur <= e * (1 - prev) + delta + 1e-15) and np.all(1 - prev <= e * (1 - cur) + delta + 1e-15)
    # raising any single π_i by 1e-9 breaks realizability or a DP constraint with π_{i-1}
    bumped = cur + 1e-9
    assert np.all((bumped > q[1:]) | (bumped > e * prev + delta) | (1 - prev > e * (1 - bumped) + delta))
    p = pws_sanitizer_probabilities(q, epsilon=epsilon, delta=delta)
    assert np.allclose(p * q, pi, atol=1e-15) and np.all(p <= 1 + 1e-15)


def test_bounded_weight_never_saturates_and_is_clipped_at_the_cap():
    scheme = SamplingScheme("ppswor", 0.1, weight=lambda f: np.minimum(f, 5))
    table = SanitizerTable(scheme, epsilon=0.5, delta=1e-3, max_frequency=300)
    rows = table_rows(table, 320)
    assert table.saturation is None and table.built == 300
    assert all(np.array_equal(rows[i][:301], rows[300]) for i in range(301, 321))
    assert worst_dp_excess(rows, 0.5, 1e-3) <= 1e-12


@pytest.mark.parametrize("bad", [
    dict(q=[0, 0.5, 0.4]), dict(q=[0.1, 0.5]), dict(q=[0, 1.5]), dict(q=[0, float("nan")]),
    dict(epsilon=0.0), dict(epsilon=-1.0), dict(delta=0.0), dict(delta=1.0), dict(delta=1.5),
])
def test_reporting_probabilities_reject_bad_parameters(bad):
    args = dict(q=[0, 0.5, 1], epsilon=1.0, delta=1e-3) | bad
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        pws_reporting_probabilities(args.pop("q"), **args)


def test_schemes_reject_bad_parameters():
    with pytest.raises(ValueError, match="tau"):
        SamplingScheme("pps", 0.0)
    with pytest.raises(ValueError, match="tau"):
        SamplingScheme("ppswor", -1.0)
    with pytest.raises(ValueError, match="tau"):
        SamplingScheme("pps", None)
    with pytest.raises(ValueError, match="scheme"):
        SamplingScheme("bottomk", 0.1)
    decreasing = SanitizerTable(SamplingScheme("pps", 0.01, weight=lambda f: 100.0 - f), epsilon=1.0, delta=1e-3)
    with pytest.raises(ValueError, match="weight"):
        decreasing.row(5)


def test_cache_returns_the_same_table_and_is_bounded():
    cache = SanitizerTableCache(max_tables=2)
    a = cache.get(SamplingScheme("pps", 0.1), epsilon=1.0, delta=1e-3)
    assert cache.get(SamplingScheme("pps", 0.1), epsilon=1.0, delta=1e-3) is a
    cache.get(SamplingScheme("pps", 0.2), epsilon=1.0, delta=1e-3)
    cache.get(SamplingScheme("none"), epsilon=1.0, delta=1e-3)
    assert len(cache) == 2
    assert cache.get(SamplingScheme("pps", 0.1), epsilon=1.0, delta=1e-3) is not a
