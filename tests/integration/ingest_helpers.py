"""Shared pieces of the ingest tests: event logs with a ground truth, config files, worker processes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


from kafka import KafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from tests.support.bounding_oracle import bounded_counts
from topic_helpers import CheckedProducer, contract_topics
from waiting import wait_for  # noqa: F401 - the tests' one wait, re-exported for the ingest tests
from stream_dp.processes import die_with_parent
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys
from stream_dp.schedule import record_timestamp_ms

REPO = Path(__file__).resolve().parents[2]


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """The events topic ``topic`` and its dead-letter topic ``<topic>-dlq`` (:func:`config_mapping`'s names),
    made with the topic contract as ``stream-dp topics create`` makes them."""
    contract_topics(bootstrap, events=topic, partitions=partitions, dead_letter=f"{topic}-dlq")


def make_events(seed: int, n: int, *, users: int, keys: int, windows: int, size: int, t0: int | None = None,
                ) -> list[dict[str, Any]]:
    """Events over ``windows`` windows in event-time order (with jitter), Zipf-ish keys, random users."""
    rnd = random.Random(seed)
    out = []
    t0 = T0 if t0 is None else t0
    span = windows * size
    for i in range(n):
        ts = t0 + span * i / n + rnd.uniform(-size / 10, size / 10)
        ts = min(max(ts, t0), t0 + span - 0.001)
        out.append({"user": f"user-{rnd.randrange(users)}", "key": f"item-{min(int(rnd.paretovariate(0.8)), keys)}",
                    "ts": round(ts, 3)})
    return out


def record_time_ms(ev: dict[str, Any]) -> int | None:
    """The Kafka record timestamp a trusted collector would stamp: the event's own time (as ``stream-dp
    replay`` does), or None (the producer's clock) for events without a numeric ``ts``."""
    ts = ev.get("ts")
    return record_timestamp_ms(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts >= 0 else None


def produce(bootstrap: str, topic: str, events: list[Any], *, raw: bool = False,
            record_time: float | None = None) -> None:
    """Produce keyed by user (one partition per user), in list order, record time = event time (raw
    values: ``record_time`` seconds, or the producer's clock)."""
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=256 * 1024)
    for ev in events:
        if raw:
            producer.send(topic, key=b"raw", value=ev,
                          timestamp_ms=None if record_time is None else int(record_time * 1000))
        else:
            producer.send(topic, key=ev["user"].encode(), value=json.dumps(ev).encode(),
                          timestamp_ms=record_time_ms(ev))
    producer.flush()
    producer.close()


def ground_truth(events: list[dict[str, Any]], *, size: int, max_keys: int, unit: str = "user"
                 ) -> dict[int, dict[str, int]]:
    """Per-user order is the production order (one user → one partition → offset order); the counts come
    from the test-owned oracle, not from production's bounding code."""
    return bounded_counts(((e["ts"], e["user"], e["key"]) for e in events), window_size=size,
                          max_keys_per_user=max_keys, unit=unit)


#: The public schedule start of the ingest tests: their streams start at (or after) T0 (near the present).
from event_times import T0  # noqa: E402


def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """The sum over ``topic``'s partitions of ``group``'s committed offsets (0 where none)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return sum(c.committed(TopicPartition(topic, p)) or 0 for p in range(partitions))
    finally:
        c.close()


def config_mapping(bootstrap: str, redis_url: str, topic: str, *, group: str, size: int, max_keys: int,
                   lateness: int = 10**6, idle: float = 120.0, prefix: str = "sdp", **sections: Any
                   ) -> dict[str, Any]:
    data: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "events_topic": topic, "dead_letter_topic": f"{topic}-dlq",
                  "ingest_group_id": group, "max_poll_records": 2000,
                  "events_partitions": 1},  # the contract's minimum; each test makes the partitions it needs
        "redis": {"url": redis_url, "key_prefix": prefix},
        "windows": {"size_seconds": size, "allowed_lateness_seconds": lateness,
                    "idle_partition_timeout_seconds": idle, "start": str(T0 // size * size),
                    "max_event_delay_seconds": min(lateness, 30)},
        "contribution": {"max_keys_per_user": max_keys},
        "ingest": {"backoff_initial_seconds": 0.05, "backoff_max_seconds": 1.0, "poll_timeout_ms": 200},
        "metrics": {"port": 0},
        # minute windows in day-long budget periods: far more windows than the default budget covers at
        # worst case (stream-dp budget plan); these workers test ingest, not the budget plan
        "budget": {"allow_partial_period": True},
    }
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return data


def write_toml(path: Path, data: dict[str, Any]) -> Path:
    """``data`` (section -> settings; a dict value is a sub-table, e.g. ``releases`` -> ``topk``) as TOML."""
    lines: list[str] = []

    def table(name: str, values: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in values.items() if not isinstance(v, dict))
        for k, v in values.items():
            if isinstance(v, dict):
                table(f"{name}.{k}", v)

    for section, values in data.items():
        table(section, values)
    path.write_text("\n".join(lines) + "\n")
    return path


def start_worker(config_file: Path, log_path: Path, *options: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("STREAM_DP_LOG_LEVEL", None)
    logf = open(log_path, "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", "workers.ingest", "--config", str(config_file), *options],
                                cwd=REPO, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
    finally:
        logf.close()


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def window_store(client, cfg) -> WindowStore:
    """The ingest's window store of ``cfg`` (key prefix, shards, window size, bounding unit and Δ) on ``client``:
    the tests read the counts through it."""
    return WindowStore(client, keys=Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout),
                       window_size=cfg.windows.size_seconds, unit=cfg.contribution.unit,
                       max_keys_per_user=cfg.contribution.max_keys_per_user)


def redis_counts(store, truth: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    return {start: store.counts(start) for start in sorted(set(store.windows()) | set(truth))}


class Running:
    """An IngestWorker on a thread, stopped (gracefully) on exit."""

    def __init__(self, cfg) -> None:
        self.registry = CollectorRegistry()
        from stream_dp.ingest.service import build_worker

        self.worker = build_worker(cfg, self.registry)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.reason = self.worker.run()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc

    def __enter__(self) -> "Running":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "worker did not stop within 30 s"

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.registry.get_sample_value(f"stream_dp_ingest_{name}", labels or {}) or 0.0
