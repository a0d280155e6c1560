"""Limited-domain top-k (DR19 Algorithm 1): validation, accounting, and its distribution.

Statistical tests use fixed seeds, so they are deterministic; the stated false-failure rate is the
probability that a *correct* implementation would fail them for a random seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stream_dp.accounting.events import RangeBoundedEvent
from stream_dp.mechanisms import LimitedDomainTopk, TopKResult, limited_domain_topk
from tests.support.peeling import (
    as_sequence,
    limited_domain,
    peeling_distribution,
    peeling_sample,
)

BASE = dict(k=2, k_bar=3, epsilon=1.0, delta=1e-3, max_keys_per_user=2)
COUNTS = {"a": 10, "b": 9, "c": 7, "d": 7, "e": 2}


# --- validation -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, fragment", [
    (dict(epsilon=0), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon=float("inf")), "epsilon"),
    (dict(delta=0), "delta"),
    (dict(delta=1), "delta"),
    (dict(delta=-0.1), "delta"),
    (dict(k=4), "k must be <= k_bar"),
    (dict(k=0), "k must be"),
    (dict(k_bar=0, k=1), "k_bar"),
    (dict(k=1.5), "k must be"),
    (dict(max_keys_per_user=0), "max_keys_per_user"),
])
def test_rejects_bad_parameters(override, fragment):
    with pytest.raises(ValueError, match=fragment):
        limited_domain_topk(COUNTS, **{**BASE, **override}, rng=1)


@pytest.mark.parametrize("bad, fragment", [
    ({"a": 3, "b": -1}, "negative"),
    ({"a": 3, "b": float("nan")}, "NaN"),
    ({"a": float("inf")}, "infinite"),
    ({"a": "many"}, "real number"),
    ([("a", 1)], "mapping"),
])
def test_rejects_bad_counts_without_echoing_them(bad, fragment):
    with pytest.raises(ValueError, match=fragment) as info:
        limited_domain_topk(bad, **BASE, rng=1)
    assert "'a'" not in str(info.value) and "-1" not in str(info.value)


def test_rng_must_be_generator_int_or_none():
    with pytest.raises(TypeError):
        limited_domain_topk(COUNTS, **BASE, rng="seed")


# --- accounting and shape ---------------------------------------------------------------------------

def test_events_charge_what_was_returned():
    seen = set()
    for seed in range(200):
        r = limited_domain_topk(COUNTS, **{**BASE, "delta": 0.3}, rng=seed)
        assert isinstance(r, TopKResult)
        assert r.outcomes == len(r.keys) + r.hit_bottom
        assert 1 <= r.outcomes <= BASE["k"]
        assert (len(r.keys) < BASE["k"]) == r.hit_bottom
        assert r.events == (RangeBoundedEvent(epsilon=1.0, count=r.outcomes, delta=0.3,
                                              mechanism="limited_domain_topk"),)
        seen.add(r.outcomes)
    assert seen == {1, 2}  # both a ⊥-terminated and a full release occurred


def test_max_events_are_the_k_outcome_worst_case():
    (event,) = LimitedDomainTopk(k=5, k_bar=5, epsilon=0.25, delta=1e-7, max_keys_per_user=1).privacy_map()
    assert event == RangeBoundedEvent(epsilon=0.25, count=5, delta=1e-7, mechanism="limited_domain_topk")
    assert event.zcdp() == (5 * 0.25**2 / 8, 1e-7)
    with pytest.raises(ValueError, match="k must be"):
        LimitedDomainTopk(k=0, k_bar=5, epsilon=1.0, delta=0.1, max_keys_per_user=1)


def test_input_not_mutated_and_seed_reproducible():
    counts = dict(COUNTS)
    a = limited_domain_topk(counts, **BASE, rng=42)
    b = limited_domain_topk(counts, **BASE, rng=np.random.default_rng(42))
    assert counts == COUNTS and a == b


def test_only_top_k_bar_keys_are_ever_released():
    counts = {f"k{i}": 100 - i for i in range(50)}
    allowed = {f"k{i}" for i in range(5)}
    for seed in range(300):
        r = limited_domain_topk(counts, k=5, k_bar=5, epsilon=0.05, delta=0.5, max_keys_per_user=1,
                                rng=seed)
        assert set(r.keys) <= allowed


def test_reads_only_the_top_k_bar_plus_one_counts():
    """The full histogram and its top-(k̄+1) prefix give the identical release for the same seed."""
    rng = np.random.default_rng(3)
    counts = {f"key{i}": int(c) for i, c in enumerate(rng.zipf(1.5, size=5000))}
    ranked = sorted(counts, key=lambda key: (counts[key], key.encode()), reverse=True)[:21]
    prefix = {key: counts[key] for key in counts if key in set(ranked)}
    for seed in range(50):
        full = limited_domain_topk(counts, k=5, k_bar=20, epsilon=0.5, delta=1e-4, max_keys_per_user=3,
                                   rng=seed)
        assert limited_domain_topk(prefix, k=5, k_bar=20, epsilon=0.5, delta=1e-4, max_keys_per_user=3,
                                   rng=seed) == full


def test_ties_at_the_boundary_use_the_fixed_key_order():
    """Equal counts rank by descending UTF-8 bytes (Redis ZRANGE REV order), whatever the dict order."""
    for order in (["x", "y", "z"], ["z", "y", "x"], ["y", "z", "x"]):
        counts = {key: 1000 for key in order}
        released = set()
        for seed in range(40):
            r = limited_domain_topk(counts, k=2, k_bar=2, epsilon=0.1, delta=0.99, max_keys_per_user=1,
                                    rng=seed)
            released |= set(r.keys)
        assert released == {"z", "y"}  # "x" ranks outside the limited domain


def test_any_hashable_keys():
    counts = {("page", 1): 500, 7: 400, b"raw": 300, "s": 200}
    r = limited_domain_topk(counts, k=4, k_bar=4, epsilon=2.0, delta=1e-6, max_keys_per_user=1, rng=0)
    assert r.keys == (("page", 1), 7, b"raw", "s")


def test_empty_histogram_releases_only_bottom():
    r = limited_domain_topk({}, k=3, k_bar=5, epsilon=1.0, delta=1e-6, max_keys_per_user=1, rng=0)
    assert r.keys == () and r.hit_bottom and r.outcomes == 1


# --- distribution ------------------------------------------------------------------------------------

def test_bottom_probability_matches_closed_form_for_one_key():
    """One key with count c, k = k̄ = 1, missing counts 0: h_⊥ = 0 + 1 + ln(min(Δ,1)/δ)/ε, so
    P[⊥] = e^{ε h_⊥} / (e^{ε h_⊥} + e^{ε c}) = 1 / (1 + δ e^{ε(c−1)}).

    Two-sided exact binomial test at level 1e-4 (false-failure rate 1e-4 per case, 2e-4 in total).
    """
    for epsilon, delta, c, delta_cap in [(1.0, 0.01, 5, 4), (0.5, 0.2, 3, 1)]:
        expected = 1 / (1 + delta * math.exp(epsilon * (c - 1)))
        n = 20_000
        rng = np.random.default_rng(11)
        bottoms = sum(limited_domain_topk({"only": c}, k=1, k_bar=1, epsilon=epsilon, delta=delta,
                                          max_keys_per_user=delta_cap, rng=rng).hit_bottom
                      for _ in range(n))
        assert stats.binomtest(bottoms, n, expected).pvalue > 1e-4, (bottoms / n, expected)


def test_peeling_oracle_sampler_matches_its_exact_distribution():
    """Sanity of the oracle itself: its sampler follows its exact formula (chi-square, level 1e-4)."""
    domain = limited_domain(COUNTS, k_bar=3, epsilon=0.8, delta=0.2, max_keys_per_user=2)
    exact = peeling_distribution(domain, k=2, epsilon=0.8)
    assert math.isclose(sum(exact.values()), 1.0)
    rng = np.random.default_rng(5)
    draws = [peeling_sample(domain, k=2, epsilon=0.8, rng=rng) for _ in range(8000)]
    assert _chi_square_pvalue(draws, exact) > 1e-4


CASES = [  # (counts, k, k_bar, Δ, ε, δ)
    ({"a": 5, "b": 4, "c": 4, "d": 2, "e": 1}, 2, 3, 2, 0.7, 0.2),
    ({"a": 5, "b": 4, "c": 4, "d": 2, "e": 1}, 3, 4, 1, 1.0, 0.05),
    ({"a": 3, "b": 3, "c": 3}, 3, 3, 5, 0.5, 0.3),
    ({"a": 8, "b": 2}, 2, 4, 4, 0.4, 0.5),            # fewer than k̄+1 keys: missing counts are 0
    ({f"k{i}": 10 - i for i in range(8)}, 3, 5, 3, 0.6, 0.01),
]


@pytest.mark.parametrize("counts, k, k_bar, max_keys, epsilon, delta", CASES)
def test_one_shot_gumbel_equals_peeling_in_distribution(counts, k, k_bar, max_keys, epsilon, delta):
    """Chi-square goodness of fit of the one-shot mechanism's ordered outputs (⊥ included) to the exact
    peeling-EM distribution over d ∪ {⊥}. Level 1e-4 per case: false-failure rate 5e-4 over the 5 cases.
    Cells with expected count < 5 are pooled."""
    exact = peeling_distribution(limited_domain(counts, k_bar=k_bar, epsilon=epsilon, delta=delta,
                                                max_keys_per_user=max_keys), k=k, epsilon=epsilon)
    rng = np.random.default_rng(2024)
    draws = [as_sequence(*_run(counts, k, k_bar, max_keys, epsilon, delta, rng)) for _ in range(12_000)]
    assert _chi_square_pvalue(draws, exact) > 1e-4


def test_peeling_oracle_detects_a_wrong_bottom_offset():
    """The chi-square test has power: the same test against a ⊥ offset using Δ instead of min(Δ, k̄)
    (a plausible bug) rejects."""
    counts, k, k_bar, max_keys, epsilon, delta = {"a": 5, "b": 4, "c": 4}, 2, 2, 50, 1.0, 0.3
    wrong = peeling_distribution(limited_domain(
        counts, k_bar=k_bar, epsilon=epsilon, delta=delta, max_keys_per_user=max_keys,
        bottom_offset_fn=lambda *, k_bar, epsilon, delta, max_keys_per_user:
            1 + math.log(max_keys_per_user / delta) / epsilon), k=k, epsilon=epsilon)
    rng = np.random.default_rng(7)
    draws = [as_sequence(*_run(counts, k, k_bar, max_keys, epsilon, delta, rng)) for _ in range(12_000)]
    assert _chi_square_pvalue(draws, wrong) < 1e-6


def _run(counts, k, k_bar, max_keys, epsilon, delta, rng):
    r = limited_domain_topk(counts, k=k, k_bar=k_bar, epsilon=epsilon, delta=delta,
                            max_keys_per_user=max_keys, rng=rng)
    return r.keys, r.hit_bottom


def _chi_square_pvalue(draws, exact):
    n = len(draws)
    observed = {}
    for seq in draws:
        assert seq in exact, f"impossible output {seq}"
        observed[seq] = observed.get(seq, 0) + 1
    cells = sorted(exact, key=exact.get, reverse=True)
    obs, exp, pool_o, pool_e = [], [], 0, 0.0
    for seq in cells:
        if exact[seq] * n >= 5:
            obs.append(observed.get(seq, 0))
            exp.append(exact[seq] * n)
        else:
            pool_o += observed.get(seq, 0)
            pool_e += exact[seq] * n
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    return stats.chisquare(obs, exp).pvalue


# --- the δ of the ⊥ rule -----------------------------------------------------------------------------

def _adversarial_pair(k_bar: int, max_keys: int, c: int = 20):
    """h: k̄ keys "t*" and Δ boundary keys "b*", all at count c, the b's ranked below the t's by the tie
    order; h' adds one user who touches the Δ boundary keys, lifting them to c + 1 = h'_(k̄+1) + 1 -- the
    largest count a key outside d(h) can reach in a neighbour."""
    h = {f"t{i}": c for i in range(k_bar)} | {f"a{i}": c for i in range(max_keys)}  # "a" < "t": ranked below
    h_prime = dict(h) | {f"a{i}": c + 1 for i in range(max_keys)}
    outside = {f"a{i}" for i in range(max_keys)}
    return h, h_prime, outside


@pytest.mark.parametrize("k_bar, k, max_keys, epsilon, delta", [
    (1, 1, 1, 1.0, 0.1), (3, 3, 1, 0.5, 0.05), (3, 3, 3, 1.0, 0.2), (4, 2, 2, 0.3, 0.1),
    (4, 4, 8, 2.0, 0.3), (2, 2, 5, 0.1, 1e-3), (5, 3, 5, 1.0, 1e-6),
])
def test_exact_probability_of_leaving_the_true_top_k_bar_is_at_most_delta(k_bar, k, max_keys, epsilon,
                                                                            delta):
    """Exact (oracle) P_{h'}[output contains a key outside d(h)] ≤ δ on the adversarial neighbours, over
    the whole ordered output (Lemma 5.5: δ, not k·δ). Exact numeric check, no false failures."""
    h, h_prime, outside = _adversarial_pair(k_bar, max_keys)
    exact = peeling_distribution(limited_domain(h_prime, k_bar=k_bar, epsilon=epsilon, delta=delta,
                                                max_keys_per_user=max_keys), k=k, epsilon=epsilon)
    p_out = sum(p for seq, p in exact.items() if outside & set(seq))
    assert 0 < p_out <= delta
    assert p_out > delta / 10  # the pair is genuinely adversarial: the bound is nearly attained


def test_implementation_leaves_the_true_top_k_bar_with_probability_at_most_delta():
    """Monte-Carlo on the real mechanism, adversarial neighbours, δ = 0.1, k = k̄ = 3, Δ = 3. Fails if
    the one-sided Clopper–Pearson lower bound (level 1e-4) exceeds δ: false-failure rate ≤ 1e-4."""
    k_bar, max_keys, delta = 3, 3, 0.1
    h, h_prime, outside = _adversarial_pair(k_bar, max_keys)
    rng = np.random.default_rng(99)
    n = 20_000
    hits = sum(bool(outside & set(limited_domain_topk(h_prime, k=3, k_bar=k_bar, epsilon=1.0, delta=delta,
                                                       max_keys_per_user=max_keys, rng=rng).keys))
               for _ in range(n))
    lower = stats.beta.ppf(1e-4, hits, n - hits + 1) if hits else 0.0
    assert lower <= delta, (hits / n, delta)
