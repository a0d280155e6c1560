"""The exact privacy profile of the thresholded discrete-Gaussian histogram (docs/privacy.md §8c) against an
exact enumeration of tiny cases, against the continuous Gaussian, and against broken variants of the formula
that must be caught; the exact calibration, its events and what the ledger's cap rule makes of them."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import ZCdpAndApproxDpEvent
from stream_dp.mechanisms.discrete_gaussian import discrete_gaussian_tail
from stream_dp.mechanisms.gaussian_histogram import (
    calibrate_histogram,
    calibrate_histogram_exact,
    gaussian_histogram,
    selection_delta,
)
from stream_dp.mechanisms.sparse_gaussian_profile import (
    _sum_pmfs,
    calibrate_exact,
    direction_deltas,
    exact_threshold,
    shared_keys_delta,
    sparse_histogram_delta,
)

TINY = [(Fraction(4, 5), 2), (Fraction(4, 5), 3), (Fraction(2), 3), (Fraction(2), 5), (Fraction(3), 4)]
EPSILONS = [0.0, 0.3, 1.0, 2.5]


def _pmf(sigma2: Fraction, k: int = 40) -> tuple[np.ndarray, np.ndarray]:
    z = np.arange(-k, k + 1)
    w = np.exp(-(z.astype(float) ** 2) / (2 * float(sigma2)))
    return z, w / w.sum()


def _outcome_laws(sigma2: Fraction, tau: int, new: int, shared: int, censor_shared: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The joint law of every outcome under D (with the user) and D′ (without), enumerated exactly (to the
    truncation at ±40, whose mass is < 1e-170 at these σ²). A new key's outcome is ⊥ or its noisy count ≥ τ;
    a shared key's (base count 5) its full noisy count, or ⊥ below τ with ``censor_shared`` (the real
    mechanism, of which the profile is an upper bound)."""
    z, p = _pmf(sigma2)
    values = np.arange(-60, 80)
    # a new key: index 0 = ⊥, then the values ≥ τ
    kept = values[values >= tau]
    new_d = np.concatenate([[p[z + 1 < tau].sum()], [p[z == v - 1].sum() for v in kept]])
    new_dp = np.concatenate([[1.0], np.zeros(len(kept))])

    def shared_law(count: int) -> np.ndarray:
        law = np.array([p[z == v - count].sum() for v in values])
        if censor_shared:
            return np.concatenate([[law[values < tau].sum()], law[values >= tau]])
        return law
    laws_d = [new_d] * new + [shared_law(6)] * shared
    laws_dp = [new_dp] * new + [shared_law(5)] * shared
    joint_d, joint_dp = np.ones(1), np.ones(1)
    for a, b in zip(laws_d, laws_dp):
        joint_d, joint_dp = np.multiply.outer(joint_d, a).ravel(), np.multiply.outer(joint_dp, b).ravel()
    return joint_d, joint_dp


