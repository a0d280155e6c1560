"""The release worker's ``stream_dp_budget_*`` gauges stay bounded: the current and the previous budget period
only, however many periods the service lives through (one series per period forever would grow Prometheus's
index by four series a day and fill every budget panel with dead periods)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stream_dp.release import metrics as release_metrics
from stream_dp.release.metrics import ReleaseMetrics

BUDGET = ("stream_dp_budget_epsilon_spent", "stream_dp_budget_epsilon_remaining", "stream_dp_budget_delta_spent",
          "stream_dp_budget_delta_remaining")


def periods(n: int) -> list[str]:
    return [(date(2026, 11, 2) + timedelta(days=d)).isoformat() for d in range(n)]


def series(registry: CollectorRegistry) -> dict[str, dict[str, float]]:
    """metric → {scope: value} of the exposition, as Prometheus would scrape it."""
    out: dict[str, dict[str, float]] = {name: {} for name in BUDGET}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name in out:
                out[sample.name][sample.labels["scope"]] = sample.value
    return out


def charge(m: ReleaseMetrics, scope: str, spent: float) -> None:
    m.budget(scope, epsilon_spent=spent, epsilon_remaining=10 - spent, delta_spent=1e-7, delta_remaining=9.9e-6)


def simulate(m: ReleaseMetrics, scopes: list[str]) -> None:
    for scope in scopes:  # a few releases per period, each raising what it has spent
        for spent in (0.5, 1.5, 3.2):
            charge(m, scope, spent)


def test_thirty_periods_leave_two_series_per_budget_metric_the_current_and_the_previous():
    registry = CollectorRegistry()
    m = ReleaseMetrics(registry)
    days = periods(30)
    simulate(m, days)
    got = series(registry)
    for name in BUDGET:
        assert set(got[name]) == set(days[-2:]), name
    assert got["stream_dp_budget_epsilon_spent"] == {days[-2]: 3.2, days[-1]: 3.2}
    print(f"\nseries per metric after {len(days)} periods: " + ", ".join(f"{n} {len(v)}" for n, v in got.items()))


def test_a_late_record_of_an_older_period_does_not_push_out_the_current_one():
    """A worker that republishes or catches up on an old window must not replace the current period's gauges
    with a period two or more behind (kept by period order, not by arrival order)."""
    registry = CollectorRegistry()
    m = ReleaseMetrics(registry)
    days = periods(5)
    simulate(m, days)
    charge(m, days[0], 9.0)  # four periods late
    charge(m, days[3], 4.0)  # the previous period: still kept, updated
    got = series(registry)["stream_dp_budget_epsilon_spent"]
    assert got == {days[3]: 4.0, days[4]: 3.2}


def test_the_bound_is_what_keeps_the_series_few(monkeypatch):
    """The broken variant -- keep every period -- leaves one series per period: the test above would fail."""
    monkeypatch.setattr(release_metrics, "SCOPES_KEPT", 10**6)
    registry = CollectorRegistry()
    simulate(ReleaseMetrics(registry), periods(30))
    assert len(series(registry)["stream_dp_budget_epsilon_spent"]) == 30


@pytest.mark.parametrize("scopes", [["p1795950000", "p1795953600", "p1795957200"], periods(3)])
def test_period_names_sort_in_time_order(scopes):
    registry = CollectorRegistry()
    m = ReleaseMetrics(registry)
    for scope in reversed(scopes):  # newest first: the older ones are never kept
        charge(m, scope, 1.0)
    assert set(series(registry)["stream_dp_budget_delta_spent"]) == set(scopes[-2:])
