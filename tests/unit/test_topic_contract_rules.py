"""The topic contract's rules without a broker: the specs the settings give, and how a found config is
judged (stream_dp/topics.py); the settings a real broker would refuse are refused by the config."""

from __future__ import annotations

import pytest

from stream_dp import topics
from stream_dp.config import ConfigError, KafkaConfig, config_from_mapping
from stream_dp.wire import MESSAGE_OVERHEAD_BYTES


def test_the_contract_follows_the_settings():
    cfg = KafkaConfig(events_partitions=8, release_message_max_bytes=2_000_000, events_retention_ms=-1,
                      releases_retention_ms=86_400_000)
    specs = {s.role: s for s in topics.contract(cfg, brokers=5)}
    assert specs["events"].partitions == 8 and specs["events"].replication_factor == 3
    assert specs["events"].configs["retention.ms"] == "-1" and specs["events"].configs["retention.bytes"] == "-1"
    assert specs["releases"].configs["max.message.bytes"] == str(2_000_000 + MESSAGE_OVERHEAD_BYTES)
    assert specs["releases"].configs["retention.ms"] == "86400000"
    for spec in specs.values():
        assert spec.configs["message.timestamp.type"] == "CreateTime"
        assert spec.configs["cleanup.policy"] == "delete"
        assert spec.configs["min.insync.replicas"] == "2"
    single = {s.role: s for s in topics.contract(cfg, brokers=1)}
    assert single["events"].replication_factor == 1 and single["events"].configs["min.insync.replicas"] == "1"


@pytest.mark.parametrize(("name", "value", "wanted", "ok"), [
    ("retention.ms", "-1", "-1", True),
    ("retention.ms", "604800000", "-1", False),  # Kafka's default: a backfill would be deleted
    ("retention.ms", "-1", "86400000", True),  # unlimited keeps more than asked
    ("retention.ms", "3600000", "86400000", False),
    ("retention.bytes", "1073741824", "-1", False),
    ("max.message.bytes", "1048588", str(900_000 + MESSAGE_OVERHEAD_BYTES), True),
    ("max.message.bytes", "1048588", str(2_000_000 + MESSAGE_OVERHEAD_BYTES), False),
    ("min.insync.replicas", "2", "1", False),  # more than the one replica: every write fails
    ("min.insync.replicas", "1", "1", True),
    ("cleanup.policy", "compact", "delete", False),
    ("cleanup.policy", "delete", "delete", True),
    ("message.timestamp.type", "LogAppendTime", "CreateTime", False),
])
def test_a_found_config_is_judged_against_the_contract(name, value, wanted, ok):
    spec = topics.TopicSpec("events", "events", 4, 1, {name: wanted})
    report = topics.Report()
    topics._check_configs(spec, {name: value}, report)
    assert report.ok == ok, report.breaches
    if not ok:
        line = report.breaches[0].line()
        assert line.startswith(f"topic 'events': {name} is {value}, the contract needs ")
        assert f"--add-config {name}={wanted}" in line  # the fix, runnable as is


def test_a_config_the_broker_does_not_report_is_unverified_not_passed():
    spec = topics.TopicSpec("releases", "releases", 1, 1, {"retention.ms": "-1", "max.message.bytes": "904096"})
    report = topics.Report()
    topics._check_configs(spec, {"retention.ms": "-1"}, report)
    assert report.ok and report.unverified == {"releases": ["max.message.bytes"]}


def test_a_session_timeout_a_broker_refuses_is_refused_by_the_config():
    with pytest.raises(ConfigError, match=r"kafka.session_timeout_ms must be >= 6000 .*group.min.session.timeout"):
        config_from_mapping({"kafka": {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}}, environ={})
    assert config_from_mapping({"kafka": {"session_timeout_ms": 6000}}, environ={}).kafka.session_timeout_ms == 6000


def test_more_in_sync_replicas_than_replicas_is_refused_by_the_config():
    with pytest.raises(ConfigError, match="kafka.min_insync_replicas must be <= kafka.replication_factor"):
        config_from_mapping({"kafka": {"replication_factor": 1, "min_insync_replicas": 2}}, environ={})


@pytest.mark.parametrize("value", [0, 59_999, -2])
def test_a_retention_below_a_minute_is_refused(value):
    with pytest.raises(ConfigError, match="kafka.events_retention_ms must be -1 .unlimited. or >= 60000"):
        config_from_mapping({"kafka": {"events_retention_ms": value}}, environ={})
