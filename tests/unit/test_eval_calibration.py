"""Equal privacy per window: every method lands exactly on (ε_w, δ_w) under the project's accountant."""

from __future__ import annotations

import dataclasses
import math

import pytest

from stream_dp.accounting.composition import compose, zcdp_to_epsilon
from stream_dp.accounting.events import ApproxDpEvent, PureDpEvent, RangeBoundedEvent
from stream_dp.mechanisms import LimitedDomainTopk

from eval.calibration import calibrate, largest_parameter, window_epsilon

DELTA_W = 1e-6


@pytest.mark.parametrize("epsilon_w", [0.1, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("k", [10, 50])
def test_every_method_meets_and_uses_the_window_budget(epsilon_w, k):
    cal = calibrate(epsilon_w, DELTA_W, k)
    for name, events in cal.method_events().items():
        eps = window_epsilon(events, DELTA_W)
        assert eps <= epsilon_w * (1 + 1e-9), name
        assert eps >= epsilon_w * (1 - 1e-6), f"{name} leaves budget unused"
        assert max(compose(events).zcdp_delta, compose(events).basic_delta) <= DELTA_W, name
    # a slightly larger noise parameter would exceed the window budget (the search is tight)
    bumped = dataclasses.replace(cal, ldt_epsilon=cal.ldt_epsilon * 1.001, em_epsilon=cal.em_epsilon * 1.001)
    assert window_epsilon(bumped.ldt_events(), DELTA_W) > epsilon_w
    assert window_epsilon(bumped.method_events()["full_domain_em"], DELTA_W) > epsilon_w


def test_ldt_is_judged_by_the_events_the_ledger_reserves():
    cal = calibrate(1.0, DELTA_W, 10)
    assert cal.ldt_events() == LimitedDomainTopk(k=10, k_bar=10, epsilon=cal.ldt_epsilon, delta=cal.ldt_delta,
                                                 max_keys_per_user=1).privacy_map()


def test_window_epsilon_takes_the_better_route_with_the_delta_slack():
    # one (ε, δ) event: basic composition gives exactly (ε, δ)
    assert window_epsilon([ApproxDpEvent(1.0, DELTA_W)], DELTA_W) == 1.0
    # many range-bounded peels: the zCDP route with δ′ = δ_w − Σδ wins
    events = [RangeBoundedEvent(0.1, count=50, delta=DELTA_W / 2)]
    expected = zcdp_to_epsilon(50 * 0.1**2 / 8, DELTA_W / 2)
    assert expected < 5.0
    assert window_epsilon(events, DELTA_W) == pytest.approx(expected)
    # mechanism δ above the window δ: no valid guarantee
    assert window_epsilon([ApproxDpEvent(0.1, 2 * DELTA_W)], DELTA_W) == math.inf
    assert window_epsilon([PureDpEvent(0.3), PureDpEvent(0.2)], DELTA_W) == pytest.approx(0.5)


def test_largest_parameter_bisects_and_rejects_the_impossible():
    assert largest_parameter(lambda x: x * x, 4.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="epsilon"):
        largest_parameter(lambda x: 1.0 + x, 0.5)
    with pytest.raises(ValueError, match="epsilon_w"):
        calibrate(0.0, DELTA_W, 10)
