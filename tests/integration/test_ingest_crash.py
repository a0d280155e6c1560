"""Crash safety and scale-out of the ingest worker as real processes.

- SIGKILL at random moments during a replay (≥ 10 times), restart each time: final counts exact.
- 2 and 3 workers in one consumer group share the partitions: counts exact, no late events while
  partitions are handed over, windows closed by the shared global watermark.
- A worker joining mid-stream: the one handing partitions over commits first, nothing is replayed.
- The broker hung (SIGSTOP) for longer than the session timeout mid-stream, then resumed: counts exact,
  and no commit failed on the way (async commits wait for the unanswered one).
- Redis stopped and restarted under a running worker: it reconnects and the counts stay exact.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest

from topic_helpers import CheckedProducer
from event_times import T0
from ingest_helpers import (committed_total, config_mapping, create_topic, ground_truth, make_events, produce, redis_counts,
                            start_worker, stop_worker, wait_for, write_toml)
from stream_dp.ingest.consumers import KAFKA_CLIENTS
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIZE = 600
MAX_KEYS = 3
PARTITIONS = 4

#: the guarantees below hold on both consumer backends (``ingest.kafka_client``)
both_clients = pytest.mark.parametrize("client", KAFKA_CLIENTS)


def _applied(client, store: WindowStore) -> int:
    return sum(int(client.hget(store.keys.window_meta(s), "events_applied") or 0) for s in store.windows())


def _setup(bootstrap, redis_url, topic_name, tmp_path, *, n, seed, client="kafka-python", **cfg_kw):
    topic = topic_name("events")
    create_topic(bootstrap, topic, PARTITIONS)
    events = make_events(seed, n, users=2000, keys=300, windows=4, size=SIZE)
    produce(bootstrap, topic, events)
    group = topic_name("group")
    cfg_kw.setdefault("ingest", {})["kafka_client"] = client
    data = config_mapping(bootstrap, redis_url, topic, group=group, size=SIZE, max_keys=MAX_KEYS, **cfg_kw)
    return topic, group, events, write_toml(tmp_path / "ingest.toml", data)


def _finish(bootstrap, group, topic, events, cfg_file, tmp_path, procs=()):
    procs = list(procs) or [start_worker(cfg_file, tmp_path / "final.log")]
    try:
        wait_for(lambda: committed_total(bootstrap, group, topic, PARTITIONS) == len(events), timeout=90, interval=0.3,
                 what="every event committed")
    finally:
        codes = [stop_worker(p) for p in procs]
    assert codes == [0] * len(procs), "graceful stop must exit 0"


@both_clients
# a runaway guard, not a timing assertion: five cycles each bounded by its own 60 s wait, then the drain (150 s
# was too little on a loaded machine: the other test workers and other processes share the cores)
@pytest.mark.timeout(600)
def test_sigkill_at_random_moments_during_replay_counts_stay_exact(bootstrap_servers, redis_client, redis_url,
                                                                   topic_name, tmp_path, client):
    """Five SIGKILLs, each at a random moment within 0.2 s of the restarted worker's first progress in Redis:
    every restart replays what its predecessor applied but did not commit (each of runs 1-9 of a ten-kill run
    logged such a replay), and the counts equal the oracle's. A cycle's time is the group's wait for the killed
    member's session to expire (6 s on Apache Kafka, ~11 s on Tansu), hence five, not more."""
    n = 60_000  # enough that five runs of the (fast) worker end before the replay does
    topic, group, events, cfg_file = _setup(bootstrap_servers, redis_url, topic_name, tmp_path, n=n, seed=5,
                                            client=client, kafka={"max_poll_records": 100, "session_timeout_ms": 6000,
                                                   "heartbeat_interval_ms": 400})
    store = WindowStore(redis_client, keys=Keys("sdp"), window_size=SIZE, max_keys_per_user=MAX_KEYS)
    rnd = random.Random(99)
    kills = 0
    progress = [0]
    proc = None
    try:
        while kills < 5:
            proc = start_worker(cfg_file, tmp_path / f"run{kills}.log")
            before = _applied(redis_client, store)
            # progress means Redis moved; then kill at a random moment within the next ~0.2 s
            moved = lambda before=before, proc=proc: _applied(redis_client, store) > before or proc.poll() is not None  # noqa: E731
            wait_for(moved, timeout=60, interval=0.02, what=f"progress before kill {kills + 1}")
            time.sleep(rnd.uniform(0, 0.2))  # the random kill moment (not a wait for a condition)
            assert proc.poll() is None, "worker exited on its own"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            kills += 1
            progress.append(_applied(redis_client, store))
    finally:  # a failed cycle leaves no worker running into the next tests
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    committed = committed_total(bootstrap_servers, group, topic, PARTITIONS)
    assert committed < n, f"the kills must land during the replay: {committed} of {n} committed"
    _finish(bootstrap_servers, group, topic, events, cfg_file, tmp_path)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    assert redis_counts(store, truth) == truth
    logs = "".join((tmp_path / f"run{i}.log").read_text() for i in range(kills)) + (tmp_path / "final.log").read_text()
    # at least one kill landed after Redis applied a batch and before Kafka committed it
    assert "already applied" in logs