def _hockey(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    return float(np.maximum(p - math.exp(eps) * q, 0).sum())


def brute_force(sigma2: Fraction, tau: int, new: int, shared: int, eps: float, censor_shared: bool = False
                ) -> tuple[float, float]:
    d, dp = _outcome_laws(sigma2, tau, new, shared, censor_shared)
    return _hockey(d, dp, eps), _hockey(dp, d, eps)


# --- deliberately broken variants of direction_deltas: each must fail the exactness check --------------------

def _parts(sigma2: Fraction, tau: int, j: int) -> tuple[float, float]:
    p = discrete_gaussian_tail(sigma2, tau - 1)
    return p, -math.log1p(-p)


def broken_no_new_key_term(sigma2, threshold, new_keys, shared_keys, epsilon):
    """Forgets that a new key can be released at all: the forward δ without 1 − q^j."""
    p, log_inv_q = _parts(sigma2, threshold, new_keys)
    g = shared_keys_delta(sigma2=sigma2, shifted_keys=shared_keys, epsilon=epsilon + new_keys * log_inv_q)
    return g, shared_keys_delta(sigma2=sigma2, shifted_keys=shared_keys, epsilon=epsilon - new_keys * log_inv_q)


def broken_unshifted_epsilon(sigma2, threshold, new_keys, shared_keys, epsilon):
    """The shared-key term at ε instead of the shifted ε ± j·ln(1/q)."""
    p, log_inv_q = _parts(sigma2, threshold, new_keys)
    q_j = (1 - p) ** new_keys
    g = shared_keys_delta(sigma2=sigma2, shifted_keys=shared_keys, epsilon=epsilon)
    return 1 - q_j + q_j * g, g


def broken_weighted_reverse(sigma2, threshold, new_keys, shared_keys, epsilon):
    """The reverse direction weighted by q^j (it is not: e^ε·q^j·P = e^{ε − j ln(1/q)}·P)."""
    forward, backward = direction_deltas(sigma2=sigma2, threshold=threshold, new_keys=new_keys,
                                         shared_keys=shared_keys, epsilon=epsilon)
    p, _ = _parts(sigma2, threshold, new_keys)
    return forward, (1 - p) ** new_keys * backward


def real(sigma2, threshold, new_keys, shared_keys, epsilon):
    return direction_deltas(sigma2=sigma2, threshold=threshold, new_keys=new_keys, shared_keys=shared_keys,
                            epsilon=epsilon)


def matches_brute_force(fn: Callable[..., tuple[float, float]]) -> bool:
    """Every (σ², τ) of TINY, every ε, every split of m ≤ 3 keys into j new and m − j shared, both directions:
    the formula is an upper bound of the exact enumeration and equal to it within 1e-7 relative (the 1e-9
    margin on the key release probability moves it by up to ~2e-8)."""
    for (sigma2, tau), eps in itertools.product(TINY, EPSILONS):
        for m in range(1, 4):
            for j in range(m + 1):
                got = fn(sigma2, tau, j, m - j, eps)
                want = brute_force(sigma2, tau, j, m - j, eps)
                for g, w in zip(got, want):
                    if not (g >= w - 1e-15 and g <= w * (1 + 1e-7) + 1e-15):
                        return False
    return True


def test_the_profile_equals_the_exact_enumeration_of_tiny_cases():
    assert matches_brute_force(real)


@pytest.mark.parametrize("broken", [broken_no_new_key_term, broken_unshifted_epsilon, broken_weighted_reverse],
                         ids=lambda f: f.__name__)
def test_broken_profiles_are_caught(broken):
    assert not matches_brute_force(broken)


def test_j_fixed_at_zero_is_caught():
    """The max over j matters: with j fixed at 0 (every key shared) the calibrated σ² would accept half the
    threshold, where a user with new keys is exposed with δ more than 1000 times the target."""
    cal = calibrate_exact(epsilon=1.0, delta=1e-6, max_keys_per_user=5)
    low = cal.threshold // 2
    only_shared = max(max(real(cal.sigma2, low, 0, 5, 1.0)), 0.0)
    assert only_shared <= 1e-6  # the broken calibration's check passes at τ/2 ...
    assert sparse_histogram_delta(sigma2=cal.sigma2, threshold=low, max_keys_per_user=5, epsilon=1.0) > 1e-3
    # ... and on a tiny case the enumeration confirms the new-key cases dominate
    exact = max(max(brute_force(Fraction(2), 3, j, 2 - j, 1.0)) for j in range(3))
    assert max(brute_force(Fraction(2), 3, 0, 2, 1.0)) < exact / 2


@pytest.mark.parametrize("sigma2,tau", TINY)
@pytest.mark.parametrize("dk", [1, 2, 3])
def test_the_real_mechanism_is_within_the_bound_and_m_equal_delta_is_the_worst_case(sigma2, tau, dk):
    """The real release also thresholds the shared keys (post-processing): its exact δ is at most the bound;
    and the max over all m ≤ Δ equals the max over j at m = Δ (dropping a shared key is post-processing)."""
    for eps in EPSILONS:
        bound = sparse_histogram_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=dk, epsilon=eps)
        everything = max(max(real(sigma2, tau, j, m - j, eps)) for m in range(1, dk + 1) for j in range(m + 1))
        assert bound == pytest.approx(everything, rel=2e-9)
        for j in range(dk + 1):
            assert max(brute_force(sigma2, tau, j, dk - j, eps, censor_shared=True)) <= bound


def _continuous_delta(s: float, eps: float) -> float:
    """Balle & Wang 2018 Thm 8: Φ(−ε/s + s/2) − e^ε·Φ(−ε/s − s/2), s = ‖shift‖₂/σ."""
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    return phi(-eps / s + s / 2) - math.exp(eps) * phi(-eps / s - s / 2)


