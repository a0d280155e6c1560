"""Smoke run of the foundation: dev stack up, events through a consumer group into Redis, stack down.

``python -m workers.smoke`` -- proves on a fresh machine that the embedded broker and redis-server start,
that a consumer group with manual commits moves every event into Redis, and that everything stops
cleanly. It prints totals only (no per-key counts: raw counts never leave the curator).
"""

from __future__ import annotations

import json
import random
import sys
import time

import redis
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from stream_dp.dev.devstack import DevStack


def run(n_events: int = 10_000, partitions: int = 4) -> dict[str, float]:
    with DevStack() as stack:
        print(f"broker  {stack.bootstrap_servers} ready in {stack.ready_seconds['broker']:.3f}s")
        print(f"redis   {stack.redis_url} ready in {stack.ready_seconds['redis']:.3f}s")
        admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
        admin.create_topics([NewTopic("events", num_partitions=partitions, replication_factor=1)])
        admin.close()
        rnd = random.Random(1)
        t0 = time.monotonic()
        producer = KafkaProducer(bootstrap_servers=stack.bootstrap_servers, acks="all", linger_ms=5)
        for i in range(n_events):
            user = f"u{rnd.randrange(1000)}"
            event = {"user": user, "key": f"movie-{int(rnd.paretovariate(1.2)) % 500}", "ts": i}
            producer.send("events", key=user.encode(), value=json.dumps(event).encode())
        producer.flush()
        producer.close()
        produced = time.monotonic() - t0
        consumer = KafkaConsumer("events", bootstrap_servers=stack.bootstrap_servers, group_id="smoke",
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 session_timeout_ms=6000, heartbeat_interval_ms=1000)
        store = redis.Redis.from_url(stack.redis_url)
        applied = 0
        deadline = time.monotonic() + 60
        while applied < n_events and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500, max_records=5000)
            pipe = store.pipeline(transaction=True)
            for records in batch.values():
                for rec in records:
                    pipe.zincrby("smoke:counts", 1, json.loads(rec.value)["key"])
                    applied += 1
            pipe.execute()
            consumer.commit()
        consumer.close()
        distinct = store.zcard("smoke:counts")
        store.close()
        print(f"produced {n_events} events in {produced:.2f}s; consumed and applied {applied} "
              f"into Redis ({distinct} distinct keys)")
    print("dev stack stopped")
    return {"applied": applied}


def main() -> int:
    result = run()
    return 0 if result["applied"] == 10_000 else 1


if __name__ == "__main__":
    sys.exit(main())
