"""The neighbouring-stream harness through real worker processes: ``stream-dp ingest`` and ``stream-dp
release`` (CLI), a real broker and a real redis-server, D and D′ = D minus one user. The structural part of
what a subscriber of the releases topic reads must be identical (docs/privacy.md §1b)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kafka import KafkaConsumer

from topic_helpers import CheckedProducer, contract_topics
from ingest_helpers import REPO, create_topic, stop_worker, wait_for
from release_processes import write_config
from stream_dp.config import load_config
from stream_dp.processes import die_with_parent
from tests.support.neighbours import (Scenario, produce_stream, released_domain_scenario, scenarios,
                                          subscriber_view)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIZE = 60
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
TYPES = ("topk", "alerts", "sample")
PICKED = [s for s in scenarios(size=SIZE, t0=T0, max_keys=3, skew=5)
          if s.name.startswith(("u alone", "u with a far-future", "u spread"))]


def _cli(command: str, config, log_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env["PYTHONPATH"] = str(REPO)
    log = open(log_path, "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "stream_dp.cli", command, "--config", str(config)],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    finally:
        log.close()


def _run(tmp_path, name: str, scenario: Scenario, with_user: bool, bootstrap: str, redis_url: str, topic_name,
         releases: dict | None = None, types: tuple[str, ...] = TYPES, windows: dict | None = None):
    events_topic, releases_topic = topic_name(f"{name}-events"), topic_name(f"{name}-releases")
    create_topic(bootstrap, events_topic, scenario.partitions)
    contract_topics(bootstrap, releases=releases_topic)  # as `stream-dp topics create` makes it: one partition
    config = write_config(tmp_path / f"{name}.toml", {
        "kafka": {"bootstrap_servers": bootstrap, "events_topic": events_topic, "releases_topic": releases_topic,
                  "dead_letter_topic": f"{events_topic}-dlq", "ingest_group_id": topic_name(f"{name}-g"),
                  "events_partitions": scenario.partitions},
        "redis": {"url": redis_url, "key_prefix": topic_name(f"{name}-p")},
        "windows": {"size_seconds": SIZE, "start": str(T0), "allowed_lateness_seconds": 0,
                    "max_event_delay_seconds": 0, "idle_partition_timeout_seconds": 600, **(windows or {})},
        "contribution": {"max_keys_per_user": 3},
        "budget": {"epsilon": 1e6, "delta": 0.5},
        "releases.topk": {"enabled": True, "k": 3, "k_bar": 10, "window_epsilon": 3.0, "window_delta": 2e-6},
        "releases.alerts": {"enabled": True, "watchlist": ["x", "y"], "threshold": 2.0, "k": 3, "epsilon": 1.0},
        "releases.sample": {"enabled": True},
        "releases.histogram": {"enabled": False},
        **(releases or {}),
        "ingest": {"poll_timeout_ms": 200},
        "metrics": {"port": 0},
    })
    cfg = load_config(config, environ={})
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all")
    produce_stream(scenario.stream(with_user=with_user), cfg, producer, events_topic)
    producer.close()
    due = int((scenario.horizon - T0) // SIZE) * len(types)
    ingest = _cli("ingest", config, tmp_path / f"{name}-ingest.log")
    release = _cli("release", config, tmp_path / f"{name}-release.log")
    consumer = KafkaConsumer(releases_topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=500)
    messages: list[bytes] = []
    try:
        def read() -> bool:
            messages.extend(m.value for m in consumer)
            return len(messages) >= due

        wait_for(read, timeout=120, what=f"{due} release records ({name})")
    finally:
        consumer.close()
        for proc, log in ((release, "release"), (ingest, "ingest")):
            code = stop_worker(proc)
            assert code == 0, (tmp_path / f"{name}-{log}.log").read_text()[-3000:]
    return subscriber_view(messages)


@pytest.mark.parametrize("windows", [{}, {"layout": "key", "shards": 12}], ids=["user", "key-12"])
@pytest.mark.parametrize("scenario", PICKED, ids=[s.name for s in PICKED])
def test_structure_identical_through_real_workers(tmp_path, scenario, bootstrap_servers, redis_url, topic_name,
                                                   windows):
    """Also in the key layout (12 key shards): the two-step apply, the drain and the reads per key shard in
    the real worker processes leave the subscriber's view identical on D and D′."""
    d = _run(tmp_path, "d", scenario, True, bootstrap_servers, redis_url, topic_name, windows=windows)
    d_prime = _run(tmp_path, "d-prime", scenario, False, bootstrap_servers, redis_url, topic_name, windows=windows)
    assert d.structure().differences(d_prime.structure()) == [], (d.structure().rows, d_prime.structure().rows)
    windows = sorted({r[0] for r in d.structure().rows})
    assert windows == [T0 + i * SIZE for i in range(int((scenario.horizon - T0) // SIZE))]


def test_released_domains_keep_the_structure_identical_through_real_workers(tmp_path, bootstrap_servers, redis_url,
                                                                            topic_name):
    """u is the user who tips key "z" over window 0's thresholds, so she decides whether the next windows' released
    domains (histogram, top-k, the alerts watchlist: docs/privacy.md §10) track it: the structure a subscriber reads
    is still identical, and every record states the domain it used."""
    scenario = released_domain_scenario(size=SIZE, t0=T0, crowd=10)
    releases = {"releases.histogram": {"enabled": True, "epsilon": 1.0, "delta": 1e-2, "calibration": "exact",
                                       "domain_from_released": True, "domain_memory_windows": 1},
                "releases.topk": {"enabled": True, "k": 3, "k_bar": 10, "epsilon": 1.0, "delta": 1e-6,
                                  "domain_from_released": True, "domain_memory_windows": 1},
                "releases.alerts": {"enabled": True, "watchlist": ["x"], "threshold": 2.0, "k": 3, "epsilon": 1.0,
                                    "domain_from_released": True, "domain_memory_windows": 1},
                "releases.sample": {"enabled": False},
                "budget": {"epsilon": 1e6, "delta": 0.5, "allow_partial_period": True}}  # δ 1e-2 a window
    types = ("topk", "alerts", "histogram")
    d = _run(tmp_path, "d", scenario, True, bootstrap_servers, redis_url, topic_name, releases, types)
    d_prime = _run(tmp_path, "d-prime", scenario, False, bootstrap_servers, redis_url, topic_name, releases, types)
    assert d.structure().differences(d_prime.structure()) == [], (d.structure().rows, d_prime.structure().rows)
    for view in (d, d_prime):
        assert all("from_released" in r["domain"] for r in view.records if r["status"] == "released")
