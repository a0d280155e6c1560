"""Workers refuse a Redis that may evict keys (an evicted bounding log or ledger charge breaks privacy)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ingest_helpers import REPO, config_mapping, write_toml
from stream_dp.config import RedisConfig
from stream_dp.connections import UnsafeRedis, preflight_redis, require_noeviction

pytestmark = pytest.mark.integration


@pytest.fixture
def evicting_redis(redis_client) -> Iterator[None]:
    """The test Redis with an evicting policy for the duration of one test (the setting is server-wide)."""
    before = redis_client.config_get("maxmemory-policy")["maxmemory-policy"]
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        yield
    finally:
        redis_client.config_set("maxmemory-policy", before)


def test_noeviction_passes(redis_client, redis_url):
    assert require_noeviction(redis_client, RedisConfig(url=redis_url)) == "noeviction"
    preflight_redis(RedisConfig(url=redis_url))


def test_an_evicting_policy_is_refused_unless_allowed(redis_client, redis_url, evicting_redis, caplog):
    with pytest.raises(UnsafeRedis, match=r"maxmemory-policy is 'allkeys-lru'.*redis\.allow_eviction = true"):
        preflight_redis(RedisConfig(url=redis_url))
    with caplog.at_level(logging.WARNING, logger="stream_dp.connections"):
        assert require_noeviction(redis_client, RedisConfig(url=redis_url, allow_eviction=True)) == "allkeys-lru"
    assert "redis.allow_eviction is true" in caplog.text


def test_an_unreachable_redis_is_not_a_reason_to_refuse(caplog):
    with caplog.at_level(logging.WARNING, logger="stream_dp.connections"):
        preflight_redis(RedisConfig(url="redis://127.0.0.1:1/0", socket_timeout_seconds=0.5))
    assert "maxmemory-policy was not checked" in caplog.text


@pytest.mark.parametrize("worker", ["workers.ingest", "workers.release"])
def test_workers_exit_2_and_name_the_setting(bootstrap_servers, redis_url, evicting_redis, tmp_path, worker):
    cfg = write_toml(tmp_path / "w.toml", config_mapping(bootstrap_servers, redis_url, "never-created", group="g",
                                                         size=60, max_keys=1))
    done = subprocess.run([sys.executable, "-m", worker, "--config", str(cfg)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "maxmemory-policy is 'allkeys-lru'" in done.stderr and "redis.allow_eviction" in done.stderr
