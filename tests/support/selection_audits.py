"""Empirical privacy audits of the selection mechanisms, each paired with a deliberately broken variant.

Each scenario picks neighbours where the mechanism's guarantee is nearly tight, runs
:func:`~tests.support.audit.audit_privacy`, and returns the result. The real mechanism must pass and
the broken one must be flagged (tests/unit/test_audit.py). Print the table with::

    python -m tests.support.selection_audits
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from stream_dp.accounting.composition import zcdp_to_epsilon
from stream_dp.mechanisms import em_with_gap, limited_domain_topk, noisy_topk_with_gap
from stream_dp.mechanisms.gaussian_histogram import (
    HistogramCalibration,
    calibration_for_sigma2,
    gaussian_histogram,
)
from stream_dp.mechanisms import limited_domain as limited_domain_module
from tests.support.audit import AuditResult, audit_privacy


def _no_log_offset(*, k_bar: int, epsilon: float, delta: float, max_keys_per_user: int) -> float:
    """The broken ⊥ offset: h_⊥ = h_(k̄+1) + 1, without ln(min(Δ, k̄)/δ)/ε."""
    return 1.0


def ldt_boundary(*, broken: bool = False, trials: int = 20_000, rng: int = 1,
                 confidence: float = 0.999) -> AuditResult:
    """δ part of limited-domain top-k: an empty window vs. one user on key "a" (k = k̄ = 1, ε = 1, δ = 0.1).

    Real: P[release "a"] = 1/(1 + e^{ln(1/δ)}) ≈ 0.091 ≤ δ on x′ and 0 on x -> passes at (1, 0.1).
    Broken (no ln(min(Δ,k̄)/δ)/ε offset): P[release "a"] = 1/2 on x′, 0 on x -> flagged."""
    def mechanism(counts, generator):
        r = limited_domain_topk(counts, k=1, k_bar=1, epsilon=1.0, delta=0.1, max_keys_per_user=1,
                                rng=generator)
        return r.keys + (("⊥",) if r.hit_bottom else ())
    return _with_offset(_no_log_offset if broken else None,
                        lambda: audit_privacy(mechanism, {}, {"a": 1}, epsilon=1.0, delta=0.1,
                                              trials=trials, confidence=confidence, rng=rng))


def ldt_epsilon(*, broken: bool = False, trials: int = 20_000, rng: int = 2,
                confidence: float = 0.999) -> AuditResult:
    """ε part: one user adds to "a" and "b" (Δ = 2), same limited domain on both sides (k = 1, k̄ = 2,
    δ = 0.5 so ⊥ is frequent). One outcome is ε-range-bounded: audit at (ε = 1, δ = 0).
    Broken: the Gumbel noise of 2ε (half the noise) while claiming ε -> the ⊥ ratio approaches e²."""
    run_epsilon = 2.0 if broken else 1.0

    def mechanism(counts, generator):
        r = limited_domain_topk(counts, k=1, k_bar=2, epsilon=run_epsilon, delta=0.5, max_keys_per_user=2,
                                rng=generator)
        return r.keys + (("⊥",) if r.hit_bottom else ())
    return audit_privacy(mechanism, {"a": 3, "b": 2, "c": 0}, {"a": 4, "b": 3, "c": 0}, epsilon=1.0,
                         delta=0.0, trials=trials, confidence=confidence, rng=rng)


def _winner_and_gap(output):
    """A Top-1 with Gap output's events: "winner w with gap >= t", t in {0, 1, 2, 3}."""
    key, gap = output
    return frozenset((key, f"gap>={t}") for t in (0, 1, 2, 3) if gap >= t)


