"""The empirical privacy audit helper (tests.support.audit) and the selection-mechanism audits."""

from __future__ import annotations

import math

import pytest

from tests.support import selection_audits
from tests.support.audit import audit_privacy, audit_samples


def _randomized_response(bit, rng):  # exactly ln(3)-DP
    return bit if rng.random() < 0.75 else 1 - bit


def test_false_alarm_rate_is_bounded_by_one_minus_confidence():
    """Randomized response is tight at ε = ln 3. At confidence 0.9 each audit false-alarms with
    probability ≤ 0.1; over 50 seeds we require ≤ 12 alarms (P[Bin(50, 0.1) > 12] ≈ 0.002 is this
    test's false-failure rate; the bound is loose, so it is smaller in practice)."""
    alarms = sum(audit_privacy(_randomized_response, 0, 1, epsilon=math.log(3), trials=2000,
                               confidence=0.9, rng=seed).violated for seed in range(50))
    assert alarms <= 12


def test_flags_an_understated_epsilon():
    r = audit_privacy(_randomized_response, 0, 1, epsilon=0.8, trials=5000, confidence=0.999, rng=4)
    assert r.violated and r.epsilon_lower_bound > 0.8
    assert abs(r.epsilon_estimate - math.log(3)) < 0.15
    assert "VIOLATED" in r.summary()


def test_delta_slack_is_applied():
    """M(x) = 0; M(x′) = 1 with probability 0.05: (0, 0.05)-DP but not (ε, 0)-DP for any ε."""
    x, x_prime = [0] * 4000, [1] * 200 + [0] * 3800
    assert not audit_samples(x, x_prime, epsilon=0.01, delta=0.05, confidence=0.999).violated
    assert audit_samples(x, x_prime, epsilon=0.01, delta=0.0, confidence=0.999).violated
    assert audit_samples(x, x_prime, epsilon=0.01, delta=0.03, confidence=0.999).violated


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="equal length"):
        audit_samples([1, 2], [1], epsilon=1.0)
    with pytest.raises(ValueError, match="confidence"):
        audit_samples([1], [1], epsilon=1.0, confidence=1.0)
    with pytest.raises(ValueError, match="trials"):
        audit_privacy(_randomized_response, 0, 1, epsilon=1.0, trials=0)


@pytest.mark.slow  # a statistical audit: 20,000 trials of each mechanism (1-25 s per scenario)
@pytest.mark.parametrize("name", list(selection_audits.SCENARIOS))
def test_real_mechanism_passes_and_broken_variant_is_flagged(name):
    """Each scenario (tests/support/selection_audits.py) at confidence 0.999: the real mechanism
    false-alarms with probability ≤ 1e-3; the broken variant (no ln(min(Δ,k̄)/δ)/ε offset, half the
    noise, or the exponential mechanism's factor 2 forgotten) is flagged with a wide margin at 20,000 trials (see the printed table in the module)."""
    scenario = selection_audits.SCENARIOS[name]
    real, broken = scenario(broken=False), scenario(broken=True)
    assert not real.violated, real.summary()
    assert broken.violated, broken.summary()
