"""A 40-day-old backfill on Apache Kafka with its default retention, in the README's order, on any checkout.

Starts Apache Kafka (this checkout's dev stack: KRaft, Kafka's defaults but a 1 s retention check) and a
redis-server, then runs the stream-dp code of ``--code`` (default: this checkout) as the README does: topics
(``stream-dp topics create``, where that command exists), the ingest and release workers, then ``stream-dp
replay`` of a 40-day-old history sorted by time. It waits until every day is released or ``--wait`` seconds
pass, and prints one JSON line: events counted vs the bounded oracle per day, days released, the events
topic's partitions and earliest offsets (non-zero: retention deleted records). For the issue's before/after:

    python tools/backfill_retention.py                        # this checkout
    git archive main | tar -x -C /tmp/main && python tools/backfill_retention.py --code /tmp/main
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

DAY = 86400


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the stream-dp checkout to run")
    parser.add_argument("--wait", type=float, default=90.0, help="seconds to wait for the releases")
    args = parser.parse_args(argv)
    from bounding_oracle import bounded_counts
    from test_backfill import DAYS, history, write_csv  # the test's history: one definition of the backfill
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from stream_dp.dev.devstack import DevStack
    from stream_dp.dev.kafka_broker import INITIAL_TASK_DELAY_SECONDS

    work = Path(tempfile.mkdtemp(prefix="backfill-"))
    start = int(time.time()) // DAY * DAY - 40 * DAY
    events = history(start)
    write_csv(work / "history.csv", events)
    with DevStack(broker="kafka", workdir=work / "stack") as stack:
        # a broker that has been up a while: Kafka runs its first retention check log.initial.task.delay.ms
        # (default 30 s) after start, then every log.retention.check.interval.ms (1 s here)
        up_since = time.monotonic() - stack.ready_seconds["broker"]
        time.sleep(max(0.0, up_since + INITIAL_TASK_DELAY_SECONDS + 2 - time.monotonic()))
        (work / "stream-dp.toml").write_text(
            f'[kafka]\nbootstrap_servers = "{stack.bootstrap_servers}"\n'
            f'[redis]\nurl = "{stack.redis_url}"\n'
            f'[windows]\nsize_seconds = {DAY}\nstart = "{start}"\nallowed_lateness_seconds = 0\n'
            'idle_partition_timeout_seconds = 1.0\nmax_event_delay_seconds = 0\n[contribution]\nmax_keys_per_user = 3\n'
            '[budget]\nepsilon = 1000000.0\ndelta = 0.001\nallow_partial_period = true\n[metrics]\nport = 0\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
        env["PYTHONPATH"] = str(args.code)
        cfg = ["--config", str(work / "stream-dp.toml")]

        def cli(*a: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "stream_dp.cli", *a, *cfg], cwd=args.code, env=env,
                                  capture_output=True, text=True, timeout=300)

        has_topics = (args.code / "stream_dp" / "topics.py").exists()
        if has_topics:
            made = cli("topics", "create")
            assert made.returncode == 0, made.stderr
        logs = {name: open(work / f"{name}.log", "wb") for name in ("ingest", "release")}
        workers = [subprocess.Popen([sys.executable, "-m", f"workers.{name}", *cfg], cwd=args.code, env=env,
                                    stdout=log, stderr=subprocess.STDOUT) for name, log in logs.items()]
        try:
            replay = cli("replay", str(work / "history.csv"), "--sort-by-time", "--no-progress")
            replayed_at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
            import redis

            client = redis.Redis.from_url(stack.redis_url)
            deadline = time.monotonic() + args.wait
            while time.monotonic() < deadline and client.zcard("sdp:{release}:released") < DAYS:
                time.sleep(0.5)
            released = client.zcard("sdp:{release}:released")
            counted = {}
            for day in range(DAYS + 1):
                w = start + day * DAY
                counted[day] = int(sum(v for _, v in client.zrange(f"sdp:{{w:{w}}}:counts", 0, -1, withscores=True)))
        finally:
            for proc in workers:
                proc.terminate()
                proc.wait(timeout=30)
        ordered = sorted(events, key=lambda e: e["ts"])
        truth = bounded_counts(((e["ts"], e["user"], e["key"]) for e in ordered), window_size=DAY,
                               max_keys_per_user=3, unit="user")
        admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers, "log_level": 2})
        meta = admin.list_topics("events", timeout=10).topics["events"]
        earliest = admin.list_offsets({TopicPartition("events", p): OffsetSpec.earliest() for p in meta.partitions},
                                      request_timeout=10)
        broker_log = (work / "stack" / "kafka" / "node-1" / "server.log").read_text(errors="replace")
        print(json.dumps({
            "code": str(args.code), "topics_create": has_topics, "replay_exit": replay.returncode,
            "replay": replay.stderr.strip().splitlines()[-1] if replay.stderr.strip() else "",
            "events": len(events), "oracle_per_day": [sum(truth.get(start + d * DAY, {}).values()) for d in range(DAYS)],
            "counted_per_day": [counted[d] for d in range(DAYS)], "days_released": released,
            "events_partitions": len(meta.partitions),
            "earliest_offsets": [f.result().offset for f in earliest.values()],
            "segments_deleted_by_retention": broker_log.count("due to log retention time"),
            "replayed_at": replayed_at,
            "first_deletion_at": next((line[1:20] for line in broker_log.splitlines()
                                       if "due to log retention time" in line), None),
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
