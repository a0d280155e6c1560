"""The discrete-Gaussian histogram: exact sampler, the threshold's exact δ, calibration and the release.

The δ tests recompute the discrete Gaussian's tail in 60-digit decimal arithmetic (independent of the
float64 code under test) and check the released δ = 1 − (1 − P[1 + Z ≥ τ])^Δ against the configured δ --
and that τ is the *smallest* such threshold (τ − 1 breaks δ), so a threshold off by one in the unsafe
direction, or one that forgets Δ, fails here.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from stream_dp.accounting.composition import loose_zcdp_to_epsilon, zcdp_to_epsilon
from stream_dp.accounting.events import ZCdpEvent
from stream_dp.mechanisms.discrete_gaussian import (
    discrete_gaussian_pmf,
    discrete_gaussian_quantile,
    discrete_gaussian_tail,
    sample_discrete_gaussian,
)
from stream_dp.mechanisms.gaussian_histogram import (
    calibrate_histogram,
    calibration_for_sigma2,
    gaussian_histogram,
    histogram_threshold,
    loose_rho_for_epsilon,
    selection_delta,
)


def exact_tail(sigma2: Fraction, m: int) -> Decimal:
    """P[Z ≥ m] for Z ~ N_Z(0, σ²), summed in 60-digit decimals out to 60σ (the rest is < 1e-700)."""
    with localcontext() as ctx:
        ctx.prec = 60
        s2 = Decimal(sigma2.numerator) / Decimal(sigma2.denominator)
        half = int(60 * math.sqrt(float(sigma2))) + 2
        weight = {y: (-(Decimal(y) ** 2) / (2 * s2)).exp() for y in range(0, half + 1)}
        norm = weight[0] + 2 * sum(weight[y] for y in range(1, half + 1))
        if m <= 0:
            upper = sum(weight[y] for y in range(1, -m + 1)) if m < 0 else Decimal(0)
            return (weight[0] + upper + sum(weight[y] for y in range(1, half + 1))) / norm
        return sum(weight[y] for y in range(m, half + 1)) / norm


def exact_selection_delta(sigma2: Fraction, tau: int, dk: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        return 1 - (1 - exact_tail(sigma2, tau - 1)) ** dk


CASES = [  # (σ², δ, Δ)
    (Fraction(1), Decimal("1e-6"), 1),
    (Fraction(30009, 200), Decimal("5e-7"), 5),  # ε = 1, Δ = 5 with the classic zCDP conversion
    (Fraction(108993, 1000), Decimal("5e-7"), 5),  # ε = 1, Δ = 5 with the ledger's CKS20 conversion
    (Fraction(2500), Decimal("1e-9"), 20),
    (Fraction(7, 3), Decimal("0.1"), 2),
    (Fraction(123456, 10), Decimal("1e-7"), 50),
]


@pytest.mark.parametrize(("sigma2", "delta", "dk"), CASES)
def test_the_threshold_delta_is_exactly_at_most_delta_and_tau_is_the_smallest(sigma2, delta, dk) -> None:
    tau = histogram_threshold(sigma2=sigma2, delta=float(delta), max_keys_per_user=dk)
    assert exact_selection_delta(sigma2, tau, dk) <= delta
    assert exact_selection_delta(sigma2, tau - 1, dk) > delta * Decimal(1 - 1e-6)  # τ − 1 would break δ
    # and the float δ the code reports agrees with the exact one
    assert float(exact_selection_delta(sigma2, tau, dk)) == pytest.approx(
        selection_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=dk), rel=1e-9)


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(9), Fraction(40001, 10)])
def test_the_float_tail_matches_the_exact_tail_far_out(sigma2) -> None:
    sd = math.sqrt(float(sigma2))
    for m in [-3, 0, 1, 2, int(3 * sd), int(8 * sd) + 1, int(20 * sd) + 1]:
        assert discrete_gaussian_tail(sigma2, m) == pytest.approx(float(exact_tail(sigma2, m)), rel=1e-10)


def test_a_threshold_that_forgets_the_keys_per_user_breaks_delta() -> None:
    """The broken variant: τ solved for Δ = 1 while a user can touch Δ = 20 keys."""
    sigma2, delta = Fraction(2500), Decimal("1e-9")
    tau_broken = histogram_threshold(sigma2=sigma2, delta=float(delta), max_keys_per_user=1)
    assert exact_selection_delta(sigma2, tau_broken, 20) > delta


def test_the_exact_sampler_follows_the_discrete_gaussian() -> None:
    sigma2 = Fraction(5, 2)
    draws = sample_discrete_gaussian(sigma2, 20_000, rng=11)
    ys, p = discrete_gaussian_pmf(sigma2)
    inside = (ys >= -5) & (ys <= 5)
    expected = np.append(p[inside], p[~inside].sum()) * len(draws)
    observed = np.append([np.sum(draws == y) for y in ys[inside]], np.sum(np.abs(draws) > 5))
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    # large σ (the rational-γ branch with big denominators): mean and variance
    big = sample_discrete_gaussian(Fraction(1_000_003, 7), 4_000, rng=12)
    assert abs(big.mean()) < 5 * math.sqrt(1_000_003 / 7 / 4_000)
    assert big.var() == pytest.approx(1_000_003 / 7, rel=0.1)


def test_the_interval_half_width_is_the_smallest_with_the_coverage() -> None:
    for sigma2 in (Fraction(1), Fraction(50), Fraction(10007, 3)):
        h = discrete_gaussian_quantile(sigma2, 0.95)
        cover = 1 - 2 * discrete_gaussian_tail(sigma2, h + 1)
        assert cover >= 0.95
        assert 1 - 2 * discrete_gaussian_tail(sigma2, h) < 0.95


def test_calibration_meets_epsilon_and_costs_rho_of_l2_sensitivity_sqrt_delta() -> None:
    for eps, dk in [(0.1, 1), (1.0, 5), (2.0, 20)]:
        cal = calibrate_histogram(epsilon=eps, threshold_delta=1e-7, conversion_delta=1e-7, max_keys_per_user=dk)
        assert zcdp_to_epsilon(cal.rho, 1e-7) <= eps
        assert zcdp_to_epsilon(cal.rho, 1e-7) == pytest.approx(eps, rel=1e-3)  # rounding σ² up costs little
        (event,) = cal.events()
        assert isinstance(event, ZCdpEvent)
        assert event.rho == pytest.approx(dk / (2 * float(cal.sigma2)))
        assert event.delta == 1e-7


def test_the_ledger_conversion_buys_less_noise_than_the_classic_one() -> None:
    """Same (ε, δ′): σ² and τ from the CKS20 conversion are smaller than from ρ + 2·sqrt(ρ·ln(1/δ′)) (issue 18)."""
    for eps, dk in [(0.1, 1), (1.0, 5), (2.0, 20)]:
        cal = calibrate_histogram(epsilon=eps, threshold_delta=5e-7, conversion_delta=5e-7, max_keys_per_user=dk)
        classic = calibration_for_sigma2(sigma2=dk / (2 * loose_rho_for_epsilon(eps, 5e-7)), threshold_delta=5e-7,
                                         max_keys_per_user=dk)
        assert loose_zcdp_to_epsilon(dk / (2 * float(classic.sigma2)), 5e-7) <= eps
        assert float(cal.sigma2) < 0.8 * float(classic.sigma2) and cal.threshold < classic.threshold
    cal = calibrate_histogram(epsilon=1.0, threshold_delta=5e-7, conversion_delta=5e-7, max_keys_per_user=5)
    assert (cal.sigma2, cal.threshold) == (Fraction(108993, 1000), 56)  # was 150.045 and 66


def test_release_keeps_keys_above_threshold_with_noisy_counts_and_intervals() -> None:
    cal = calibration_for_sigma2(sigma2=4, threshold_delta=1e-6, max_keys_per_user=1)
    counts = {"big": 1000, "mid": 500, "one": 1, "zero": 0}
    res = gaussian_histogram(counts, calibration=cal, max_keys=10, confidence=0.95, rng=5)
    assert [row.key for row in res.rows] == ["big", "mid"]
    for row in res.rows:
        assert abs(row.count - counts[row.key]) <= 12  # 6σ
        assert (row.ci_low, row.ci_high) == (row.count - res.ci_half_width, row.count + res.ci_half_width)
    assert res.above_threshold == 2 and not res.capped
    assert res.events == cal.events()


def test_the_cap_keeps_the_largest_noisy_counts_among_those_above_threshold() -> None:
    cal = calibration_for_sigma2(sigma2=1, threshold_delta=1e-6, max_keys_per_user=1)
    counts = {f"k{j}": 100 * j for j in range(1, 21)}
    res = gaussian_histogram(counts, calibration=cal, max_keys=5, rng=1)
    assert [row.key for row in res.rows] == [f"k{j}" for j in range(20, 15, -1)]
    assert res.above_threshold == 20 and res.capped


def test_an_empty_window_is_an_empty_release_with_the_same_cost() -> None:
    cal = calibration_for_sigma2(sigma2=9, threshold_delta=1e-6, max_keys_per_user=3)
    res = gaussian_histogram({}, calibration=cal, max_keys=10, rng=1)
    assert res.rows == () and res.above_threshold == 0
    assert res.events == cal.events()


def test_bad_inputs_name_the_parameter_without_echoing_data() -> None:
    cal = calibration_for_sigma2(sigma2=1, threshold_delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match="integer count") as info:
        gaussian_histogram({"secret-key": 2.5}, calibration=cal, max_keys=1, rng=1)
    assert "secret" not in str(info.value)
    with pytest.raises(ValueError, match="max_keys"):
        gaussian_histogram({"a": 1}, calibration=cal, max_keys=0, rng=1)
    with pytest.raises(ValueError, match="sigma2"):
        calibration_for_sigma2(sigma2=-1, threshold_delta=1e-6, max_keys_per_user=1)
    with pytest.raises(ValueError, match="delta"):
        histogram_threshold(sigma2=1, delta=0.0, max_keys_per_user=1)


def test_config_validates_the_histogram_section_naming_the_setting() -> None:
    from stream_dp.config import ConfigError, config_from_mapping

    cfg = config_from_mapping({"releases": {"histogram": {"enabled": True, "epsilon": 0.5}}}, environ={})
    assert cfg.releases.histogram.epsilon == 0.5 and cfg.releases.histogram.max_keys == 1000
    for bad, setting in [({"max_keys": 0}, "releases.histogram.max_keys"),
                         ({"delta": 0.0}, "releases.histogram.delta"),
                         ({"epsilon": -1.0}, "releases.histogram.epsilon"),
                         ({"confidence": 1.0}, "releases.histogram.confidence")]:
        with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
            config_from_mapping({"releases": {"histogram": {"enabled": True, **bad}}}, environ={})


def test_public_domain_keys_are_released_without_threshold_and_others_still_need_it() -> None:
    cal = calibration_for_sigma2(sigma2=4, threshold_delta=1e-6, max_keys_per_user=1)
    counts = {"hot": 1000, "rare": 1, "cat-a": 2}
    res = gaussian_histogram(counts, calibration=cal, max_keys=10, domain=["cat-a", "cat-b"], rng=3)
    by_key = {row.key: row for row in res.rows}
    assert set(by_key) == {"hot", "cat-a", "cat-b"}  # "rare" is outside the domain and below τ
    assert by_key["cat-a"].in_domain and by_key["cat-b"].in_domain and not by_key["hot"].in_domain
    assert abs(by_key["cat-b"].count) <= 12  # an absent domain key: 0 + noise
    assert res.above_threshold == 1 and res.kept == 3 and not res.capped
    assert res.events == cal.events()  # the domain changes nothing in the cost


def test_histogram_builder_reads_the_domain_file_and_names_the_setting(tmp_path) -> None:
    from stream_dp.config import ConfigError, config_from_mapping
    from stream_dp.release.builders import HistogramBuilder

    path = tmp_path / "catalogue.txt"
    path.write_text("x\ny\n\nx\n")
    cfg = config_from_mapping({"releases": {"histogram": {"enabled": True, "domain": ["w"],
                                                          "domain_file": str(path)}}}, environ={})
    assert HistogramBuilder(cfg).domain == ["w", "x", "y"]
    missing = config_from_mapping({"releases": {"histogram": {"domain_file": str(tmp_path / "no.txt")}}}, environ={})
    with pytest.raises(ConfigError, match=r"releases\.histogram\.domain_file"):
        HistogramBuilder(missing)


def test_a_seeded_release_draws_from_its_seed() -> None:
    """The evaluation's runs are seeded (docs/evaluation): the same seed gives the same release, another seed
    another one -- so the noise comes from the generator passed, not from a fresh one."""
    cal = calibration_for_sigma2(sigma2=25, threshold_delta=1e-6, max_keys_per_user=1)
    counts = {f"k{i}": 100 + i for i in range(40)}
    def rows(seed):
        return gaussian_histogram(counts, calibration=cal, max_keys=100, rng=seed).rows
    assert rows(7) == rows(7) != rows(8)


class _ScriptedBytes:
    """A byte source that hands out prepared draws and checks each request's size."""

    def __init__(self, size: int, values: list[int]) -> None:
        self.size, self.draws = size, [v.to_bytes(size, "big") for v in values]

    def bytes(self, n: int) -> bytes:
        assert n == self.size, f"asked for {n} bytes, the range needs {self.size}"
        return self.draws.pop(0)


def test_uniform_integers_beyond_2_62_reject_draws_at_or_above_n():
    """The exact samplers' uniform integer for n > 2⁶² (whole random bytes, the excess bits shifted off, a draw
    ≥ n rejected): n = 2⁶⁵ + 3 needs 66 bits, so 9 bytes with the low 6 bits dropped."""
    from stream_dp.mechanisms.discrete_gaussian import _uniform_below

    n = 2**65 + 3
    source = _ScriptedBytes(9, [(2**66 - 1) << 6, n << 6, ((n - 1) << 6) | 0b111111])
    assert _uniform_below(source, n) == n - 1  # the first two draws (above n, then exactly n) are rejected
    assert source.draws == []
    generator = np.random.default_rng(5)
    draws = [_uniform_below(generator, 3 * 2**62) for _ in range(3000)]
    assert all(0 <= d < 3 * 2**62 for d in draws)
    thirds = np.bincount([d >> 62 for d in draws], minlength=3)
    assert stats.chisquare(thirds).pvalue > 1e-3, thirds
