"""The ledger's ρ-zCDP → (ε, δ) conversion (CKS20 Cor. 13): sound, tight, and below the classic bound.

Four independent checks on a grid of (ρ, δ):

1. **never below the exact Gaussian privacy profile** (Balle & Wang 2018, Thm. 8): the Gaussian mechanism
   with L2 sensitivity 1 and σ = 1/sqrt(2ρ) is exactly ρ-zCDP, so any valid conversion ε must satisfy
   δ_G(ε) = Φ(−ε/s + s/2) − e^ε·Φ(−ε/s − s/2) ≤ δ, s = sqrt(2ρ);
2. **CKS20's own statement in its δ form**, minimised independently (scipy): δ_CKS(ε) ≤ δ, and ε is tight
   (δ_CKS(ε − 1e-9·ε) > δ: the search found the infimum);
3. **OpenDP's implementation** of the same conversion (``make_zCDP_to_approxDP``): equal to 1e-9 relative,
   never below it by more than 1e-12;
4. **never above the classic ρ + 2·sqrt(ρ ln 1/δ)**.

:func:`conversion_violations` runs them; broken variants of the formula's terms are flagged.
"""

from __future__ import annotations

import math

import pytest

from stream_dp.accounting import composition
from stream_dp.accounting.composition import loose_zcdp_to_epsilon, zcdp_to_epsilon

RHOS = (1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0)
DELTAS = (1e-12, 1e-9, 1e-7, 1e-6, 1e-5, 1e-3, 0.05)
GRID = [(rho, delta) for rho in RHOS for delta in DELTAS]


def gaussian_profile_delta(rho: float, eps: float) -> float:
    """Balle & Wang 2018: δ(ε) of the Gaussian mechanism with sensitivity/σ = s = sqrt(2ρ) (log-space)."""
    from scipy.special import log_ndtr

    s = math.sqrt(2 * rho)
    la, lb = log_ndtr(-eps / s + s / 2), log_ndtr(-eps / s - s / 2)
    return math.exp(la) * -math.expm1(eps + lb - la)


def cks_log_delta(rho: float, eps: float) -> float:
    """ln δ of CKS20 Cor. 13, δ = inf_α exp((α−1)(αρ−ε))/(α−1)·(1−1/α)^α, minimised by scipy over ln(α−1)."""
    from scipy.optimize import minimize_scalar

    def log_delta(u: float) -> float:
        a = 1 + math.exp(u)
        return (a - 1) * (a * rho - eps) - u + a * math.log1p(-1 / a)

    best = min((minimize_scalar(log_delta, bounds=(lo, lo + 10), method="bounded", options={"xatol": 1e-12})
                for lo in range(-30, 30, 10)), key=lambda r: r.fun)
    return float(best.fun)


def conversion_violations(conversion) -> list[str]:
    """Every (ρ, δ) of the grid where ``conversion`` breaks one of the module docstring's checks 1, 2, 4."""
    bad = []
    for rho, delta in GRID:
        eps = conversion(rho, delta)
        if gaussian_profile_delta(rho, eps) > delta * (1 + 1e-9):
            bad.append(f"below the Gaussian profile at rho={rho}, delta={delta}: eps={eps}")
        if cks_log_delta(rho, eps) > math.log(delta) + 1e-9:
            bad.append(f"below CKS20 Cor. 13 at rho={rho}, delta={delta}: eps={eps}")
        elif eps > 0 and cks_log_delta(rho, eps * (1 - 1e-9)) <= math.log(delta):
            bad.append(f"not tight at rho={rho}, delta={delta}: eps={eps}")
        if eps > loose_zcdp_to_epsilon(rho, delta):
            bad.append(f"above the classic bound at rho={rho}, delta={delta}: eps={eps}")
    return bad


def test_conversion_is_sound_tight_and_below_the_classic_bound():
    assert conversion_violations(zcdp_to_epsilon) == []


def test_conversion_equals_opendp_make_zcdp_to_approxdp():
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    space = dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float)
    for rho in RHOS:
        gaussian = space >> dp.m.then_gaussian(scale=1 / math.sqrt(2 * rho))  # ρ = 1/(2σ²)
        assert gaussian.map(1.0) == pytest.approx(rho, rel=1e-12)
        curve = dp.c.make_zCDP_to_approxDP(gaussian).map(1.0)
        for delta in DELTAS:
            ours, theirs = zcdp_to_epsilon(rho, delta), curve.epsilon(delta)
            assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12), (rho, delta)
            assert ours >= theirs * (1 - 1e-12), (rho, delta)  # rounded up, never below


def test_conversion_gains_over_the_classic_bound():
    # the numbers behind docs/evaluation's "σ ≈ 12.3 → ≈ 10.4" (ε_w = 1, δ′ = δ_w/2 = 5e-7)
    assert zcdp_to_epsilon(0.5, 1e-6) == pytest.approx(5.221534444, abs=1e-9)
    assert loose_zcdp_to_epsilon(0.5, 1e-6) == pytest.approx(5.756521770, abs=1e-9)
    for rho, delta in GRID:
        assert zcdp_to_epsilon(rho, delta) < loose_zcdp_to_epsilon(rho, delta)


def test_conversion_is_monotone_in_rho_and_delta():
    for delta in DELTAS:
        eps = [zcdp_to_epsilon(rho, delta) for rho in RHOS]
        assert eps == sorted(eps)
    for rho in RHOS:
        eps = [zcdp_to_epsilon(rho, delta) for delta in DELTAS]
        assert eps == sorted(eps, reverse=True)


def test_conversion_edges():
    assert zcdp_to_epsilon(0.0, 1e-6) == 0.0
    assert zcdp_to_epsilon(math.inf, 1e-6) == math.inf
    with pytest.raises(ValueError, match="rho"):
        zcdp_to_epsilon(math.nan, 1e-6)
    with pytest.raises(ValueError, match="delta_prime"):
        zcdp_to_epsilon(0.1, 1.5)


BROKEN_TERMS = {
    # ln(1/δ)/(α − 1) dropped: ε collapses
    "no_log_delta_term": lambda rho, L, a: (a * rho, -math.log(a) / (a - 1), math.log(1 - 1 / a)),
    # ln α counted twice
    "double_log_alpha": lambda rho, L, a: (a * rho, (L - 2 * math.log(a)) / (a - 1), math.log(1 - 1 / a)),
    # ln(1 − 1/α) counted twice
    "double_log_one_minus": lambda rho, L, a: (a * rho, (L - math.log(a)) / (a - 1), 2 * math.log(1 - 1 / a)),
    # order α − 1 in place of α in the first term (the RDP curve of ρ-zCDP is αρ)
    "alpha_minus_one_rho": lambda rho, L, a: ((a - 1) * rho, (L - math.log(a)) / (a - 1), math.log(1 - 1 / a)),
}


@pytest.mark.parametrize("name", sorted(BROKEN_TERMS))
def test_broken_conversions_are_flagged(monkeypatch, name):
    monkeypatch.setattr(composition, "_order_terms", BROKEN_TERMS[name])
    assert conversion_violations(composition.zcdp_to_epsilon), name


def test_a_conversion_that_stops_searching_early_is_flagged(monkeypatch):
    monkeypatch.setattr(composition, "_ORDER_STEPS", 5)  # sound (any α is valid) but not tight
    violations = conversion_violations(composition.zcdp_to_epsilon)
    assert violations and all(v.startswith("not tight") or v.startswith("above") for v in violations)