def noisy_topk(*, broken: bool = False, trials: int = 20_000, rng: int = 3,
               confidence: float = 0.999) -> AuditResult:
    """Noisy Top-1 with Gap, monotone Laplace (scale k/ε = 1 at ε = 1): x = {a: 0, b: 0} vs x′ = {a: 1,
    b: 0}; events "winner w with gap ≥ t" for t ∈ {0, 1, 2, 3}. Real: worst ratio ≈ e^0.8 < e.
    Broken: half the noise (scale ½) while claiming ε = 1 -> P[b, gap ≥ 2] ratio ≈ e^1.7 -> flagged."""
    run_epsilon = 2.0 if broken else 1.0

    def mechanism(values, generator):
        return noisy_topk_with_gap(values, k=1, epsilon=run_epsilon, monotone=True, rng=generator)[0]

    return audit_privacy(mechanism, {"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}, epsilon=1.0, delta=0.0,
                         trials=trials, event=_winner_and_gap, multi_label=True, confidence=confidence,
                         rng=rng)


def noisy_topk_discrete(*, broken: bool = False, trials: int = 20_000, rng: int = 5,
                        confidence: float = 0.999) -> AuditResult:
    """Noisy Top-1 with Gap, monotone, discrete Laplace noise (the ``watch_topk`` default, issue 16), same
    neighbours and events as :func:`noisy_topk`; ties go to the earlier key ("a"), the case integer noise
    adds. Broken: half the noise (the scale of 2ε) while claiming ε = 1 -> flagged."""
    run_epsilon = 2.0 if broken else 1.0

    def mechanism(values, generator):
        return noisy_topk_with_gap(values, k=1, epsilon=run_epsilon, monotone=True, noise="geometric",
                                   rng=generator)[0]

    return audit_privacy(mechanism, {"a": 0, "b": 0}, {"a": 1, "b": 0}, epsilon=1.0, delta=0.0,
                         trials=trials, event=_winner_and_gap, multi_label=True, confidence=confidence,
                         rng=rng)


def em_gap(*, broken: bool = False, trials: int = 20_000, rng: int = 4,
           confidence: float = 0.999) -> AuditResult:
    """Exponential mechanism with gap (Alg 7), sensitivity 1, non-monotone neighbours x = {a: 0, b: 1},
    x′ = {a: 1, b: 0}; events "winner w with gap ≥ t", t ∈ {0, 1, 2, 3}. Real (ε = 1): the gap is
    Logistic, P[a, gap ≥ t] = σ(±½ − t), worst ratio → e¹ from below. Broken: the scores scaled by ε/Δ
    instead of ε/(2Δ) (the factor 2 forgotten) -> ratio ≈ e^1.7 at t = 2 -> flagged."""
    run_epsilon = 2.0 if broken else 1.0

    def mechanism(scores, generator):
        return em_with_gap(scores, epsilon=run_epsilon, rng=generator)

    return audit_privacy(mechanism, {"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 0.0}, epsilon=1.0, delta=0.0,
                         trials=trials, event=_winner_and_gap, multi_label=True, confidence=confidence, rng=rng)


def histogram_threshold_delta(*, broken: bool = False, trials: int = 20_000, rng: int = 5,
                              confidence: float = 0.999) -> AuditResult:
    """δ part of the Gaussian histogram: an empty window vs. one user on key "a" (Δ = 1, σ² = 1, threshold δ
    = 0.1). Real: τ = 3, P[release "a"] = P[Z ≥ 2] ≈ 0.059 ≤ δ on x′ and 0 on x -> passes at
    (ε(ρ = ½, δ′ = 0.01), 0.1 + δ′). Broken (τ = 1, "any present key"): P[release "a"] = P[Z ≥ 0] ≈ 0.6
    -> flagged. The event is the released key set (the counts only add the ε part, audited below)."""
    real = calibration_for_sigma2(sigma2=1, threshold_delta=0.1, max_keys_per_user=1)
    cal = HistogramCalibration(real.sigma2, 1, real.threshold_delta, 1) if broken else real

    def mechanism(counts, generator):
        return tuple(row.key for row in gaussian_histogram(counts, calibration=cal, max_keys=5, rng=generator).rows)
    return audit_privacy(mechanism, {}, {"a": 1}, epsilon=zcdp_to_epsilon(real.rho, 0.01), delta=0.1 + 0.01,
                         trials=trials, confidence=confidence, rng=rng)


def histogram_counts(*, broken: bool = False, trials: int = 20_000, rng: int = 6,
                     confidence: float = 0.999) -> AuditResult:
    """ε part: one user adds 1 to each of Δ = 9 keys far above τ (x = 100 each, x′ = 101 each), σ² = 9, so
    ρ = Δ/(2σ²) = ½ and the claim is (ε_CKS(ρ, δ′) ≈ 2.75, δ′ + 1e-9) with δ′ = 0.01 (the ledger's conversion,
    CKS20 Cor. 13; the classic ρ + 2·sqrt(ρ·ln(1/δ′)) was 3.53); events: "the sum of the released counts
    ≥ 900 + t" (the sum is the sufficient statistic). Real: worst ratio ≈ e^2 < e^2.75. Broken: σ² = 1, noise
    for L2 sensitivity 1 instead of √Δ (ρ really 4.5) -> flagged."""
    real = calibration_for_sigma2(sigma2=9, threshold_delta=1e-9, max_keys_per_user=9)
    cal = HistogramCalibration(Fraction(1), real.threshold, real.threshold_delta, 9) if broken else real
    keys = tuple("abcdefghi")

    def mechanism(counts, generator):
        return sum(row.count for row in gaussian_histogram(counts, calibration=cal, max_keys=9, rng=generator).rows)

    def events(total):
        return frozenset(f"sum>={900 + t}" for t in range(0, 18, 2) if total >= 900 + t)
    return audit_privacy(mechanism, {k: 100 for k in keys}, {k: 101 for k in keys},
                         epsilon=zcdp_to_epsilon(real.rho, 0.01), delta=0.01 + 1e-9, trials=trials,
                         event=events, multi_label=True, confidence=confidence, rng=rng)


def exact_histogram_threshold(*, broken: bool = False, trials: int = 20_000, rng: int = 9,
                              confidence: float = 0.999) -> AuditResult:
    """The histogram calibrated by its exact joint profile (docs/privacy.md §8c), Δ = 2, claim (ε, δ) = (1, 0.05)
    -> σ² = 3.595, τ = 6. Neighbours: one user on a shared key "s" (5 vs 6) and a new key "n" (0 vs 1) -- the
    mixed case j = 1 the joint profile is about. Events: which keys are released, with "s"'s noisy count
    bucketed. Real: passes. Broken: the calibration with the new keys left out of the profile (j = 0 only),
    where no τ is needed and τ = 1 ("any present key") -> "n" is released with probability ≈ 0.6, flagged."""
    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram_exact

    real = calibrate_histogram_exact(epsilon=1.0, delta=0.05, max_keys_per_user=2)
    cal = HistogramCalibration(real.sigma2, 1, real.threshold_delta, 2, real.exact_epsilon,
                               real.exact_delta) if broken else real

    def mechanism(counts, generator):
        rows = gaussian_histogram(counts, calibration=cal, max_keys=5, rng=generator).rows
        return tuple((row.key, min(max(row.count, 0), 12) // 2 if row.key == "s" else None) for row in rows)
    return audit_privacy(mechanism, {"s": 5}, {"s": 6, "n": 1}, epsilon=1.0, delta=0.05, trials=trials,
                         confidence=confidence, rng=rng)


def weighted_histogram_scores(*, broken: bool = False, trials: int = 20_000, rng: int = 10,
                              confidence: float = 0.999) -> AuditResult:
    """ε part of the per-user weighted histogram (docs/privacy.md §8d), through the production scores: 300 users on
    key "a" alone vs. the same plus u on "a" alone (Δ = 4, U = 16: a user on one key weighs ⌊16·√4⌋ = 32, her
    whole norm U·√Δ), σ_w² = 1024, so ρ = U²Δ/(2σ_w²) = ½ and the claim is (ε_CKS(½, δ′ = 0.01) ≈ 2.75, δ′);
    events: "a's noisy score ≥ (its score without u) + t". Real: worst ratio ≈ e^2.4 (t = 80). Broken: weights normalised
    in L1 instead of L2 (U·Δ/m: 64 for a user on one key, norm 2·U·√Δ, ρ really 2) -> flagged."""
    from stream_dp.mechanisms.weighted_histogram import (
        WEIGHT_UNIT,
        WeightedHistogramCalibration,
        weighted_histogram,
        weighted_scores,
        weighted_threshold,
    )

    dk = 4
    cal = WeightedHistogramCalibration(sigma2=Fraction(1024), threshold=weighted_threshold(
        sigma2=1024, delta=1e-9, max_keys_per_user=dk), threshold_delta=1e-9, max_keys_per_user=dk)

    def scores(pairs):
        if not broken:
            return weighted_scores(pairs, max_keys_per_user=dk)
        return {"a": sum(WEIGHT_UNIT * dk for _ in pairs)}  # every user here is on one key: U·Δ/1
    others = [(f"o{i}", "a") for i in range(300)]
    base = scores(others)["a"]

    def mechanism(pairs, generator):
        rows = weighted_histogram(scores(pairs), calibration=cal, max_keys=5, rng=generator).rows
        return next(row.count for row in rows if row.key == "a")

    def events(score):
        return frozenset(f"a>={base + t}" for t in range(0, 160, 16) if score >= base + t)
    return audit_privacy(mechanism, others, others + [("u", "a")], epsilon=zcdp_to_epsilon(cal.rho, 0.01),
                         delta=0.01 + 1e-9, trials=trials, event=events, multi_label=True, confidence=confidence,
                         rng=rng)


class _GumbelAtScaleOne(np.random.Generator):
    """A generator whose Gumbel draws ignore the scale asked for (noise for ε = 1 whatever ε is): broken."""

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return super().gumbel(loc, 1.0, size)


class _NegatedGumbel(np.random.Generator):
    """A generator whose Gumbel draws are negated (a light right tail: not the exponential mechanism): broken."""

    def gumbel(self, loc=0.0, scale=1.0, size=None):
        return -super().gumbel(loc, scale, size)


def _known_domain_winner(broken_generator: type[np.random.Generator] | None, others: dict[str, float], *,
                         trials: int, rng: int, confidence: float) -> AuditResult:
    """Known-domain top-1 (one-shot Gumbel over the domain, docs/privacy.md §9), ε_t = 0.5: one user on key "a"
    (0 vs 1) below the ``others``; the event is the winner. Claim: ε_t (a range-bounded ε_t outcome is ε_t-DP)."""
    from stream_dp.mechanisms.known_domain import known_domain_topk

    def mechanism(counts, generator):
        if broken_generator is not None:
            generator = broken_generator(generator.bit_generator)
        return known_domain_topk(counts, {}, k=1, k_bar=1, track_epsilon=0.5, discover_epsilon=None, delta=1e-6,
                                 max_keys_per_user=1, rng=generator).keys
    return audit_privacy(mechanism, {"a": 0.0, **others}, {"a": 1.0, **others}, epsilon=0.5, trials=trials,
                         confidence=confidence, rng=rng)


def known_domain_noise_scale(*, broken: bool = False, trials: int = 20_000, rng: int = 11,
                             confidence: float = 0.999) -> AuditResult:
    """"a" below two keys at 2. Real: P["a"] ≈ 0.155 vs 0.232, ratio ≈ e^0.40. Broken: Gumbel noise of scale 1
    instead of 1/ε_t (P["a"] ≈ 0.063 vs 0.155, ratio ≈ e^0.9) -> flagged."""
    return _known_domain_winner(_GumbelAtScaleOne if broken else None, {"b": 2.0, "c": 2.0}, trials=trials,
                                rng=rng, confidence=confidence)


def known_domain_noise_sign(*, broken: bool = False, trials: int = 20_000, rng: int = 12,
                            confidence: float = 0.999) -> AuditResult:
    """"a" below four keys at 4. Real: P["a"] ≈ 0.033 vs 0.053, ratio ≈ e^0.47. Broken: the Gumbel draws
    subtracted instead of added (P["a"] ≈ 0.0027 vs 0.011, ratio ≈ e^1.4) -> flagged. (With two keys the two laws
    coincide: a difference of two Gumbels is logistic either way.)"""
    return _known_domain_winner(_NegatedGumbel if broken else None, {key: 4.0 for key in "bcde"}, trials=trials,
                                rng=rng, confidence=confidence)


def _with_offset(offset: Callable | None, run: Callable[[], AuditResult]) -> AuditResult:
    if offset is None:
        return run()
    original = limited_domain_module.bottom_offset
    limited_domain_module.bottom_offset = offset
    try:
        return run()
    finally:
        limited_domain_module.bottom_offset = original


def laplace_histogram_threshold_delta(*, broken: bool = False, trials: int = 20_000, rng: int = 7,
                                      confidence: float = 0.999) -> AuditResult:
    """δ part of the Laplace histogram: an empty window vs. one user on key "a" (Δ = 1, ε = 1 so b = 1,
    threshold δ = 0.1). Real: τ = 4 with the boundary coin r ≈ 0.87 at a noisy count of 3, P[release "a"] =
    P[L ≥ 3] + r·P[L = 2] = 0.1/1.1 (p/(1−p) = 0.1) -> passes at (1, 0.1 + 0.011). Broken (τ = 1, no coin,
    "any present key"): P[L ≥ 0] ≈ 0.73 -> flagged."""
    from stream_dp.mechanisms.laplace_histogram import (
        LaplaceHistogramCalibration,
        calibrate_laplace_histogram,
        laplace_histogram,
    )

    real = calibrate_laplace_histogram(epsilon=1.0, threshold_delta=0.1, max_keys_per_user=1)
    cal = LaplaceHistogramCalibration(real.scale, 1, real.threshold_delta, 1) if broken else real

    def mechanism(counts, generator):
        return tuple(row.key for row in laplace_histogram(counts, calibration=cal, max_keys=5, rng=generator).rows)
    return audit_privacy(mechanism, {}, {"a": 1}, epsilon=real.epsilon, delta=0.1 + 0.011, trials=trials,
                         confidence=confidence, rng=rng)


def laplace_histogram_counts(*, broken: bool = False, trials: int = 20_000, rng: int = 8,
                             confidence: float = 0.999) -> AuditResult:
    """ε part: one user adds 1 to each of Δ = 4 keys far above τ (x = 100 each, x′ = 101 each), ε = 1 so
    b = Δ/ε = 4; events "the sum of the released counts ≥ 400 + t". Real: the sum moves by 4 against noise
    of scale 4 per key -> within e^1. Broken: b = 1/ε, noise for L1 sensitivity 1 instead of Δ (ε really
    4) -> flagged."""
    from stream_dp.mechanisms.laplace_histogram import (
        LaplaceHistogramCalibration,
        calibrate_laplace_histogram,
        laplace_histogram,
    )

    real = calibrate_laplace_histogram(epsilon=1.0, threshold_delta=1e-9, max_keys_per_user=4)
    cal = LaplaceHistogramCalibration(Fraction(1), real.threshold, real.threshold_delta, 4) if broken else real
    keys = tuple("abcd")

    def mechanism(counts, generator):
        return sum(row.count for row in laplace_histogram(counts, calibration=cal, max_keys=4, rng=generator).rows)

    def events(total):
        return frozenset(f"sum>={400 + t}" for t in range(0, 12, 2) if total >= 400 + t)
    return audit_privacy(mechanism, {k: 100 for k in keys}, {k: 101 for k in keys}, epsilon=real.epsilon,
                         delta=1e-9, trials=trials, event=events, multi_label=True, confidence=confidence,
                         rng=rng)


SCENARIOS: dict[str, Callable[..., AuditResult]] = {
    "limited_domain_topk boundary (δ)": ldt_boundary,
    "limited_domain_topk peel (ε)": ldt_epsilon,
    "noisy_topk_with_gap": noisy_topk,
    "noisy_topk_with_gap (discrete)": noisy_topk_discrete,
    "em_with_gap": em_gap,
    "gaussian_histogram threshold (δ)": histogram_threshold_delta,
    "gaussian_histogram counts (ε)": histogram_counts,
    "gaussian_histogram exact profile (ε, δ)": exact_histogram_threshold,
    "laplace_histogram threshold (δ)": laplace_histogram_threshold_delta,
    "laplace_histogram counts (ε)": laplace_histogram_counts,
    "weighted_histogram scores (ε)": weighted_histogram_scores,
    "known_domain_topk noise scale (ε)": known_domain_noise_scale,
    "known_domain_topk noise sign (ε)": known_domain_noise_sign,
}


def main() -> None:  # pragma: no cover - report script
    print(f"{'scenario':36} {'variant':8} {'claimed':>12} {'ε lower bd':>10} {'ε estimate':>10}  verdict")
    for name, scenario in SCENARIOS.items():
        for broken in (False, True):
            r = scenario(broken=broken)
            claimed = f"({r.epsilon:g}, {r.delta:g})"
            print(f"{name:36} {'broken' if broken else 'real':8} {claimed:>12} "
                  f"{r.epsilon_lower_bound:10.3f} {r.epsilon_estimate:10.3f}  "
                  f"{'VIOLATED' if r.violated else 'ok'}")


if __name__ == "__main__":  # pragma: no cover
    main()
