"""Budget caps, the startup check, scopes."""

from __future__ import annotations

import math

import pytest

from stream_dp.accounting.budget import BudgetCap, check_budget_covers, decide, scope_for
from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import ApproxDpEvent, PureDpEvent, RangeBoundedEvent
from stream_dp.config import BudgetConfig, ConfigError


@pytest.mark.parametrize("args,setting", [
    ((-1.0, 1e-5, 1e-7), "budget.epsilon"), ((0.0, 1e-5, 1e-7), "budget.epsilon"),
    ((math.inf, 1e-5, 1e-7), "budget.epsilon"), ((1.0, 1.0, 1e-7), "budget.delta"),
    ((1.0, -1e-5, 1e-7), "budget.delta"), ((1.0, 1e-5, 1e-5), "budget.delta_prime"),
    ((1.0, 1e-5, 0.0), "budget.delta_prime"), ((True, 1e-5, 1e-7), "budget.epsilon"),
])
def test_misconfigured_cap_names_the_setting(args, setting):
    with pytest.raises(ConfigError, match=rf"^{setting.replace('.', '[.]')} "):
        BudgetCap(*args)


def test_cap_from_config_and_lifetime():
    cfg = BudgetConfig(epsilon=2.0, delta=1e-6, delta_prime=1e-8, lifetime_epsilon=20.0)
    assert BudgetCap.from_config(cfg) == BudgetCap(2.0, 1e-6, 1e-8)
    life = BudgetCap.lifetime_from_config(cfg)
    assert life == BudgetCap(20.0, 1e-6, 1e-8, name="budget.lifetime")
    cfg2 = BudgetConfig(epsilon=2.0, delta=1e-6, delta_prime=1e-8, lifetime_epsilon=20.0, lifetime_delta=1e-4)
    assert BudgetCap.lifetime_from_config(cfg2).delta == 1e-4
    assert BudgetCap.lifetime_from_config(BudgetConfig()) is None


def test_config_validation_of_lifetime_delta():
    from stream_dp.config import config_from_mapping

    with pytest.raises(ConfigError, match=r"^budget\.lifetime_delta"):
        config_from_mapping({"budget": {"lifetime_epsilon": 5.0, "lifetime_delta": 1.5}}, environ={})
    cfg = config_from_mapping({"budget": {"lifetime_epsilon": 5.0, "lifetime_delta": 1e-4}}, environ={})
    assert BudgetCap.lifetime_from_config(cfg.budget).delta == 1e-4


def test_check_budget_covers_names_the_setting():
    cap = BudgetCap(1.0, 1e-6, 1e-7)
    worst_topk = [RangeBoundedEvent(0.1, count=10, delta=1e-7)]
    check_budget_covers(cap, worst_topk)  # fits: ≈ 0.91 via zCDP
    with pytest.raises(ConfigError, match=r"^budget\.epsilon = 1 is smaller than one release"):
        check_budget_covers(cap, worst_topk + [PureDpEvent(0.5)])
    with pytest.raises(ConfigError, match=r"^budget\.delta = 1e-06 .*budget\.delta_prime"):
        check_budget_covers(cap, [ApproxDpEvent(0.1, 1e-6)])
    with pytest.raises(ConfigError, match=r"^budget\.lifetime_epsilon = 0.1 is smaller"):
        check_budget_covers(BudgetCap(0.1, 1e-6, 1e-7, name="budget.lifetime"), worst_topk)
    with pytest.raises(ConfigError, match=r"^budget\.lifetime_delta must be"):
        BudgetCap(1.0, 2.0, 1e-7, name="budget.lifetime")


def test_decide_boundary_is_inclusive():
    cap = BudgetCap(0.5, 1e-5, 1e-7)
    assert decide(compose([PureDpEvent(0.25, count=2)]), cap) == "ok"  # exactly at the cap
    assert decide(compose([PureDpEvent(0.25, count=2), PureDpEvent(1e-9)]), cap) == "epsilon_cap"
    assert decide(compose([ApproxDpEvent(0.1, 1e-5 - 1e-7)]), cap) == "ok"
    assert decide(compose([ApproxDpEvent(0.1, 1e-5)]), cap) == "delta_cap"


@pytest.mark.parametrize("t,period,scope", [
    (1795910400, 86400, "2026-11-29"), (1795910399.5, 86400, "2026-11-28"), (1795996799, 86400, "2026-11-29"),
    (1795950000, 3600, "p1795950000"), (1795953599.9, 3600, "p1795950000"), (0, 7, "p0"), (-1, 10, "p-10"),
])
def test_scope_for(t, period, scope):
    assert scope_for(t, period) == scope


@pytest.mark.parametrize("t,period", [(0, 0), (0, 1.5), (math.nan, 60), (0, True)])
def test_scope_for_rejects_bad_input(t, period):
    with pytest.raises(ValueError):
        scope_for(t, period)


def test_default_config_budget_plan_of_docs_privacy_md():
    """The defaults' top-k and sample settings fit 32 worst-case hourly windows (top-k + sample) per day after one
    alert instance (28 after two: docs/privacy.md §5); top-k alone fits 92. The windows are what the release
    worker reserves: its builders' measurements at the configured window budgets."""
    from stream_dp.config import Config
    from stream_dp.release.types import BUILDERS

    cfg = Config()  # top-k and sample are off by default: their settings' worst cases, as if switched on
    cap = BudgetCap.from_config(cfg.budget)
    measurements = {name: BUILDERS[name](cfg).measurement for name in ("topk", "sample")}

    def windows_that_fit(window, alerts=1):
        spent, n = [PureDpEvent(cfg.releases.alerts.epsilon)] * alerts, 0
        while decide(compose(spent + window), cap) == "ok":
            spent, n = spent + window, n + 1
        return n

    topk = list(measurements["topk"].privacy_map())
    sample = list(measurements["sample"].privacy_map())
    assert [(e.count, e.delta) for e in topk] == [(10, 1e-7)]  # window_delta = 2e-7: half for the ⊥ rule
    assert sample == [ApproxDpEvent(0.1, 2e-8, count=5, mechanism="private_weighted_sample")]
    assert windows_that_fit(topk + sample) == 32
    assert windows_that_fit(topk + sample, alerts=2) == 28
    assert windows_that_fit(topk) == 92
