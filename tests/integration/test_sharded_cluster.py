"""Sharded windows with real worker processes: ``windows.shards = 4`` on one redis-server, and ``= 12`` on a
real 3-master Redis Cluster:
two ingest workers and one release worker; exact counts against the test oracle, one schema-valid release
per (window, type), ``stream-dp budget verify``; then the same under repeated SIGKILLs of every worker."""

from __future__ import annotations

import json
import random
import signal
import time

import pytest

from cluster_helpers import local_cluster
from ingest_helpers import config_mapping, create_topic, ground_truth, make_events, produce, stop_worker
from ingest_helpers import start_worker as start_ingest
from ingest_helpers import write_toml
from release_processes import by_release_id, cli, read_topic, start_worker, stop, wait_for
from stream_dp.config import RedisConfig
from stream_dp.connections import redis_client
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys
from stream_dp.release.records import validate_record

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SIZE = 60
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
MAX_KEYS = 3
SHARDS = 12
TYPES = ("topk", "alerts", "sample")
PREFIX = "sh"


def _setup(tmp_path, cluster, bootstrap_servers, topic_name, *, seed: int, n: int, windows: int, poll: int,
           redis_url: str | None = None, shards: int = SHARDS, parts: int = 1):
    """Topics, events and a config; the events are produced now, all of them, unless ``parts`` > 1: then only
    the first of ``parts`` consecutive slices is, and the rest is returned for the test to produce."""
    events_topic, releases_topic = topic_name("events"), topic_name("releases")
    create_topic(bootstrap_servers, events_topic, 2)
    # event times jitter by up to ±6 s (make_events): allowed lateness 15 s keeps every event on time, so the
    # oracle (which counts every event) is the exact expectation
    events = make_events(seed, n, users=400, keys=150, windows=windows, size=SIZE, t0=T0)
    events.append({"user": "user-tick", "key": "tick", "ts": T0 + windows * SIZE + SIZE / 2})
    data = config_mapping(bootstrap_servers, redis_url or cluster.url, events_topic, group=topic_name("g"), size=SIZE,
                          max_keys=MAX_KEYS, lateness=15, idle=1.0, prefix=PREFIX,
                          budget={"epsilon": 1e9, "delta": 1e-3})
    data["redis"]["cluster"] = cluster is not None
    data["windows"]["shards"] = shards
    data["kafka"]["releases_topic"] = releases_topic
    data["kafka"]["max_poll_records"] = poll
    data["releases.topk"] = {"enabled": True, "k": 5, "k_bar": 40, "epsilon": 1e4, "delta": 1e-6}
    data["releases.alerts"] = {"enabled": True, "watchlist": ["item-1", "item-2"], "threshold": 20.0, "k": 3, "epsilon": 1e4}
    data["releases.sample"] = {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 1.0, "delta": 1e-6}
    data["releases.histogram"] = {"enabled": False}
    cfg_path = write_toml(tmp_path / "stream-dp.toml", data)
    slices = [events[i * len(events) // parts:(i + 1) * len(events) // parts] for i in range(parts)]
    produce(bootstrap_servers, events_topic, slices[0])
    if parts > 1:
        return cfg_path, events, releases_topic, events_topic, slices[1:]
    return cfg_path, events, releases_topic


def _check(tmp_path, cluster, client, cfg_path, bootstrap_servers, releases_topic, events, windows: int,
           shards: int = SHARDS) -> None:
    keys = Keys(PREFIX, shards=shards)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    store = WindowStore(client, keys=keys, window_size=SIZE)
    for start, want in truth.items():
        if start < T0 + windows * SIZE:
            assert store.counts(start) == want, f"window {start}"
    for i in range(windows if cluster is not None else 0):  # each window's shards spread over the masters
        owners = {cluster.master_of(keys.window_counts(T0 + i * SIZE, s)).port for s in range(shards)}
        assert len(owners) >= 2, f"window {i}: every shard on one master"
    messages = read_topic(bootstrap_servers, releases_topic, expect_at_least=windows * len(TYPES))
    groups = by_release_id(messages)
    expected = {f"{T0 + i * SIZE}-{T0 + (i + 1) * SIZE}.{t}" for i in range(windows) for t in TYPES}
    assert set(groups) == expected
    for rid, values in groups.items():
        assert len(set(values)) == 1, f"{rid} published as {len(set(values))} different records"
        validate_record(json.loads(values[0]))
    verify = cli("budget", "verify", "--config", str(cfg_path))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_four_shards_on_one_redis_server_with_worker_processes(tmp_path, bootstrap_servers, redis_url, topic_name):
    """windows.shards = 4 on a single node: ingest and release worker processes, exact counts, one
    schema-valid release per (window, type), budget verify."""
    import redis

    windows = 3
    cfg_path, events, releases_topic = _setup(tmp_path, None, bootstrap_servers, topic_name, seed=5, n=4000,
                                              windows=windows, poll=500, redis_url=redis_url, shards=4)
    ingest = start_ingest(cfg_path, tmp_path / "ingest.log")
    release = start_worker(cfg_path, worker_id="r1", log_path=tmp_path / "release.log", claim_ttl=10.0)
    client = redis.Redis.from_url(redis_url)
    try:
        wait_for(lambda: client.zcard(Keys(PREFIX).release_index("released")) >= windows, timeout=180,
                 what=f"{windows} windows released", procs=[ingest, release])
    finally:
        assert stop(release) == 0, (tmp_path / "release.log").read_text()[-3000:]
        assert stop_worker(ingest) == 0, (tmp_path / "ingest.log").read_text()[-3000:]
    _check(tmp_path, None, client, cfg_path, bootstrap_servers, releases_topic, events, windows, shards=4)
    client.close()


def test_twelve_shards_two_ingest_workers_one_release_worker_on_three_masters(tmp_path, bootstrap_servers,
                                                                             topic_name):
    windows = 3
    with local_cluster(tmp_path / "cluster", masters=3) as cluster:
        cfg_path, events, releases_topic = _setup(tmp_path, cluster, bootstrap_servers, topic_name, seed=17,
                                                  n=4000, windows=windows, poll=2000)
        ingest = [start_ingest(cfg_path, tmp_path / f"ingest-{i}.log") for i in range(2)]
        release = start_worker(cfg_path, worker_id="r1", log_path=tmp_path / "release.log", claim_ttl=10.0)
        client = redis_client(RedisConfig(url=cluster.url, cluster=True))
        try:
            wait_for(lambda: client.zcard(Keys(PREFIX).release_index("released")) >= windows, timeout=240,
                     what=f"{windows} windows released", procs=[*ingest, release])
        finally:
            assert stop(release) == 0, (tmp_path / "release.log").read_text()[-3000:]
            for i, proc in enumerate(ingest):
                assert stop_worker(proc) == 0, (tmp_path / f"ingest-{i}.log").read_text()[-3000:]
        _check(tmp_path, cluster, client, cfg_path, bootstrap_servers, releases_topic, events, windows)
        client.close()


def test_sigkill_of_ingest_and_release_workers_on_the_sharded_cluster(tmp_path, bootstrap_servers, topic_name):
    """Five SIGKILLs of an ingest worker and three of the release worker while the stream is consumed:
    counts stay exact, one record per (window, type), and the ledger verifies."""
    windows = 4
    rnd = random.Random(23)
    with local_cluster(tmp_path / "cluster", masters=3) as cluster:
        # the stream arrives in six parts, the next one after each ingest kill: every kill lands mid-stream
        cfg_path, events, releases_topic, events_topic, rest = _setup(
            tmp_path, cluster, bootstrap_servers, topic_name, seed=29, n=24_000, windows=windows, poll=150, parts=6)
        client = redis_client(RedisConfig(url=cluster.url, cluster=True))
        keys = Keys(PREFIX, shards=SHARDS)

        def applied() -> int:
            return sum(int(client.hget(keys.window_meta(T0 + i * SIZE, s), "events_applied") or 0)
                       for i in range(windows) for s in range(SHARDS))

        def released() -> int:
            return int(client.zcard(keys.release_index("released")))

        ingest = [start_ingest(cfg_path, tmp_path / f"ingest-{i}.log") for i in range(2)]
        release = start_worker(cfg_path, worker_id="r1", log_path=tmp_path / "release.log", claim_ttl=2.0)
        release_kills = 0
        # progress is counted from before the part that must bring it was produced: a worker may apply a whole
        # part before the test reads the counts again, and then no later progress would come
        before = 0
        try:
            for part, ingest_kill in zip(rest, range(1, 6)):
                wait_for(lambda before=before: applied() > before, timeout=120, what=f"ingest progress before kill {ingest_kill}",
                         procs=[*ingest, release])
                i = rnd.randrange(2)
                ingest[i].send_signal(signal.SIGKILL)
                ingest[i].wait(timeout=10)
                ingest[i] = start_ingest(cfg_path, tmp_path / f"ingest-{i}.log")
                if ingest_kill % 2:  # kills 1, 3, 5 of ingest are followed by one of the release worker
                    time.sleep(rnd.uniform(0.0, 0.3))  # a random point of the release loop (not a wait)
                    release.send_signal(signal.SIGKILL)
                    release.wait(timeout=10)
                    release = start_worker(cfg_path, worker_id=f"r{release_kills + 2}",
                                           log_path=tmp_path / "release.log", claim_ttl=2.0)
                    release_kills += 1
                before = applied()
                produce(bootstrap_servers, events_topic, part)
            assert release_kills == 3
            wait_for(lambda: released() >= windows, timeout=150, what=f"{windows} windows released after the kills",
                     procs=[*ingest, release])
        finally:
            stop(release)
            for proc in ingest:
                stop_worker(proc)
        _check(tmp_path, cluster, client, cfg_path, bootstrap_servers, releases_topic, events, windows)
        client.close()
