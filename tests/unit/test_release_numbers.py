"""Floating-point-safe released numbers (issue 16): with the default config every noisy number an alerts or
watch_topk release publishes is an integer drawn from discrete noise on integer counts."""

from __future__ import annotations

import json

from stream_dp.config import AlertsConfig, Config, WatchTopkConfig, config_from_mapping
from stream_dp.release.alerts import AlertsRun
from stream_dp.release.builders import WatchTopkBuilder
from stream_dp.release.windows import Window

COUNTS = {f"key-{i}": 1000 - 90 * i for i in range(10)}


def test_defaults_are_discrete() -> None:
    assert AlertsConfig().noise == "geometric" and WatchTopkConfig().noise == "geometric"
    cfg = config_from_mapping({}, environ={})
    assert cfg.releases.alerts.noise == "geometric" and cfg.releases.watch_topk.noise == "geometric"


def test_default_alerts_publish_integer_gaps_estimates_and_bounds() -> None:
    cfg = AlertsConfig(watchlist=tuple(COUNTS), threshold=100.0, k=20, epsilon=1.0)
    seen = 0
    for seed in range(30):
        draft, _ = AlertsRun(cfg, Window(0, 3600), "p0", None, list(COUNTS), rng=seed).answer(dict(COUNTS))
        record = json.loads(json.dumps(draft.to_record()))
        for item in record["items"]:
            if item["above"]:
                seen += 1
                for field in ("gap", "estimate", "lower_bound"):
                    assert type(item[field]) is int, (field, item[field])
                assert item["estimate"] - item["gap"] == 100
    assert seen > 100


def test_default_watch_topk_publishes_integer_gaps() -> None:
    cfg: Config = config_from_mapping({"releases": {"watch_topk": {"enabled": True, "k": 4}}}, environ={})
    builder = WatchTopkBuilder(cfg)
    for seed in range(20):
        record = json.loads(json.dumps(builder.run(Window(0, 3600), dict(COUNTS), seed).to_record()))
        assert len(record["items"]) == 4 and all(type(it["gap"]) is int for it in record["items"])


def test_a_non_integer_threshold_is_refused_with_geometric_noise() -> None:
    import pytest

    from stream_dp.config import ConfigError

    with pytest.raises(ConfigError, match="releases.alerts.threshold"):
        config_from_mapping({"releases": {"alerts": {"enabled": True, "threshold": 100.5}}}, environ={})
    config_from_mapping({"releases": {"alerts": {"threshold": 100.5, "noise": "laplace"}}}, environ={})
