"""SIGKILL the release worker process at named and random points; every window still ends with exactly one
distinct record per release type on the topic, and the ledger's spent equals the published costs.

Named points (stream_dp.release.crashpoints, injected by tests/integration/crashing_release.py) include the two dangerous gaps: between the charge (record stored)
and the publish, and between the publish and the mark-published. Random-time kills come from outside.
Also: two release workers running concurrently never both release one window.
"""

from __future__ import annotations

import json
import random
import re
import signal
import time

import pytest
import redis

from crashing_release import CRASHED
from release_processes import (by_release_id, read_topic, start_worker, stop, wait_for, wait_started,
                               write_config)
from stream_dp.accounting.composition import compose
from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.store.keys import Keys
from stream_dp.release.records import events_of, validate_record
from stream_dp.release.crashpoints import POINTS
from tests.support.windows import set_watermark, write_key_window, write_window

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SIZE = 60
TYPES = ("topk", "alerts", "sample")


def config_for(tmp_path, bootstrap: str, redis_url: str, topic: str, *, budget_epsilon: float,
               windows: dict | None = None):
    return write_config(tmp_path / "release.toml", {
        "kafka": {"bootstrap_servers": bootstrap, "releases_topic": topic},
        "redis": {"url": redis_url, "key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 3600, "start": "0", **(windows or {})},
        # minute windows in a day-long period: these workers test crashes, not the budget plan
        "budget": {"epsilon": budget_epsilon, "delta": 1e-4, "delta_prime": 1e-7, "allow_partial_period": True},
        "releases.topk": {"enabled": True, "k": 3, "k_bar": 20, "epsilon": 0.5, "delta": 1e-6},
        "releases.alerts": {"enabled": True, "watchlist": ["k1", "k2", "k3"], "threshold": 100.0, "k": 2, "epsilon": 0.5},
        "releases.sample": {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 0.5, "delta": 1e-6},
        "releases.histogram": {"enabled": False},
        "metrics": {"port": 0},
    })


def add_window(client: redis.Redis, i: int, rnd: random.Random, keys: Keys | None = None) -> dict[str, int]:
    """Window i written (in the key layout: half its counts left pending, as a crashed ingest would) and closed."""
    keys = keys or Keys("t")
    counts = {f"k{j}": rnd.randint(1, 200) for j in range(40)}
    if keys.layout == "key":
        assert write_key_window(client, keys, i * SIZE, SIZE, counts) > 0
    else:
        write_window(client, keys, i * SIZE, SIZE, {k: float(c) for k, c in counts.items()})
    set_watermark(client, keys, (i + 1) * SIZE)
    return counts


def released(client: redis.Redis) -> int:
    return int(client.zcard(Keys("t").release_index("released")))


def check_topic_and_ledger(client: redis.Redis, bootstrap: str, topic: str, windows: int, budget_epsilon: float):
    messages = read_topic(bootstrap, topic, expect_at_least=windows * len(TYPES))
    groups = by_release_id(messages)
    expected = {f"{i * SIZE}-{(i + 1) * SIZE}.{t}" for i in range(windows) for t in TYPES}
    assert set(groups) == expected
    records = []
    for rid, values in groups.items():
        assert len(set(values)) == 1, f"{rid}: {len(set(values))} different records"  # duplicates identical
        rec = json.loads(values[0])
        validate_record(rec)
        records.append(rec)
    ledger = Ledger(client, BudgetCap(budget_epsilon, 1e-4, 1e-7), keys=Keys("t"))
    (scope,) = {r["budget"]["scope"] for r in records}
    published = compose(e for r in records for e in events_of(r))
    spent = ledger.remaining(scope).spent  # committed + open reservations
    assert spent.rho == pytest.approx(published.rho, rel=1e-9, abs=1e-15)
    assert spent.basic_epsilon == pytest.approx(published.basic_epsilon, rel=1e-9, abs=1e-15)
    assert ledger.unpublished(scope) == []
    report = ledger.verify(scope)
    assert report.ok and report.open_reservations == 0, report.problems
    return records, messages


@pytest.mark.parametrize("layout", ["user", "key"])
def test_sigkill_at_random_points_leaves_one_record_per_window_and_type(tmp_path, bootstrap_servers, redis_url,
                                                                        topic_name, layout) -> None:
    """Also in the key layout (4 key shards), each window with half its counts left pending by a crashed
    ingest: the drain, the reads per key shard and the key shards' released mark under the same kills; every
    window's key shards end with its whole counts, released."""
    client = redis.Redis.from_url(redis_url)
    topic = topic_name("releases")
    budget_epsilon = 9.0  # runs out part-way: status records are crash-tested too
    windows = {} if layout == "user" else {"layout": "key", "shards": 4}
    keys = Keys("t", windows.get("shards", 1), layout)
    cfg = config_for(tmp_path, bootstrap_servers, redis_url, topic, budget_epsilon=budget_epsilon, windows=windows)
    rnd = random.Random(20261129)
    schedule = [f"{p}@1" for p in POINTS] + [f"{rnd.choice(POINTS)}@{rnd.randint(1, 2)}" for _ in range(5)]
    schedule += ["external"] * 3
    rnd.shuffle(schedule)
    kills = injected = 0
    written = {}
    for i, point in enumerate(schedule):
        written[i * SIZE] = add_window(client, i, rnd, keys)
        log = tmp_path / f"worker-{i}.log"
        if point == "external":
            proc = start_worker(cfg, worker_id=f"w{i}", log_path=log)
            time.sleep(rnd.uniform(0.5, 3.0))  # a random moment: the kill itself is the event under test
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=20)
            kills += 1
            continue
        proc = start_worker(cfg, worker_id=f"w{i}", log_path=log, crash_at=point)
        wait_for(lambda proc=proc, i=i: proc.poll() is not None or released(client) == i + 1, timeout=60,
                 what=f"crash at {point} or release of window {i}")
        if proc.poll() is None:  # the point was not reached in this run: kill it anyway
            proc.send_signal(signal.SIGKILL)
        code = proc.wait(timeout=20)
        assert code == -signal.SIGKILL, log.read_text()[-3000:]
        kills += 1
        injected += CRASHED in log.read_text()
    assert kills >= 10
    assert injected >= 3, "the injected crash points must actually kill the worker"
    final = start_worker(cfg, worker_id="final", log_path=tmp_path / "final.log")
    try:
        wait_for(lambda: released(client) == len(schedule), timeout=90, what="all windows released",
                 procs=[final])
    finally:
        wait_started(tmp_path / "final.log")
        assert stop(final) == 0
    records, _ = check_topic_and_ledger(client, bootstrap_servers, topic, len(schedule), budget_epsilon)
    statuses = {r["status"] for r in records}
    assert statuses == {"released", "budget_exhausted"}
    if layout == "key":
        for start, counts in written.items():
            got: dict[str, int] = {}
            for j in range(keys.shards):
                assert client.hget(keys.key_shard_meta(start, j), "state") == b"released"
                got.update((k.decode(), int(v)) for k, v in client.zrange(keys.key_shard_counts(start, j), 0, -1,
                                                                         withscores=True))
                assert not client.exists(keys.window_pending(start, j))
            assert got == counts, start
    client.close()