@pytest.mark.parametrize(("workers", "client"), [(2, "kafka-python"), (3, "kafka-python"), (2, "confluent"),
                                                 (3, "confluent")])
def test_workers_in_one_group_share_partitions_and_counts_stay_exact(bootstrap_servers, redis_client, redis_url,
                                                                     topic_name, tmp_path, workers, client):
    # lateness covers the producers' event-time jitter (±SIZE/10): no event may be late, even while
    # partitions move between workers; windows still close as the shared watermark passes them
    topic, group, events, cfg_file = _setup(bootstrap_servers, redis_url, topic_name, tmp_path, n=30_000,
                                            seed=workers, lateness=SIZE // 4, client=client,
                                            kafka={"max_poll_records": 500})
    store = WindowStore(redis_client, keys=Keys("sdp"), window_size=SIZE, max_keys_per_user=MAX_KEYS)
    procs = []
    for i in range(workers):
        procs.append(start_worker(cfg_file, tmp_path / f"w{i}.log"))
    _finish(bootstrap_servers, group, topic, events, cfg_file, tmp_path, procs)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    assert redis_counts(store, truth) == truth
    logs = [(tmp_path / f"w{i}.log").read_text() for i in range(workers)]
    owners = sum(1 for text in logs if "partitions assigned: [" in text.replace("partitions assigned: []", ""))
    assert owners >= 2, "the group must spread partitions over several workers"
    assert all("ingest stopped (stop requested)" in text for text in logs)
    # handing partitions over commits what was applied (kafka-python runs the rebalance listener on its IO
    # thread, where a blocking commit is refused)
    assert not any("failed on_partitions_revoked" in text or "offset commit failed" in text for text in logs)
    closed = [s for s in store.windows() if store.meta(s)["state"] == "closed"]
    assert closed, "the global watermark over all partitions closed the early windows"
    wm = store.global_watermark()
    assert all(s + SIZE <= wm for s in closed)