@pytest.mark.parametrize("sigma2,d,eps", [(100, 5, 1.0), (400, 20, 0.5), (36, 1, 0.5), (1000, 3, 0.2)])
def test_the_shared_term_is_the_gaussian_profile_at_large_sigma(sigma2, d, eps):
    """At large σ the discrete Gaussian's profile approaches the continuous one for L2 shift √d."""
    assert shared_keys_delta(sigma2=sigma2, shifted_keys=d, epsilon=eps) == pytest.approx(
        _continuous_delta(math.sqrt(d / sigma2), eps), rel=0.02)


@pytest.mark.parametrize("dk,eps", [(1, 1.0), (5, 1.0), (5, 0.1), (20, 0.5), (3, 2.0)])
def test_the_profile_is_never_below_its_parts(dk, eps):
    """δ(ε) ≥ the threshold's δ_τ (all keys new: j = Δ) and ≥ the uncensored Gaussian's δ_G(Δ, ε) (j = 0)."""
    cal = calibrate_histogram(epsilon=eps, threshold_delta=5e-7, conversion_delta=5e-7, max_keys_per_user=dk)
    for tau in (cal.threshold // 2, cal.threshold, 2 * cal.threshold):
        bound = sparse_histogram_delta(sigma2=cal.sigma2, threshold=tau, max_keys_per_user=dk, epsilon=eps)
        assert bound >= selection_delta(sigma2=cal.sigma2, threshold=tau, max_keys_per_user=dk) * (1 - 1e-12)
        assert bound >= shared_keys_delta(sigma2=cal.sigma2, shifted_keys=dk, epsilon=eps)


def test_the_sum_pmfs_carry_their_lost_mass_and_sum_to_one():
    for s in _sum_pmfs(Fraction(900), 6):
        assert s.lost < 1e-20
        assert float(s.pmf.sum()) + s.lost == pytest.approx(1.0, abs=1e-12)
        assert len(s.pmf) == 1 or s.pmf[0] >= 1e-30 and s.pmf[-1] >= 1e-30  # trimmed tails


@pytest.mark.parametrize("dk,eps,delta", [(1, 1.0, 1e-6), (5, 1.0, 1e-6), (5, 0.5, 1e-7), (20, 1.0, 1e-6),
                                          (2, 1.0, 0.05)])
def test_the_exact_calibration_meets_its_target_with_the_smallest_threshold(dk, eps, delta):
    cal = calibrate_exact(epsilon=eps, delta=delta, max_keys_per_user=dk)
    at = sparse_histogram_delta(sigma2=cal.sigma2, threshold=cal.threshold, max_keys_per_user=dk, epsilon=eps)
    below = sparse_histogram_delta(sigma2=cal.sigma2, threshold=cal.threshold - 1, max_keys_per_user=dk,
                                   epsilon=eps)
    assert at <= delta < below or cal.threshold == 1
    assert exact_threshold(sigma2=cal.sigma2, epsilon=eps, delta=delta, max_keys_per_user=dk) == cal.threshold


@pytest.mark.parametrize("dk,eps", [(1, 1.0), (5, 1.0), (5, 0.1), (20, 0.5), (20, 2.0)])
def test_the_exact_calibration_beats_the_zcdp_one_at_the_same_total_delta(dk, eps):
    """At the same single-release (ε, δ): less noise and a lower threshold than the zCDP calibration
    (δ/2 for the threshold, δ/2 for the conversion)."""
    delta = 1e-6
    exact = calibrate_exact(epsilon=eps, delta=delta, max_keys_per_user=dk)
    zcdp = calibrate_histogram(epsilon=eps, threshold_delta=delta / 2, conversion_delta=delta / 2,
                               max_keys_per_user=dk)
    assert exact.sigma2 < zcdp.sigma2 and exact.threshold < zcdp.threshold


def test_the_exact_calibrations_event_carries_both_guarantees_and_the_cap_takes_the_smaller_epsilon():
    cal = calibrate_histogram_exact(epsilon=1.0, delta=1e-6, max_keys_per_user=5)
    (event,) = cal.events()
    assert isinstance(event, ZCdpAndApproxDpEvent) and cal.calibration == "exact"
    assert (event.epsilon, event.delta, event.rho) == (1.0, 1e-6, 5 / (2 * float(cal.sigma2)))
    tau_delta = selection_delta(sigma2=cal.sigma2, threshold=cal.threshold, max_keys_per_user=5)
    assert tau_delta <= event.zcdp_delta <= min(1e-6, tau_delta * (1 + 1e-7))
    one = compose([event])
    assert one.epsilon(1e-7) == 1.0  # one window: the exact ε (the zCDP route alone would say more)
    assert one.delta(1e-7) == pytest.approx(1e-6 + 1e-7)
    many = compose([event.repeated(400)])
    assert many.epsilon(1e-7) < 400 * 1.0 / 4  # long horizons: the zCDP route wins by far


def test_the_exact_histogram_releases_with_its_calibration():
    cal = calibrate_histogram_exact(epsilon=1.0, delta=1e-6, max_keys_per_user=5)
    res = gaussian_histogram({"a": 500, "b": 1}, calibration=cal, max_keys=10, rng=3)
    assert [row.key for row in res.rows] == ["a"] and res.threshold == cal.threshold
    assert res.events == cal.events()


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="max_keys_per_user"):
        sparse_histogram_delta(sigma2=2, threshold=3, max_keys_per_user=0, epsilon=1.0)
    with pytest.raises(ValueError, match="shifted_keys"):
        shared_keys_delta(sigma2=2, shifted_keys=-1, epsilon=1.0)
    with pytest.raises(ValueError, match="delta"):
        calibrate_exact(epsilon=1.0, delta=0.0, max_keys_per_user=2)