def test_two_workers_never_both_release_one_window(tmp_path, bootstrap_servers, redis_url, topic_name) -> None:
    client = redis.Redis.from_url(redis_url)
    topic = topic_name("releases")
    cfg = config_for(tmp_path, bootstrap_servers, redis_url, topic, budget_epsilon=1e6)
    rnd = random.Random(7)
    n_windows = 12
    procs = [start_worker(cfg, worker_id=f"w{j}", log_path=tmp_path / f"w{j}.log", claim_ttl=15.0) for j in range(2)]
    try:
        for i in range(n_windows):
            add_window(client, i, rnd)
            time.sleep(0.05 * rnd.random())
        wait_for(lambda: released(client) == n_windows, timeout=90, what="all windows released")
    finally:
        for j, p in enumerate(procs):
            wait_started(tmp_path / f"w{j}.log")
            assert stop(p) == 0
    records, messages = check_topic_and_ledger(client, bootstrap_servers, topic, n_windows, 1e6)
    # one mechanism run per window: each release id was charged exactly once, by one worker, and was
    # published exactly once (no window was released by both workers)
    assert len(messages) == n_windows * len(TYPES)
    log = Ledger(client, BudgetCap(1e6, 1e-4, 1e-7), keys=Keys("t")).history(records[0]["budget"]["scope"])
    commits = [e.id for e in log if e.type in ("charge", "settle")]
    assert sorted(commits) == sorted(f"{i * SIZE}-{(i + 1) * SIZE}.{t}" for i in range(n_windows) for t in TYPES)
    # and each window was released by exactly one of the two workers (their logs)
    done = [re.findall(rb"window (\d+-\d+) released", (tmp_path / f"w{j}.log").read_bytes()) for j in range(2)]
    assert sorted(done[0] + done[1]) == sorted(f"{i * SIZE}-{(i + 1) * SIZE}".encode() for i in range(n_windows))
    client.close()