@both_clients
def test_a_worker_joining_mid_stream_takes_over_without_a_replay(bootstrap_servers, redis_client, redis_url,
                                                                topic_name, tmp_path, client):
    """The worker that hands partitions over finishes its batch in flight and commits before the group
    moves on, so the new owner starts exactly where it stopped: no event is read twice."""
    # small batches keep the first worker busy long enough for the second to join mid-stream
    topic, group, events, cfg_file = _setup(bootstrap_servers, redis_url, topic_name, tmp_path, n=40_000, seed=11,
                                            lateness=SIZE // 4, client=client, kafka={"max_poll_records": 20})
    store = WindowStore(redis_client, keys=Keys("sdp"), window_size=SIZE, max_keys_per_user=MAX_KEYS)
    first = start_worker(cfg_file, tmp_path / "first.log")
    procs = [first]
    try:
        wait_for(lambda: _applied(redis_client, store) > 5_000, timeout=60, what="the first worker under way")
        procs.append(start_worker(cfg_file, tmp_path / "second.log"))
        wait_for(lambda: "partitions revoked: [" in (tmp_path / "first.log").read_text(), timeout=60,
                 what="the first worker handing partitions over")
        # the new member's assignment completes inside its own poll (librdkafka: inside consume()), which can
        # come after the first worker has already committed the last event: wait for it before stopping both
        wait_for(lambda: "partitions assigned: [" in (tmp_path / "second.log").read_text().replace(
            "partitions assigned: []", ""), timeout=60, what="the second worker owning partitions")
    finally:
        _finish(bootstrap_servers, group, topic, events, cfg_file, tmp_path, procs)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    assert redis_counts(store, truth) == truth
    first_log, second_log = (tmp_path / "first.log").read_text(), (tmp_path / "second.log").read_text()
    assert "partitions assigned: [" in second_log.replace("partitions assigned: []", "")
    assert "failed on_partitions_revoked" not in first_log
    assert "already applied" not in first_log + second_log, "a handover must not replay applied events"


def _through_an_outage(own_stack, topic_name, tmp_path, *, seed: int, max_poll_records: int, outage,
                       client: str = "kafka-python") -> str:
    """Run a worker on its own stack, call ``outage(proc, applied)`` once it made progress, wait until
    every event is committed, stop it; counts must equal the ground truth. Returns the worker's log."""
    import redis

    bootstrap, redis_url = own_stack.bootstrap_servers, own_stack.redis_url
    topic, group, events, cfg_file = _setup(bootstrap, redis_url, topic_name, tmp_path, n=40_000, seed=seed,
                                            client=client, kafka={"max_poll_records": max_poll_records})
    client = redis.Redis.from_url(redis_url)
    store = WindowStore(client, keys=Keys("sdp"), window_size=SIZE, max_keys_per_user=MAX_KEYS)
    proc = start_worker(cfg_file, tmp_path / "worker.log")
    try:
        wait_for(lambda: _applied(client, store) > 0, timeout=60, interval=0.02, what="progress")
        outage(proc, lambda: _applied(client, store))
        wait_for(lambda: committed_total(bootstrap, group, topic, PARTITIONS) == len(events), timeout=120, interval=0.3,
                 what="every event committed after the outage")
    finally:
        code = stop_worker(proc)
    assert code == 0
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    assert redis_counts(store, truth) == truth
    client.close()
    return (tmp_path / "worker.log").read_text()


@both_clients
def test_redis_outage_worker_reconnects_and_counts_stay_exact(own_stack, topic_name, tmp_path, client):
    def outage(proc, _applied_now) -> None:
        own_stack.redis.stop()
        wait_for(lambda: "redis unavailable" in (tmp_path / "worker.log").read_text(), timeout=30,
                 what="the worker noticing the outage")
        assert proc.poll() is None, "the worker must survive the outage"
        own_stack.redis.start()

    _through_an_outage(own_stack, topic_name, tmp_path, seed=8, max_poll_records=300, outage=outage, client=client)


def test_redis_outage_retry_delays_grow_to_the_cap(own_stack, topic_name, tmp_path):
    """During a Redis outage the retry delay doubles (with jitter) up to ingest.backoff_max_seconds, the
    message names Redis; after the outage the counts are exact."""
    pattern = re.compile(r"redis unavailable .*retried in ([0-9.]+)s")

    def outage(proc, _applied_now) -> None:
        own_stack.redis.stop()
        wait_for(lambda: len(pattern.findall((tmp_path / "worker.log").read_text())) >= 7, timeout=60,
                 what="seven retries during the outage")
        own_stack.redis.start()

    log_text = _through_an_outage(own_stack, topic_name, tmp_path, seed=9, max_poll_records=300, outage=outage)
    delays = [float(d) for d in pattern.findall(log_text)][:7]
    print("\nretry delays during the Redis outage:", delays)
    cap = 1.0  # backoff_max_seconds of the test config; initial 0.05, jitter 20 %
    assert delays[0] <= 0.05 + 1e-9
    for before, after in zip(delays, delays[1:]):
        assert after >= min(cap * 0.8, before * 1.5), f"delays must grow: {delays}"
        assert after <= cap + 1e-9
    assert max(delays) >= cap * 0.8, f"delays must reach the cap: {delays}"
    assert "Kafka" not in "".join(line for line in log_text.splitlines() if "retried in" in line)


@both_clients
def test_broker_hung_mid_stream_worker_survives_and_counts_stay_exact(own_stack, topic_name, tmp_path, client):
    """SIGSTOP the broker for longer than the group's session timeout while the worker consumes, then
    SIGCONT: the worker must neither crash nor lose or double count (the group may rebalance on resume)."""

    def outage(proc, applied_now) -> None:
        os.kill(own_stack.broker.pid, signal.SIGSTOP)
        paused_at = applied_now()
        try:
            time.sleep(8)  # the outage itself: longer than the 6 s session timeout
            assert proc.poll() is None, "the worker must survive a hung broker"
            assert paused_at < 20_000, "the outage must hit the middle of the stream"
        finally:
            os.kill(own_stack.broker.pid, signal.SIGCONT)

    log = _through_an_outage(own_stack, topic_name, tmp_path, seed=12, max_poll_records=20, outage=outage,
                             client=client)
    # batches of 20 finish far faster than the broker answers commits: they must wait for the unanswered
    # one and go together, not pile up until the connection refuses them
    assert "offset commit failed" not in log


@both_clients
def test_applier_process_killed_worker_exits_non_zero_and_a_restart_finishes_exactly(
        bootstrap_servers, redis_client, redis_url, topic_name, tmp_path, client):
    topic, group, events, cfg_file = _setup(bootstrap_servers, redis_url, topic_name, tmp_path, n=20_000,
                                            seed=9, client=client, kafka={"max_poll_records": 200})
    store = WindowStore(redis_client, keys=Keys("sdp"), window_size=SIZE, max_keys_per_user=MAX_KEYS)
    proc = start_worker(cfg_file, tmp_path / "applier.log")
    try:
        wait_for(lambda: _applied(redis_client, store) > 0, timeout=60, interval=0.02, what="progress")
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1, "the worker runs one applier process"
        os.kill(int(children[0]), signal.SIGKILL)
        code = proc.wait(timeout=30)  # it must not hang waiting for an outcome that never comes
    finally:
        stop_worker(proc)
    assert code not in (0, None)
    log = (tmp_path / "applier.log").read_text()
    assert "ApplierDied" in log and "the applier process ended" in log
    _finish(bootstrap_servers, group, topic, events, cfg_file, tmp_path)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    assert redis_counts(store, truth) == truth


def _scrape_gauges(port: int) -> dict[str, float]:
    """The ingest worker's ``up`` and ``dependency_up{kafka}`` gauges from its /metrics endpoint."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("stream_dp_ingest_up "):
            out["up"] = float(line.split()[-1])
        elif line.startswith('stream_dp_ingest_dependency_up{dependency="kafka"}'):
            out["kafka"] = float(line.split()[-1])
    return out


@both_clients
def test_broker_stopped_under_an_idle_worker_is_reported_down_then_up_again(own_stack, topic_name, tmp_path,
                                                                             client):
    """Both clients retry by themselves and a poll during the outage returns nothing (librdkafka reports "all
    brokers down" only through its error callback; kafka-python not at all): the worker used to report ``up``
    = 1 and ``dependency_up{kafka}`` = 1 (its last commit) for as long as the broker was gone. Now both drop
    to 0 while it is stopped and come back once it runs again (memory storage: the restarted broker has no
    topics, which the worker survives)."""
    from stream_dp.processes import free_port

    port = free_port()
    bootstrap, redis_url = own_stack.bootstrap_servers, own_stack.redis_url
    topic, group, events, cfg_file = _setup(bootstrap, redis_url, topic_name, tmp_path, n=2_000, seed=21,
                                            client=client, metrics={"port": port, "host": "127.0.0.1"})
    proc = start_worker(cfg_file, tmp_path / "worker.log")
    try:
        wait_for(lambda: committed_total(bootstrap, group, topic, PARTITIONS) == len(events), timeout=90, interval=0.3,
                 what="every event committed")
        wait_for(lambda: _scrape_gauges(port) == {"up": 1.0, "kafka": 1.0}, timeout=30, what="the worker up")
        own_stack.broker.stop()
        wait_for(lambda: _scrape_gauges(port) == {"up": 0.0, "kafka": 0.0}, timeout=60, interval=0.2,
                 what="the worker reporting Kafka down")
        assert "Kafka broker unavailable" in (tmp_path / "worker.log").read_text()
        assert proc.poll() is None, "the worker must survive the outage"
        own_stack.broker.start()
        wait_for(lambda: _scrape_gauges(port) == {"up": 1.0, "kafka": 1.0}, timeout=60, interval=0.2,
                 what="the worker reporting Kafka up again")
    finally:
        code = stop_worker(proc)
    assert code == 0


@both_clients
def test_a_broker_outage_does_not_close_the_windows_of_partitions_that_are_behind(own_stack, topic_name, tmp_path,
                                                                                  client):
    """The global watermark moves past a partition's own only when its owner reported it caught up within
    ``idle_partition_timeout_seconds`` (docs/ingest.md). During an outage the client cannot refresh the
    broker's high-water mark: a worker that went on reporting "caught up" to the stale one let every partition
    turn idle and closed the windows a behind partition's unread records belong to (they would be dropped as
    late once the broker came back). Partition 0 runs three windows ahead of partitions 1-3; the broker is
    stopped before the quiet partitions turn idle; for twice the idle timeout after the worker reports Kafka
    down, the global watermark must stay at the slow partitions' (kafka-python, without its outage report:
    it jumps to partition 0's)."""
    import redis

    from stream_dp.processes import free_port

    idle, lateness = 8.0, 10
    port = free_port()
    bootstrap, redis_url = own_stack.bootstrap_servers, own_stack.redis_url
    topic = topic_name("events")
    create_topic(bootstrap, topic, PARTITIONS)
    t0 = T0 // SIZE * SIZE
    producer = CheckedProducer(bootstrap_servers=bootstrap, acks="all")
    sent = 0
    for p in range(PARTITIONS):
        last = t0 + (4 if p == 0 else 1) * SIZE - 1  # partition 0 reaches window 3, the others window 0
        for i in range(50):
            ev = {"user": f"user-{p}-{i}", "key": f"item-{i % 7}", "ts": t0 + (last - t0) * (i + 1) / 50}
            producer.send(topic, partition=p, key=ev["user"].encode(), value=json.dumps(ev).encode(),
                          timestamp_ms=int(ev["ts"] * 1000))
            sent += 1
    producer.flush()
    producer.close()
    group = topic_name("group")
    data = config_mapping(bootstrap, redis_url, topic, group=group, size=SIZE, max_keys=MAX_KEYS,
                          lateness=lateness, idle=idle, ingest={"kafka_client": client},
                          metrics={"port": port, "host": "127.0.0.1"})
    cfg_file = write_toml(tmp_path / "ingest.toml", data)
    store = WindowStore(redis.Redis.from_url(redis_url), keys=Keys("sdp"), window_size=SIZE,
                        max_keys_per_user=MAX_KEYS)
    slow = t0 + SIZE - 1 - lateness  # the watermark of partitions 1-3
    proc = start_worker(cfg_file, tmp_path / "worker.log")
    try:
        wait_for(lambda: committed_total(bootstrap, group, topic, PARTITIONS) == sent, timeout=90, interval=0.2,
                 what="every event committed")
        own_stack.broker.stop()
        held = store.global_watermark()  # None: no window closed yet
        assert held is None or held <= slow, \
            f"the setup must stop the broker before the quiet partitions turn idle (global {held}, slow {slow})"
        wait_for(lambda: _scrape_gauges(port).get("kafka") == 0.0, timeout=60, interval=0.2,
                 what="the worker reporting Kafka down")
        observed_from = time.monotonic()
        # the condition is the absence of a move: watch it for twice the idle timeout
        while time.monotonic() - observed_from < 2 * idle:
            now = store.global_watermark()
            assert now == held, f"the global watermark moved from {held} to {now} during the outage"
            time.sleep(0.2)
        assert proc.poll() is None, "the worker must survive the outage"
    finally:
        code = stop_worker(proc)
    assert code == 0