# "Every number computed here is an upper bound" (module docstring): the truncations that keep the sums finite
# must add what they drop to ``lost``, and a certain release must cost δ = 1. These fail on the broken variants a
# mutation run of the module left alive (lost mass subtracted, the tail bound's exponent inverted, p ≥ 1 ignored).


@pytest.mark.parametrize("sigma2", [0.5, 4.0, 900.0])
def test_the_truncated_pmf_over_states_every_probability_and_its_lost_tail(sigma2):
    from stream_dp.mechanisms.sparse_gaussian_profile import _truncated_pmf

    z = _truncated_pmf(sigma2)
    k = -z.offset
    wide = np.arange(-(k + 4000), k + 4001, dtype=np.float64)
    weights = np.exp(-(wide**2) / (2 * sigma2))
    true = weights / weights.sum()
    inside = true[4000:4000 + 2 * k + 1]
    assert np.all(z.pmf >= inside * (1 - 1e-13))
    outside = float(true[:4000].sum() + true[4000 + 2 * k + 1:].sum())
    assert 0 < outside <= z.lost < 1e-25


def test_trimming_moves_the_dropped_tails_into_lost():
    from stream_dp.mechanisms.sparse_gaussian_profile import _SumPmf, _trim

    pmf = np.array([3e-33, 2e-31, 0.25, 0.5, 0.25 - 4e-31, 1e-31, 4e-32])
    trimmed = _trim(_SumPmf(-3, pmf, 1e-35))
    assert (trimmed.offset, list(trimmed.pmf)) == (-1, [0.25, 0.5, 0.25 - 4e-31])
    assert trimmed.lost == pytest.approx(1e-35 + 3e-33 + 2e-31 + 1e-31 + 4e-32, rel=1e-12, abs=0)


def test_the_shared_term_counts_the_lost_mass_even_where_almost_no_term_is_positive():
    s2, d = Fraction(50), 3
    s = _sum_pmfs(s2, d)[d]
    last = s.offset + len(s.pmf) - 1
    eps = (2 * last + d) / (2 * float(s2)) - 1e-3  # only the last entry of S's pmf has a positive term
    assert shared_keys_delta(sigma2=s2, shifted_keys=d, epsilon=eps) >= s.lost > 0


def test_a_threshold_every_new_key_clears_costs_delta_one():
    forward, backward = direction_deltas(sigma2=1, threshold=-100, new_keys=1, shared_keys=2, epsilon=1.0)
    assert forward == 1.0
    assert backward == shared_keys_delta(sigma2=1, shifted_keys=2, epsilon=1.0)
    assert sparse_histogram_delta(sigma2=1, threshold=-100, max_keys_per_user=3, epsilon=1.0) == 1.0
