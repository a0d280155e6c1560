"""The release type registry (stream_dp/release/types.py): one entry per type, in the config's order, each
entry consistent with the builder it names; the worker, the budget plan and the metrics take what sets a type
apart from its entry."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry

from stream_dp.config import RELEASE_TYPES, config_from_mapping
from stream_dp.release import types
from stream_dp.release.budget_plan import plan_for
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.types import REGISTRY, ReleaseType, lead_of, stateful_of, watching

ALL_ON = {t: {"enabled": True} for t in RELEASE_TYPES}


def test_one_entry_per_config_section_in_release_order() -> None:
    assert tuple(REGISTRY) == RELEASE_TYPES
    assert all(name == t.name for name, t in REGISTRY.items())


def test_each_batch_entry_builds_records_of_its_own_type() -> None:
    cfg = config_from_mapping({"releases": {t: ({"enabled": True} if t != "sample" else {}) for t in RELEASE_TYPES}},
                              environ={})
    for t in REGISTRY.values():
        if t.builder is not None:
            assert t.builder(cfg).type == t.name
    assert set(types.BUILDERS) == {t.name for t in REGISTRY.values() if not t.stateful}


def test_the_lead_is_released_first_and_the_stateful_type_is_charged_per_instance() -> None:
    """The unit sends the lead's reservation with the claim and rides the alerts on its round trips: it must be
    the first type of every window it is enabled in; only the stateful type is charged per instance opening."""
    leads = [t.name for t in REGISTRY.values() if t.leads]
    assert leads == [RELEASE_TYPES[0]]
    assert [t.name for t in REGISTRY.values() if t.stateful] == ["alerts"]
    assert {t.name: t.charge for t in REGISTRY.values() if t.charge == "instance"} == {"alerts": "instance"}
    assert lead_of(["topk", "alerts"]) is REGISTRY["topk"] and lead_of(["alerts", "histogram"]) is None
    assert stateful_of(["topk", "histogram"]) is None and stateful_of(["topk", "alerts"]) is REGISTRY["alerts"]
    assert watching(["watch_topk"]) and watching(["alerts"]) and not watching(["topk", "histogram", "sample"])


def test_an_entry_has_a_builder_or_an_opening_never_both_or_neither() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ReleaseType("x", None)
    with pytest.raises(ValueError, match="exactly one"):
        ReleaseType("x", REGISTRY["topk"].builder, opening=REGISTRY["alerts"].opening)


def test_the_budget_plan_reads_charge_notes_and_heavy_hitters_from_the_registry(monkeypatch) -> None:
    cfg = config_from_mapping({"releases": {**ALL_ON, "sample": {}}}, environ={})
    plan = plan_for(cfg)
    assert "alerts" not in plan.per_window and plan.alerts_instance
    assert any(note.startswith("watch_topk is charged every window") for note in plan.notes)
    assert plan.choice is not None
    only_histogram = config_from_mapping({"releases": {"topk": {"enabled": False}, "histogram": {"enabled": True}}},
                                         environ={})
    assert plan_for(only_histogram).choice is not None
    # the entry decides: the histogram no longer a heavy hitter -> no recommendation inputs
    monkeypatch.setitem(REGISTRY, "histogram", dataclasses.replace(REGISTRY["histogram"], heavy_hitter=False))
    assert plan_for(only_histogram).choice is None


def test_each_type_counts_its_own_metrics() -> None:
    registry = CollectorRegistry()
    metrics = ReleaseMetrics(registry)
    count_topk, count_alerts = REGISTRY["topk"].count, REGISTRY["alerts"].count
    assert count_topk is not None and count_alerts is not None
    count_topk(metrics, {"hit_bottom": True})
    count_topk(metrics, {"hit_bottom": False})
    count_alerts(metrics, {"items": [{"above": True}, {"above": False}], "status": "released",
                           "info": {"opened": True}, "cost": {"epsilon": 0.5}})
    value = registry.get_sample_value
    assert value("stream_dp_release_bottom_stops_total") == 1
    assert value("stream_dp_svt_answers_total", {"answer": "above"}) == 1
    assert value("stream_dp_svt_instances_opened_total") == 1 and value("stream_dp_svt_instance_epsilon_total") == 0.5


def test_which_items_show_their_key_is_the_types_rule() -> None:
    """A learned domain takes a histogram item's key only when its interval lies above 0; other types' items all."""
    from stream_dp.release.released_domain import found_keys

    histogram = {"type": "histogram", "status": "released", "items": [{"key": "a", "ci_low": 1}, {"key": "b", "ci_low": 0}]}
    topk = {"type": "topk", "status": "released", "items": [{"key": "a", "rank": 1}, {"key": "b", "rank": 2}]}
    assert found_keys(histogram) == ["a"] and found_keys(topk) == ["a", "b"]
    assert [t.name for t in REGISTRY.values() if t.shows_key is not None] == ["histogram"]
