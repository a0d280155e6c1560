"""A person's mistake gets one line naming the setting, never a traceback (issue 44), with real processes:
no broker for ``tail``, ``replay``, the subscriber client and the dashboard (``kafka.bootstrap_servers`` and
the address); Redis down when a worker starts (retried, like ingest, until it answers); a wrong Redis
password (exit code 2 naming ``redis.password``, not retried); a stream whose every event is late (a log
line naming ``windows.start`` and ``windows.allowed_lateness_seconds``).

Before (main at 50f0651): tail and replay printed ~30 s of client errors then a 13-frame KafkaTimeoutError
traceback; ``release`` with Redis down or a wrong password a traceback from ReplicationPolicy.from_config;
ingest retried a wrong password forever; late events moved only a counter."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from ingest_helpers import (config_mapping, create_topic, make_events, produce, start_worker as start_ingest,
                            stop_worker, wait_for, write_toml)
from release_processes import REPO, start_worker, stop, wait_started, write_config
from stream_dp.broker_reach import BrokerUnreachable
from stream_dp.client import subscribe
from stream_dp.dev.devstack import DevStack, find_redis_server
from stream_dp.store.keys import Keys
from stream_dp.processes import die_with_parent, free_port
from tests.support.windows import set_watermark, write_window

pytestmark = pytest.mark.integration


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    clean["STREAM_DP_DEVSTACK_STATE"] = os.environ.get("STREAM_DP_DEVSTACK_STATE", "")
    return subprocess.run([sys.executable, "-m", "stream_dp.cli", *args], env={**clean, **(env or {})}, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def no_broker() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_tail_without_a_broker_exits_2_with_one_line() -> None:
    address = no_broker()
    done = cli("tail", "--idle-timeout", "1", env={"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": address,
                                                    "STREAM_DP_REDIS__URL": "redis://127.0.0.1:1/0"})
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("tail: ") and f"no Kafka broker answers at {address} (kafka.bootstrap_servers)" in line


def test_replay_without_a_broker_exits_2_with_one_line() -> None:
    address = no_broker()
    done = cli("replay", "--generate", "--limit", "10", "--no-progress",
               env={"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": address, "STREAM_DP_REDIS__URL": "redis://127.0.0.1:1/0"})
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("replay: ") and f"no Kafka broker answers at {address} (kafka.bootstrap_servers)" in line


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # kafka-python's sockets, see below
def test_the_client_raises_one_clear_error_without_a_broker() -> None:
    address = no_broker()
    with pytest.raises(BrokerUnreachable) as info:
        next(subscribe(address, "releases", consumer_options={"bootstrap_timeout_ms": 2000}))
    assert str(info.value).startswith(f"no Kafka broker answers at {address} (kafka.bootstrap_servers)")
    del info
    gc.collect()  # a KafkaConsumer whose bootstrap failed leaves its sockets to the collector: collected here


@pytest.fixture
def redis_down(tmp_path):
    """A redis-server that is not running yet (start it with ``.redis.start()``)."""
    stack = DevStack(kafka=False, workdir=tmp_path / "stack")
    try:
        yield stack
    finally:
        stack.cleanup()


def release_config(tmp_path: Path, bootstrap: str, redis_url: str, topic: str) -> Path:
    return write_config(tmp_path / "release.toml", {
        "kafka": {"bootstrap_servers": bootstrap, "releases_topic": topic},
        "redis": {"url": redis_url, "key_prefix": "t"},
        "windows": {"size_seconds": 60, "retention_seconds": 3600, "start": "0"},
        "budget": {"epsilon": 40.0, "delta": 1e-4, "allow_partial_period": True},
        "releases.topk": {"enabled": True}, "releases.histogram": {"enabled": False},
        "release": {"backoff_max_seconds": 1.0},
        "metrics": {"port": 0},
    })


def test_release_waits_for_redis_at_start_then_releases(tmp_path, bootstrap_servers, topic_name, redis_down) -> None:
    cfg = release_config(tmp_path, bootstrap_servers, redis_down.redis_url, topic_name("releases"))
    log = tmp_path / "release.log"
    proc = start_worker(cfg, worker_id="w", log_path=log)
    try:
        wait_for(lambda: log.exists() and log.read_text().count("redis unavailable") >= 2, timeout=60,
                 what="the worker retrying Redis", procs=[proc])
        redis_down.redis.start()
        client = redis.Redis.from_url(redis_down.redis_url)
        write_window(client, Keys("t"), 0, 60, {"a": 500.0, "b": 300.0})
        set_watermark(client, Keys("t"), 60)
        wait_for(lambda: client.zcard(Keys("t").release_index("released")) == 1, timeout=60,
                 what="the window released once Redis answers", procs=[proc])
    finally:
        wait_started(log)
        assert stop(proc) == 0
    assert "Traceback" not in log.read_text()


def test_ingest_waits_for_redis_at_start_then_counts(tmp_path, bootstrap_servers, topic_name, redis_down) -> None:
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    produce(bootstrap_servers, topic, make_events(3, 100, users=10, keys=5, windows=1, size=60))
    cfg = write_toml(tmp_path / "ingest.toml", config_mapping(bootstrap_servers, redis_down.redis_url, topic,
                                                              group=topic_name("g"), size=60, max_keys=3))
    log = tmp_path / "ingest.log"
    proc = start_ingest(cfg, log)
    try:
        wait_for(lambda: log.exists() and "ingest start check failed" in log.read_text(), timeout=60,
                 what="ingest retrying Redis", procs=[proc])
        redis_down.redis.start()
        client = redis.Redis.from_url(redis_down.redis_url)
        wait_for(lambda: client.exists(Keys("sdp").watermarks()), timeout=60, what="ingest counting",
                 procs=[proc])
    finally:
        assert stop_worker(proc) == 0
    assert "Traceback" not in log.read_text()


@pytest.fixture
def redis_with_password(tmp_path):
    port = free_port()
    proc = subprocess.Popen([str(find_redis_server()), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--requirepass", "right-secret", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    try:
        wait_for(lambda: _answers(port), timeout=20, what="redis-server with a password")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _answers(port: int) -> bool:
    try:
        redis.Redis(port=port, password="right-secret").ping()
        return True
    except redis.ConnectionError:
        return False


def test_release_with_a_wrong_redis_password_exits_2_naming_the_setting(tmp_path, bootstrap_servers, topic_name,
                                                                          redis_with_password) -> None:
    cfg = release_config(tmp_path, bootstrap_servers, f"redis://:wrong-secret@127.0.0.1:{redis_with_password}/0",
                         topic_name("releases"))
    log = tmp_path / "release.log"
    proc = start_worker(cfg, worker_id="w", log_path=log)
    wait_for(lambda: proc.poll() is not None, timeout=60, what="the worker to refuse")
    text = log.read_text()
    assert proc.returncode == 2 and "Traceback" not in text, text[-3000:]
    assert "refused the credentials" in text and "redis.password" in text and "wrong-secret" not in text, text


def test_ingest_with_a_wrong_redis_password_exits_2_and_is_not_retried(tmp_path, bootstrap_servers, topic_name,
                                                                       redis_with_password) -> None:
    topic = topic_name("events")
    data = config_mapping(bootstrap_servers, f"redis://127.0.0.1:{redis_with_password}/0", topic,
                          group=topic_name("g"), size=60, max_keys=3)
    data["redis"]["password"] = "wrong-secret"
    cfg = write_toml(tmp_path / "ingest.toml", data)
    proc = start_ingest(cfg, tmp_path / "ingest.log")
    wait_for(lambda: proc.poll() is not None, timeout=60, what="ingest to refuse")
    text = (tmp_path / "ingest.log").read_text()
    assert proc.returncode == 2 and "Traceback" not in text, text[-3000:]
    assert "redis.password" in text and "retrying" not in text and "wrong-secret" not in text, text


def test_an_all_late_stream_is_logged_with_the_settings_to_check(tmp_path, bootstrap_servers, redis_url,
                                                                 topic_name) -> None:
    topic = topic_name("events")
    create_topic(bootstrap_servers, topic, 1)
    events = make_events(2, 200, users=20, keys=10, windows=2, size=60)
    data = config_mapping(bootstrap_servers, redis_url, topic, group=topic_name("g"), size=60, max_keys=3)
    data["windows"]["start"] = str(int(events[-1]["ts"] // 60) * 60 + 6000)  # the schedule starts after every event
    cfg = write_toml(tmp_path / "ingest.toml", data)
    produce(bootstrap_servers, topic, events)
    log = tmp_path / "ingest.log"
    proc = start_ingest(cfg, log)
    try:
        wait_for(lambda: "late events" in log.read_text(), timeout=60, what="the late-events line", procs=[proc])
    finally:
        assert stop_worker(proc) == 0
    line = next(line for line in log.read_text().splitlines() if "late events" in line)
    assert "windows.start" in line and "windows.allowed_lateness_seconds" in line
