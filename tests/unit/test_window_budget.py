"""A window budget (ε_w, δ_w) calibrates every release type so that one release is (ε_w, δ_w)-DP on its own, by the
same rule in the release worker (the builders), the library and the evaluation (stream_dp/release/window_budget.py)."""

from __future__ import annotations

import math

import pytest

from stream_dp.accounting.composition import compose
from stream_dp.config import config_from_mapping
from stream_dp.release import window_budget as wb
from stream_dp.release.builders import HistogramBuilder, TopkBuilder
from stream_dp.release.types import BUILDERS

DELTA_W = 1e-6


def _met(events, epsilon_w: float, delta_w: float) -> float:
    """The window guarantee of ``events`` relative to ε_w (≤ 1: met); its δ parts must fit δ_w."""
    spent = compose(events)
    assert min(spent.basic_delta, spent.zcdp_delta) <= delta_w
    return wb.window_epsilon(events, delta_w) / epsilon_w


@pytest.mark.parametrize("epsilon_w", [0.1, 1.0, 2.0])
@pytest.mark.parametrize("k", [1, 10, 50])
def test_topk_uses_exactly_its_window_budget(epsilon_w, k) -> None:
    from stream_dp.mechanisms import KnownDomainTopk, LimitedDomainTopk

    p = wb.topk_parameters(epsilon_w, DELTA_W, k)
    worst = LimitedDomainTopk(k=k, k_bar=k, epsilon=p.epsilon, delta=p.delta, max_keys_per_user=1).privacy_map()
    assert 1 - 1e-6 <= _met(worst, epsilon_w, DELTA_W) <= 1 + 1e-12
    bumped = LimitedDomainTopk(k=k, k_bar=k, epsilon=p.epsilon * 1.001, delta=p.delta, max_keys_per_user=1)
    assert _met(bumped.privacy_map(), epsilon_w, DELTA_W) > 1  # the search is tight
    for share in (0.0, 0.2):
        q = wb.known_domain_parameters(epsilon_w, DELTA_W, k, share)
        known = KnownDomainTopk(k=k, k_bar=k, track_epsilon=q.track_epsilon, discover_epsilon=q.discover_epsilon,
                                delta=q.delta, max_keys_per_user=1, discovery="limited_domain").privacy_map()
        assert 1 - 1e-6 <= _met(known, epsilon_w, DELTA_W) <= 1 + 1e-12
        assert (q.discover_epsilon is None) == (share == 0)


@pytest.mark.parametrize("epsilon_w", [0.1, 1.0, 2.0])
@pytest.mark.parametrize(("k", "dk"), [(1, 1), (10, 5), (50, 20)])
@pytest.mark.parametrize("share", [0.2, 0.8])
def test_threshold_discovery_uses_exactly_its_window_budget(epsilon_w, k, dk, share) -> None:
    """Known-domain top-k with threshold discovery (the service's default): the discovery histogram's (ρ_d, δ_τ)
    and k peels -- what the ledger reserves -- meet (ε_w, δ_w), to the σ² grid; δ_τ = δ_w/2; ρ_d is the share of
    what k outcomes at the per-outcome ε cost. A per-outcome ε 0.1 % larger overshoots (the search is tight)."""
    from stream_dp.accounting.events import ZCdpEvent
    from stream_dp.mechanisms.known_domain import threshold_discovery_calibration

    q = wb.known_domain_parameters(epsilon_w, DELTA_W, k, share, discovery="threshold", max_keys_per_user=dk)
    cal = q.discovery_calibration
    assert q.discovery == "threshold" and cal is not None and cal.threshold_delta == q.delta == DELTA_W / 2
    epsilon = q.track_epsilon / (1 - share) ** 0.5  # the per-outcome ε the split came from
    assert cal.rho <= share * k * epsilon**2 / 8 * (1 + 1e-12)
    reserved = q.measurement(k=k, k_bar=2 * k, max_keys_per_user=dk).privacy_map()
    assert isinstance(reserved[0], ZCdpEvent) and reserved[0].rho == cal.rho
    assert 0.99 <= _met(reserved, epsilon_w, DELTA_W) <= 1 + 1e-12
    bumped = wb.known_domain_at(epsilon * 1.001, k, share, q.delta, discovery="threshold", max_keys_per_user=dk)
    assert _met(bumped.measurement(k=k, k_bar=k, max_keys_per_user=dk).privacy_map(), epsilon_w, DELTA_W) > 1
    # the calibration is the mechanism module's, at that per-outcome ε
    assert cal == threshold_discovery_calibration(k=k, epsilon=epsilon, discovery_share=share, delta=q.delta,
                                                  max_keys_per_user=dk)


@pytest.mark.parametrize("kind", [{}, {"calibration": "exact"}, {"noise": "laplace"}, {"weighting": "per_user"}],
                         ids=["zcdp", "exact", "laplace", "per_user"])
