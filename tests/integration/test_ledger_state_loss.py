"""Redis loses the ledger under a running deployment (issue 44), with real processes: the release worker stops
(exit code 2, naming ``stream-dp budget rebuild --from-topic``) before it publishes anything computed on the
wiped state, a new worker refuses to start, the rebuild restores every scope from the releases topic, and
the deployment carries on with one record per release id and the ledger equal to what was published.
``budget verify --against-topic`` checks both ways and names a charge deleted by hand.

Before (main at 50f0651): the worker carried on against the empty ledger -- every period's budget started
again at zero while the releases already published stayed public -- and nothing was logged."""

from __future__ import annotations

import json
import random
import signal

import pytest
import redis

from release_processes import (by_release_id, cli, read_topic, start_worker, stop, wait_for, wait_started,
                               write_config)
from stream_dp.accounting.composition import compose
from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.dev.devstack import DevStack
from stream_dp.store.keys import Keys
from stream_dp.release.records import events_of
from tests.support.windows import set_watermark, write_window

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SIZE = 60
TYPES = ("topk", "alerts", "sample")
KEYS = Keys("t")
REBUILD = "stream-dp budget rebuild --from-topic"


def config_for(tmp_path, bootstrap: str, redis_url: str, topic: str):
    return write_config(tmp_path / "release.toml", {
        "kafka": {"bootstrap_servers": bootstrap, "releases_topic": topic},
        "redis": {"url": redis_url, "key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 3600, "start": "0"},
        "budget": {"epsilon": 40.0, "delta": 1e-4, "delta_prime": 1e-7, "allow_partial_period": True},
        "releases.topk": {"enabled": True, "k": 3, "k_bar": 20, "epsilon": 0.5, "delta": 1e-6},
        "releases.alerts": {"enabled": True, "watchlist": ["k1", "k2", "k3"], "threshold": 100.0, "k": 2,
                            "epsilon": 0.5},
        "releases.sample": {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 0.5, "delta": 1e-6},
        "releases.histogram": {"enabled": False},
        "metrics": {"port": 0},
    })


def add_windows(client: redis.Redis, first: int, last: int, rnd: random.Random) -> None:
    for i in range(first, last):
        write_window(client, KEYS, i * SIZE, SIZE, {f"k{j}": float(rnd.randint(1, 200)) for j in range(40)})
    set_watermark(client, KEYS, last * SIZE)


def released(client: redis.Redis) -> int:
    return int(client.zcard(KEYS.release_index("released")))


def published(bootstrap: str, topic: str, at_least: int = 0) -> dict[str, list[bytes]]:
    return by_release_id(read_topic(bootstrap, topic, expect_at_least=at_least))


def check_one_record_each_and_ledger_equals_topic(client, bootstrap: str, topic: str, windows: int) -> None:
    groups = published(bootstrap, topic, windows * len(TYPES))
    assert set(groups) == {f"{i * SIZE}-{(i + 1) * SIZE}.{t}" for i in range(windows) for t in TYPES}
    assert all(len(set(values)) == 1 for values in groups.values()), "a release id with two different records"
    records = [json.loads(values[0]) for values in groups.values()]
    (scope,) = {r["budget"]["scope"] for r in records}
    spent = Ledger(client, BudgetCap(40.0, 1e-4, 1e-7), keys=KEYS).remaining(scope).spent
    assert spent.rho == pytest.approx(compose(e for r in records for e in events_of(r)).rho, rel=1e-9, abs=1e-15)


def run_until_released(cfg, client, tmp_path, name: str, n: int) -> None:
    proc = start_worker(cfg, worker_id=name, log_path=tmp_path / f"{name}.log")
    try:
        wait_for(lambda: released(client) >= n, timeout=90, what=f"{n} windows released", procs=[proc])
    finally:
        wait_started(tmp_path / f"{name}.log")
        assert stop(proc) == 0


def started_and_released(cfg, client, tmp_path, n: int):
    """A release worker ``w1`` on ``cfg``, once it released ``n`` windows; returns it and its log path."""
    log = tmp_path / "w1.log"
    worker = start_worker(cfg, worker_id="w1", log_path=log)
    wait_for(lambda: released(client) == n, timeout=90, what=f"{n} windows released", procs=[worker])
    return worker, log


def refused(proc, log_path, timeout: float = 60.0) -> str:
    wait_for(lambda: proc.poll() is not None, timeout=timeout, what="the worker to refuse")
    text = log_path.read_text()
    assert proc.returncode == 2, text[-3000:]
    assert "Redis lost the budget ledger" in text and REBUILD in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    return text


def test_flushall_mid_stream_stops_the_worker_until_the_ledger_is_rebuilt(tmp_path, bootstrap_servers, redis_url,
                                                                          topic_name) -> None:
    client = redis.Redis.from_url(redis_url)
    topic = topic_name("releases")
    cfg = config_for(tmp_path, bootstrap_servers, redis_url, topic)
    rnd = random.Random(44)
    add_windows(client, 0, 4, rnd)
    worker, log = started_and_released(cfg, client, tmp_path, 4)
    try:
        verified = cli("budget", "verify", "--against-topic", "--config", str(cfg))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert ("12 records checked against the ledger, 12 charges checked against the topic "
                "(0 pending publication, 0 before the topic's retention); 0 problems") in verified.stdout

        client.flushall()  # the operator's mistake, under the running worker
        add_windows(client, 4, 6, rnd)  # ingest carries on into the wiped Redis
        refused(worker, log)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
    first_four = {f"{i * SIZE}-{(i + 1) * SIZE}.{t}" for i in range(4) for t in TYPES}
    seen = published(bootstrap_servers, topic, 12)
    assert set(seen) == first_four, sorted(seen)  # nothing published on the wiped state

    second = start_worker(cfg, worker_id="w2", log_path=tmp_path / "w2.log")  # a new worker refuses at start
    refused(second, tmp_path / "w2.log")
    verified = cli("budget", "verify", "--against-topic", "--config", str(cfg))
    # (the first worker may have charged window 0 again on the wiped ledger before its publication was refused:
    # that charge, never published, differs from the record on the topic, and the rebuild replaces it)
    assert verified.returncode == 1 and "60-120.topk (scope 1970-01-01) is on the topic but its charge is not in " \
                                       "the ledger" in verified.stdout, verified.stdout

    rebuilt = cli("budget", "rebuild", "--from-topic", "--config", str(cfg))
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert "restored 12 charges (1970-01-01: 12)" in rebuilt.stdout and "4 windows marked released" in rebuilt.stdout
    again = cli("budget", "rebuild", "--from-topic", "--config", str(cfg))
    assert again.returncode == 1 and "nothing was lost, nothing rebuilt" in again.stdout
    verified = cli("budget", "verify", "--against-topic", "--config", str(cfg))
    assert verified.returncode == 0 and "; 0 problems" in verified.stdout, verified.stdout

    run_until_released(cfg, client, tmp_path, "w3", 6)  # windows 4 and 5, fresh; 0-3 not again
    check_one_record_each_and_ledger_equals_topic(client, bootstrap_servers, topic, 6)
    verified = cli("budget", "verify", "--against-topic", "--config", str(cfg))
    assert verified.returncode == 0 and "18 records checked" in verified.stdout, verified.stdout
    client.close()


def test_a_charge_deleted_by_hand_is_named_by_verify_against_topic(tmp_path, bootstrap_servers, redis_url,
                                                                   topic_name) -> None:
    client = redis.Redis.from_url(redis_url)
    topic = topic_name("releases")
    cfg = config_for(tmp_path, bootstrap_servers, redis_url, topic)
    add_windows(client, 0, 3, random.Random(7))
    run_until_released(cfg, client, tmp_path, "w1", 3)
    client.hdel(KEYS.ledger("1970-01-01", "charges"), "60-120.sample")  # by hand
    verified = cli("budget", "verify", "--against-topic", "--config", str(cfg))
    assert verified.returncode == 1
    assert ("release 60-120.sample (scope 1970-01-01) is on the topic but its charge's first result is not in the "
            "ledger") in verified.stdout, verified.stdout
    client.close()


def test_redis_restarted_without_persistence_stops_the_worker(tmp_path, bootstrap_servers, topic_name) -> None:
    stack = DevStack(kafka=False, workdir=tmp_path / "stack", redis_persistence=False).start()
    try:
        client = redis.Redis.from_url(stack.redis_url)
        topic = topic_name("releases")
        cfg = config_for(tmp_path, bootstrap_servers, stack.redis_url, topic)
        rnd = random.Random(3)
        add_windows(client, 0, 2, rnd)
        worker, log = started_and_released(cfg, client, tmp_path, 2)
        try:
            stack.redis.stop()
            stack.redis.start()  # no AOF: empty
            client = redis.Redis.from_url(stack.redis_url)
            add_windows(client, 2, 3, rnd)
            refused(worker, log)
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGKILL)
        assert len(published(bootstrap_servers, topic, 6)) == 6
        rebuilt = cli("budget", "rebuild", "--from-topic", "--config", str(cfg))
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        run_until_released(cfg, client, tmp_path, "w2", 3)
        check_one_record_each_and_ledger_equals_topic(client, bootstrap_servers, topic, 3)
        client.close()
    finally:
        stack.cleanup()
