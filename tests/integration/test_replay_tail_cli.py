"""`stream-dp replay` and `stream-dp tail` as processes against the real broker."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kafka import KafkaConsumer

from stream_dp.broker_reach import NO_BROKER
from stream_dp.dev.demo_data import generate_ratings, write_csv
from topic_helpers import CheckedProducer, contract_topics
from waiting import wait_for

pytestmark = pytest.mark.integration


#: a topk release record that follows the release schema (tail checks records against it)
TOPK_RECORD = {
    "release_id": "1793577600-1793581200.topk", "schema_version": 1, "type": "topk", "status": "released",
    "window": {"start": 1793577600, "end": 1793581200}, "items": [{"rank": 1, "key": "318"}],
    "hit_bottom": True, "mechanism": {"name": "limited_domain_topk", "parameters": {"k": 10}},
    "cost": {"epsilon": 0.2, "delta": 1e-7, "events": []},
    "budget": {"scope": "2026-11-02", "epsilon_spent": 0.2, "delta_spent": 1e-7,
               "epsilon_remaining": 9.8, "delta_remaining": 1e-5}, "created_at": "2026-11-02T01:00:00.000Z"}


def cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stream_dp.cli", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


def consume_all(bootstrap: str, topic: str, expected: int, deadline_s: float = 60) -> list:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
    out: list = []
    deadline = time.monotonic() + deadline_s
    while len(out) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            out.extend(batch)
    consumer.close()
    return out


def test_replay_movielens_csv_keyed_by_user(tmp_path, bootstrap_servers, topic_name):
    ratings = generate_ratings(users=1000, movies=100, days=2, seed=5)[:1500]
    path = tmp_path / "ratings.csv"
    write_csv(sorted(ratings, key=lambda r: (r.user_id, r.movie_id)), path)  # sorted like MovieLens: by user
    topic = topic_name("events")
    env = {"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": bootstrap_servers}
    res = cli("replay", str(path), "--user-column", "userId", "--key-column", "movieId", "--time-column",
              "timestamp", "--topic", topic, "--partitions", "3", "--sort-by-time", env=env)
    assert res.returncode == 0, res.stderr
    assert "replayed 1,500 events" in res.stderr and "0 failed" in res.stderr
    records = consume_all(bootstrap_servers, topic, 1500)
    assert len(records) == 1500
    partitions_of_user = collections.defaultdict(set)
    for rec in records:
        event = json.loads(rec.value)
        assert set(event) == {"user", "key", "ts"}
        assert rec.key.decode() == event["user"]
        assert rec.timestamp == event["ts"] * 1000
        partitions_of_user[event["user"]].add(rec.partition)
    assert all(len(p) == 1 for p in partitions_of_user.values()), "one user's events stay in one partition"
    for partition in {r.partition for r in records}:
        times = [r.timestamp for r in sorted(records, key=lambda r: r.offset) if r.partition == partition]
        assert times == sorted(times), "--sort-by-time replays in event-time order"
    assert len({p for ps in partitions_of_user.values() for p in ps}) == 3
    sent = collections.Counter((str(r.user_id), str(r.movie_id)) for r in ratings)
    got = collections.Counter((json.loads(r.value)["user"], json.loads(r.value)["key"]) for r in records)
    assert sent == got


def test_replay_generated_stream_with_a_limit_and_bad_columns(tmp_path, bootstrap_servers, topic_name):
    topic = topic_name("events")
    env = {"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": bootstrap_servers, "STREAM_DP_KAFKA__EVENTS_TOPIC": topic}
    res = cli("replay", "--generate", "--days", "1", "--users", "300", "--limit", "200", "--no-progress", env=env)
    assert res.returncode == 0, res.stderr
    assert len(consume_all(bootstrap_servers, topic, 200)) == 200
    path = tmp_path / "r.csv"
    path.write_text("uid,item\n1,2\n")
    res = cli("replay", str(path), "--user-column", "userId", env=env)
    assert res.returncode == 1 and "no column 'userId'" in res.stderr and "uid, item" in res.stderr


def test_tail_prints_each_release_once(bootstrap_servers, topic_name):
    topic = topic_name("releases")
    contract_topics(bootstrap_servers, releases=topic)
    records = [
        TOPK_RECORD,
        {"release_id": "1793577600-1793581200.sample", "schema_version": 1, "type": "sample", "status": "released",
         "window": {"start": 1793577600, "end": 1793581200}, "items": [{"key": "1", "token": 2, "estimate": 3.5}],
         "hit_bottom": False, "mechanism": {"name": "private_weighted_sample", "parameters": {}},
         "cost": {"epsilon": 0.5, "delta": 1e-6, "events": []}, "created_at": "2026-11-02T01:00:00.000Z",
         "budget": {"scope": "2026-11-02", "epsilon_spent": 0.7, "delta_spent": 1.1e-6,
                    "epsilon_remaining": 9.3, "delta_remaining": 8.9e-6}},
    ]  # tail checks records against the release schema, so these follow it
    producer = CheckedProducer(bootstrap_servers=bootstrap_servers, acks="all")
    for rec in records + records[:1]:  # the topk release is published twice (a restart)
        producer.send(topic, key=rec["release_id"].encode(), value=json.dumps(rec).encode())
    producer.send(topic, key=b"junk", value=b"not json")
    producer.flush()
    producer.close()
    env = {"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": bootstrap_servers}
    res = cli("tail", "--topic", topic, "--idle-timeout", "4", "--color", "never", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("· topk ·") == 1 and res.stdout.count("· sample ·") == 1
    assert "318" in res.stdout and "⊥ stopped early" in res.stdout and "1 sampled keys" in res.stdout
    assert "tail: skipped a message: message is not JSON" in res.stderr
    res = cli("tail", "--topic", topic, "--type", "sample", "--count", "1", "--json", env=env)
    assert [json.loads(line)["type"] for line in res.stdout.splitlines()] == ["sample"]


def test_tail_stops_at_a_record_of_an_unknown_schema_version(bootstrap_servers, topic_name):
    from release_records import produce, record

    topic = topic_name("releases")
    produce(bootstrap_servers, topic, [record(0, keys=("318",)), record(1, schema_version=2)])
    res = cli("tail", "--topic", topic, "--idle-timeout", "4", "--color", "never",
              env={"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": bootstrap_servers})
    assert res.returncode == 1 and res.stdout.count("· topk ·") == 1 and "318" in res.stdout
    assert f"tail error: release record {record(1)['release_id']} has schema_version 2" in res.stderr


def test_tail_says_when_no_broker_answers_and_when_one_does_again(own_stack, topic_name):
    """A poll during an outage returns nothing, as on a quiet topic: tail says which one it is, on stderr."""
    topic = topic_name("releases")
    contract_topics(own_stack.bootstrap_servers, releases=topic)
    rec = TOPK_RECORD
    producer = CheckedProducer(bootstrap_servers=own_stack.bootstrap_servers, acks="all")
    producer.send(topic, key=rec["release_id"].encode(), value=json.dumps(rec).encode())
    producer.flush()
    producer.close()
    env = {**os.environ, "STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": own_stack.bootstrap_servers}
    proc = subprocess.Popen([sys.executable, "-m", "stream_dp.cli", "tail", "--topic", topic, "--color", "never"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: dict[str, list[str]] = {"out": [], "err": []}

    def read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    readers = [threading.Thread(target=read, args=(proc.stdout, lines["out"]), daemon=True),
               threading.Thread(target=read, args=(proc.stderr, lines["err"]), daemon=True)]
    for r in readers:
        r.start()

    def wait_for_line(where: str, text: str, timeout: float) -> None:
        wait_for(lambda: any(text in line for line in lines[where]), timeout=timeout, interval=0.1,
                 what=f"{text!r} on tail's std{where}", procs=[proc])

    try:
        wait_for_line("out", "· topk ·", 30)
        assert lines["err"] == []
        own_stack.broker.stop()
        wait_for_line("err", f"tail: {NO_BROKER}; retrying", 30)
        own_stack.broker.start()
        wait_for_line("err", "tail: reading the topic again", 60)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        for r in readers:
            r.join(5)
        proc.stdout.close()
        proc.stderr.close()
    assert code == 0, lines
    # only tail's own two lines: not kafka-python's log of every failed reconnect
    assert lines["err"] == [f"tail: {NO_BROKER}; retrying", "tail: reading the topic again"]


def test_replay_counts_the_sends_a_broker_refuses_as_errors(tmp_path, bootstrap_servers, broker_kind, topic_name):
    """Apache Kafka 4 refuses a record stamped more than an hour ahead of its clock
    (log.message.timestamp.after.max.ms): replay must say how many were refused and exit 1, not succeed."""
    if broker_kind == "tansu":
        pytest.skip("Tansu accepts any record timestamp; Apache Kafka 4's refusal is what is tested")
    now = int(time.time())
    path = tmp_path / "events.csv"
    # the refused records share users (so partitions, so batches) with valid ones: sent, they would make Kafka
    # refuse those batches whole; replay keeps them back, so every valid record lands
    rows = [f"u{i % 10},k,{now - 60}" for i in range(30)] + [f"u{i % 10},k,{now + 3 * 3600}" for i in range(20)]
    rows = [row for pair in zip(rows[:20], rows[30:]) for row in pair] + rows[20:30]
    path.write_text("user,key,ts\n" + "\n".join(rows) + "\n")
    topic = topic_name("events")
    res = cli("replay", str(path), "--topic", topic, "--no-progress",
              env={"STREAM_DP_KAFKA__BOOTSTRAP_SERVERS": bootstrap_servers})
    assert res.returncode == 1, res.stderr
    # replay reads the topic's limit and does not send them: sent, they would fail their whole batch (and
    # kafka-python's idempotent producer every pending send with it)
    assert "20 failed to send (first: ReplayError: event time" in res.stderr, res.stderr
    assert "more than 3600 s ahead of now, which the topic refuses (message.timestamp.after.max.ms)" in res.stderr
    assert len(consume_all(bootstrap_servers, topic, 30, deadline_s=20)) == 30  # the others are in the topic