@pytest.mark.parametrize(("epsilon_w", "dk"), [(0.5, 1), (1.0, 5), (2.0, 20)])
def test_every_histogram_calibration_meets_its_window_budget(kind, epsilon_w, dk) -> None:
    cal = wb.histogram_calibration(epsilon_w, DELTA_W, dk, **kind)
    (event,) = cal.events()
    if kind.get("calibration") == "exact":  # the exact profile's (ε, δ) is the event's basic route
        assert (event.epsilon, event.delta) == (epsilon_w, DELTA_W)
    assert _met(cal.events(), epsilon_w, DELTA_W) <= 1 + 1e-12
    if not kind:  # zcdp: the threshold and the conversion each get half of δ_w, and ε_w is used (to the σ² grid)
        assert cal.threshold_delta == DELTA_W / 2
        assert _met(cal.events(), epsilon_w, DELTA_W) > 0.99


def test_a_budget_read_as_per_outcome_is_caught() -> None:
    """The broken variant the rule guards against: a window ε handed to limited-domain top-k as its per-outcome ε
    (the meaning ``releases.topk.epsilon`` had) costs k times more than the window budget at k = 10."""
    from stream_dp.mechanisms import LimitedDomainTopk

    wrong = LimitedDomainTopk(k=10, k_bar=10, epsilon=1.0, delta=DELTA_W / 2, max_keys_per_user=1).privacy_map()
    assert _met(wrong, 1.0, DELTA_W) > 2


def test_calibrations_are_cached_and_checked() -> None:
    wb.histogram_calibration.cache_clear()
    a = wb.histogram_calibration(1.0, DELTA_W, 5, calibration="exact")
    assert wb.histogram_calibration(1.0, DELTA_W, 5, calibration="exact") is a
    assert wb.histogram_calibration.cache_info().hits == 1
    for bad, match in [((0.0, DELTA_W, 5), "epsilon"), ((1.0, 1.0, 5), "delta"), ((1.0, DELTA_W, 0), "max_keys")]:
        with pytest.raises(ValueError, match=match):
            wb.histogram_calibration(*bad)
    with pytest.raises(ValueError, match="noise"):
        wb.histogram_calibration(1.0, DELTA_W, 5, noise="cauchy")
    with pytest.raises(ValueError, match="calibration"):
        wb.histogram_calibration(1.0, DELTA_W, 5, noise="laplace", calibration="exact")


@pytest.mark.parametrize("release_type", ["topk", "histogram", "sample", "argmax", "watch_topk"])
@pytest.mark.parametrize("budget", [(0.3, 1e-6), (2.0, 1e-7)])
def test_the_worker_reserves_no_more_than_the_configured_window_budget(release_type, budget) -> None:
    """What the release worker reserves for one window of a type (its measurement's privacy map) is
    (window_epsilon, window_delta)-DP by the rule."""
    epsilon_w, delta_w = budget
    section = {"enabled": True, "window_epsilon": epsilon_w}
    if release_type != "watch_topk":
        section["window_delta"] = delta_w
    cfg = config_from_mapping({"releases": {release_type: section}}, environ={})
    measurement = BUILDERS[release_type](cfg).measurement
    assert _met(measurement.privacy_map(), epsilon_w, delta_w) <= 1 + 1e-12


def test_the_builders_measurement_is_computed_once_and_the_domain_is_per_call(monkeypatch) -> None:
    cfg = config_from_mapping({"releases": {"histogram": {"enabled": True, "calibration": "exact",
                                                          "domain": ["x"]}}}, environ={})
    builder = HistogramBuilder(cfg)
    calls = []
    real = wb.configured_histogram
    monkeypatch.setattr(wb, "configured_histogram", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    first = builder.measurement
    assert builder.measurement is first and len(calls) == 1
    assert first.domain == ()  # not frozen into it: the builder gives each window's domain to the call
    result = first({"a": 10}, rng=1, domain=("x", "y"))
    assert {row.key for row in result.rows} >= {"x", "y"}
    assert TopkBuilder(cfg).measurement is not None


def test_legacy_keys_keep_their_old_calibration() -> None:
    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram

    cfg = config_from_mapping({"releases": {"topk": {"epsilon": 0.25},
                                            "histogram": {"enabled": True, "epsilon": 0.7, "delta": 1e-8}}},
                              environ={})
    assert wb.configured_topk(cfg.releases.topk, max_keys_per_user=5) == wb.TopkParameters(0.25, 1e-7)  # old δ
    assert HistogramBuilder(cfg).calibration() == calibrate_histogram(
        epsilon=0.7, threshold_delta=1e-8, conversion_delta=cfg.budget.delta_prime, max_keys_per_user=5)
    params = HistogramBuilder(cfg).parameters()
    assert (params["epsilon"], params["delta"], params["delta_prime"]) == (0.7, 1e-8, 1e-7)
    assert "window_epsilon" not in params
    assert math.isclose(TopkBuilder(cfg).parameters()["epsilon"], 0.25)
