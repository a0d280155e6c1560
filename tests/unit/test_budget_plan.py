"""``stream-dp budget plan`` and the workers' startup refusal (issue 16): every window is charged every
enabled release type, alerts instances are bounded per period, the defaults cover a day of hourly windows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stream_dp.accounting.budget import decide
from stream_dp.accounting.composition import compose
from stream_dp.cli import main
from stream_dp.config import ConfigError, config_from_mapping, load_config
from stream_dp.release.budget_plan import plan_for, require_full_period

ROOT = Path(__file__).resolve().parents[2]
# top-k, alerts and sample in every window: the defaults before the histogram (issue 46), what issue 16 planned
THREE_TYPES = {"topk": {"enabled": True}, "alerts": {"enabled": True}, "sample": {"enabled": True},
               "histogram": {"enabled": False}}
THREE_TYPES_TOML = "".join(f"[releases.{name}]\nenabled = {str(v['enabled']).lower()}\n" for name, v in THREE_TYPES.items())


def releases(**changes: dict) -> dict:
    """THREE_TYPES with some settings changed."""
    return {name: {**THREE_TYPES.get(name, {}), **changes.get(name, {})} for name in {*THREE_TYPES, *changes}}


def test_default_config_covers_a_day_of_hourly_windows_at_worst_case() -> None:
    cfg = load_config(ROOT / "config" / "stream-dp.toml", environ={})
    plan = plan_for(cfg)
    assert plan.windows_per_period == 24
    fit = plan.windows_fitting(plan.period_cap)
    assert fit >= 24
    # the search agrees with composing the windows by hand with the ledger's rule
    assert decide(compose(plan.events(fit)), plan.period_cap) == "ok"
    assert decide(compose(plan.events(fit + 1)), plan.period_cap) != "ok"
    require_full_period(cfg)  # the workers start
    assert set(plan.per_window) == {"histogram"}  # the release-choice table's type for a trending page


def test_limited_domain_topk_is_one_setting_away_and_still_fits_the_day() -> None:
    cfg = load_config(ROOT / "config" / "stream-dp.toml", environ={"STREAM_DP_RELEASES__TOPK__ENABLED": "true"})
    plan = require_full_period(cfg)  # the workers start
    assert set(plan.per_window) == {"topk", "histogram"}
    assert plan.windows_fitting(plan.period_cap) >= 24


def test_an_unbounded_alerts_watchlist_is_what_broke_the_day() -> None:
    """Without the instance bound an SVT instance may open every window: only 8 hourly windows fit (7 with the classic zCDP conversion; issue 16
    item 5); the workers refuse to start unless told to accept a partial period."""
    cfg = config_from_mapping({"releases": releases(alerts={"max_instances_per_period": 0})}, environ={})
    plan = plan_for(cfg)
    assert plan.windows_fitting(plan.period_cap) == 8
    with pytest.raises(ConfigError, match="only 8 worst-case window"):
        require_full_period(cfg)
    allowed = config_from_mapping({"releases": releases(alerts={"max_instances_per_period": 0}),
                                   "budget": {"allow_partial_period": True}}, environ={})
    require_full_period(allowed)


def test_every_enabled_type_is_counted_every_window() -> None:
    base = config_from_mapping({"releases": THREE_TYPES}, environ={})
    more = config_from_mapping({"releases": releases(argmax={"enabled": True}, watch_topk={"enabled": True})},
                               environ={})
    assert set(plan_for(base).per_window) == {"topk", "sample"}  # alerts: charged per instance, not per window
    assert set(plan_for(more).per_window) == {"topk", "sample", "argmax", "watch_topk"}
    assert plan_for(more).windows_fitting(plan_for(more).period_cap) < plan_for(base).windows_fitting(
        plan_for(base).period_cap)


def test_lifetime_cap_counts_periods() -> None:
    cfg = config_from_mapping({"budget": {"lifetime_epsilon": 30.0}}, environ={})
    summary = plan_for(cfg).summary()
    assert summary["windows_fitting_lifetime"] > summary["windows_per_period"]


def test_cli_plan_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "plan", "--config", str(ROOT / "config" / "stream-dp.toml")]) == 0
    text = capsys.readouterr().out
    assert "windows fitting one period: 67 of 24 -- OK" in text
    path = tmp_path / "short.toml"
    path.write_text(THREE_TYPES_TOML.replace("[releases.alerts]\n", "[releases.alerts]\nmax_instances_per_period = 0\n"))
    assert main(["budget", "plan", "--json", "--config", str(path)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["windows_fitting_period"] == 8 and data["period_covered"] is False


def test_the_release_worker_refuses_to_start_on_a_short_plan(tmp_path: Path) -> None:
    path = tmp_path / "short.toml"
    path.write_text(THREE_TYPES_TOML.replace("[releases.alerts]\n", "[releases.alerts]\nmax_instances_per_period = 0\n")
                    + "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    for module in ("workers.release", "workers.ingest"):
        proc = subprocess.run([sys.executable, "-m", module, "--config", str(path)], capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "budget.allow_partial_period" in proc.stderr


def test_alerts_open_at_most_the_configured_instances_per_period() -> None:
    from stream_dp.config import AlertsConfig
    from stream_dp.release.alerts import AlertsRun
    from stream_dp.release.windows import Window

    counts = {f"k{i}": 10_000 for i in range(5)}  # every answer positive: each instance exhausts at once
    cfg = AlertsConfig(watchlist=tuple(counts), threshold=100.0, k=1, epsilon=1.0, max_instances_per_period=2)
    state, opened, limited = None, [], []
    for i in range(4):
        scope = "p0" if i < 3 else "p1"
        run = AlertsRun(cfg, Window(i * 3600, (i + 1) * 3600), scope, state, list(counts), rng=i)
        draft, state = run.answer(counts)
        opened.append(draft.info["opened"])
        limited.append(draft.info["instance_limit_reached"])
        assert len(run.open_events) == int(run.opens)
        if run.limited:
            assert draft.items == [] and draft.info["unanswered"] == len(counts)
    assert opened == [True, True, False, True]  # the third window of p0 is over the limit; p1 starts afresh
    assert limited == [False, False, True, False]


def test_the_start_check_composes_no_more_windows_than_a_period_holds(monkeypatch) -> None:
    """A generous cap (budget.epsilon = 10⁹, as tests and trial deployments use) once made every worker
    search up to 10⁶ windows at start, composing each candidate's events one by one (about a minute of CPU):
    the start check only needs to know whether one period's windows fit."""
    from stream_dp.release.budget_plan import BudgetPlan

    examined: list[int] = []
    real = BudgetPlan.events

    def events(self, windows: int, periods: int = 1):
        examined.append(windows)
        return real(self, windows, periods)

    monkeypatch.setattr(BudgetPlan, "events", events)
    cfg = config_from_mapping({"budget": {"epsilon": 1e9, "delta": 0.5}}, environ={})
    plan = require_full_period(cfg)
    assert examined and max(examined) <= plan.windows_per_period == 24


def test_a_bounded_search_is_exact_below_its_bound() -> None:
    cfg = config_from_mapping({"releases": releases(alerts={"max_instances_per_period": 0})}, environ={})
    plan = plan_for(cfg)
    assert plan.windows_fitting(plan.period_cap) == 8  # the unbounded answer
    for at_most, expected in ((24, 8), (9, 8), (8, 8), (7, 7), (5, 5), (1, 1), (0, 0)):
        assert plan.windows_fitting(plan.period_cap, at_most=at_most) == expected, at_most
