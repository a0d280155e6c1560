"""A backfill on the broker's default retention: 40-day-old history replayed in the README's order.

The README starts the workers first, then replays. ``stream-dp replay`` stamps each record with its event
time, so on Apache Kafka a topic of the broker's defaults (7-day time retention) would have the whole
history deleted at the next retention check -- within a second on the test broker, whose check interval is
shortened (what a default broker does within 5 minutes) -- and ingest, reset to the earliest offset, would
count nothing, silently. With the topic contract (``stream-dp topics create``: unlimited events retention)
every event stays until counted: the window counts equal the bounded oracle, every window is released once,
the ledger verifies, the events topic has ``kafka.events_partitions`` partitions and no record was deleted.
"""

from __future__ import annotations

import csv
import random
import time

import pytest
import redis
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from event_times import DAY
from ingest_helpers import config_mapping, ground_truth, start_worker as start_ingest, stop_worker, window_store
from ingest_helpers import write_toml
from release_processes import cli, start_worker, stop, wait_for, wait_started
from stream_dp.config import config_from_mapping
from stream_dp.dev.kafka_broker import INITIAL_TASK_DELAY_SECONDS, RETENTION_CHECK_INTERVAL_MS
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration

DAYS = 4  # windows of history
PARTITIONS = 4
MAX_KEYS = 3


def history(start: int) -> list[dict]:
    """3,000 ratings over DAYS days from ``start`` (tools/backfill_retention.py replays the same), in user order (as MovieLens files are), plus one event a
    day later that moves the watermark past the last day."""
    rnd = random.Random(40)
    events = [{"user": f"u{rnd.randrange(300)}", "key": f"m{min(int(rnd.paretovariate(0.9)), 80)}",
               "ts": start + rnd.randrange(DAYS * DAY)} for _ in range(3000)]
    events.sort(key=lambda e: e["user"])
    return [*events, {"user": "tick", "key": "tick", "ts": start + DAYS * DAY + DAY // 2}]


def write_csv(path, events: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["user", "key", "ts"])
        writer.writeheader()
        writer.writerows(events)


@pytest.mark.timeout(240)
def test_history_40_days_old_replayed_after_the_workers_started_is_counted_and_released_whole(
        tmp_path, bootstrap_servers, broker_kind, broker_stack, redis_url, topic_name) -> None:
    start = int(time.time()) // DAY * DAY - 40 * DAY
    events = history(start)
    write_csv(tmp_path / "history.csv", events)
    prefix = topic_name("bf")
    data = config_mapping(bootstrap_servers, redis_url, topic_name("events"), group=topic_name("g"), size=DAY,
                          max_keys=MAX_KEYS, lateness=0, idle=1.0, prefix=prefix,
                          budget={"epsilon": 1e6, "delta": 1e-3})
    data["kafka"].update({"releases_topic": topic_name("releases"), "events_partitions": PARTITIONS})
    data["windows"]["start"] = str(start)
    cfg_file = write_toml(tmp_path / "stream-dp.toml", data)
    cfg = config_from_mapping(data, environ={})

    # the README's order: topics, then both workers, then the replay
    created = cli("topics", "create", "--config", str(cfg_file))
    assert created.returncode == 0, created.stderr
    ingest = start_ingest(cfg_file, tmp_path / "ingest.log")
    release = start_worker(cfg_file, worker_id="r1", log_path=tmp_path / "release.log", claim_ttl=10.0)
    client = redis.Redis.from_url(redis_url)
    try:
        replayed = cli("replay", str(tmp_path / "history.csv"), "--sort-by-time", "--no-progress", "--config",
                       str(cfg_file))
        replayed_at = time.monotonic()
        assert replayed.returncode == 0, replayed.stderr
        assert f"replayed {len(events):,} events" in replayed.stderr and "0 failed" in replayed.stderr
        wait_for(lambda: client.zcard(Keys(prefix).release_index("released")) >= DAYS, timeout=150,
                 what=f"{DAYS} days released", procs=[ingest, release])
    finally:
        wait_started(tmp_path / "release.log")
        assert stop(release) == 0, (tmp_path / "release.log").read_text()[-3000:]
        assert stop_worker(ingest) == 0, (tmp_path / "ingest.log").read_text()[-3000:]

    # the order ingest saw: replay --sort-by-time sends in event-time order (a stable sort of the file)
    truth = ground_truth(sorted(events, key=lambda e: e["ts"]), size=DAY, max_keys=MAX_KEYS)
    store = window_store(client, cfg)
    for day in range(DAYS):
        assert store.counts(start + day * DAY) == truth[start + day * DAY], f"day {day}"
    assert client.zcard(Keys(prefix).release_index("released")) == DAYS  # the tick's day stays open
    verified = cli("budget", "verify", "--config", str(cfg_file))
    assert verified.returncode == 0, verified.stdout + verified.stderr

    if broker_kind == "kafka" and broker_stack is not None:  # retention has run since the replay: Kafka's first
        # check comes log.initial.task.delay.ms (30 s) after its log manager started (before the broker listened),
        # then one every second here
        ran = broker_stack.listening_at + INITIAL_TASK_DELAY_SECONDS + 2 * RETENTION_CHECK_INTERVAL_MS / 1000
        wait_for(lambda: time.monotonic() > max(ran, replayed_at + 2 * RETENTION_CHECK_INTERVAL_MS / 1000),
                 timeout=40, what="two retention checks after the replay")
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 2})
    meta = admin.list_topics(cfg.kafka.events_topic, timeout=10).topics[cfg.kafka.events_topic]
    assert len(meta.partitions) == PARTITIONS
    earliest = admin.list_offsets({TopicPartition(cfg.kafka.events_topic, p): OffsetSpec.earliest()
                                   for p in meta.partitions}, request_timeout=10)
    assert [f.result().offset for f in earliest.values()] == [0] * PARTITIONS, "retention deleted history"
    client.close()
