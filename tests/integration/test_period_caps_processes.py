"""The operator's mistake of issue 44, with real processes: a release worker spends a period under
``budget.epsilon = 2``; it is restarted with ``STREAM_DP_BUDGET__EPSILON=20`` mid-period. The period stays
within 2 (its later windows are ``budget_exhausted``), every record of it states ``epsilon_cap`` 2, the worker
says once that its config applies from the next period, the next period is charged under 20, ``budget show``
prints the stored cap and ``budget verify`` passes. Before, the restarted worker spent the period to ε 3.86
under cap 2 and verify said OK (the broken variant -- the scripts checking the caller's cap -- fails this
test: tried)."""

from __future__ import annotations

import json
import random

import pytest
import redis

from release_processes import cli, read_topic, start_worker, stop, wait_for, wait_started, write_config
from stream_dp.accounting.budget import reported_epsilon
from stream_dp.accounting.composition import compose
from stream_dp.store.keys import Keys
from stream_dp.release.records import events_of
from tests.support.windows import set_watermark, write_window

pytestmark = pytest.mark.integration
SIZE, PERIOD = 60, 600  # ten windows per budget period
KEYS = Keys("t")


def released(client: redis.Redis) -> int:
    return int(client.zcard(KEYS.release_index("released")))


def add_windows(client: redis.Redis, first: int, last: int, rnd: random.Random) -> None:
    for i in range(first, last):
        write_window(client, KEYS, i * SIZE, SIZE, {f"k{j}": float(rnd.randint(50, 200)) for j in range(30)})
    set_watermark(client, KEYS, last * SIZE)


def test_restart_with_a_larger_cap_keeps_the_period_within_its_first_cap(tmp_path, bootstrap_servers, redis_url,
                                                                         topic_name) -> None:
    client = redis.Redis.from_url(redis_url)
    topic = topic_name("releases")
    cfg = write_config(tmp_path / "release.toml", {
        "kafka": {"bootstrap_servers": bootstrap_servers, "releases_topic": topic},
        "redis": {"url": redis_url, "key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 3600, "start": "0"},
        "budget": {"epsilon": 2.0, "delta": 1e-4, "delta_prime": 1e-7, "period_seconds": PERIOD,
                   "allow_partial_period": True},
        # one top-k per window, at most 2 outcomes of ε 0.25: ε ≤ 0.5 per window by basic composition
        "releases.topk": {"enabled": True, "k": 2, "k_bar": 10, "epsilon": 0.25, "delta": 1e-6},
        "releases.alerts": {"enabled": False},
        "releases.sample": {"enabled": False},
        "releases.histogram": {"enabled": False},
        "metrics": {"port": 0},
    })
    rnd = random.Random(44)
    add_windows(client, 0, 2, rnd)
    first = start_worker(cfg, worker_id="cap2", log_path=tmp_path / "cap2.log")
    try:
        wait_for(lambda: released(client) == 2, timeout=60, what="two windows under cap 2", procs=[first])
    finally:
        wait_started(tmp_path / "cap2.log")
        assert stop(first) == 0

    add_windows(client, 2, 12, rnd)  # the rest of period 0 and two windows of period 600
    log = tmp_path / "cap20.log"
    second = start_worker(cfg, worker_id="cap20", log_path=log, extra_env={"STREAM_DP_BUDGET__EPSILON": "20"})
    try:
        wait_for(lambda: released(client) == 12, timeout=90, what="twelve windows released", procs=[second])
    finally:
        wait_started(log)
        assert stop(second) == 0

    records = [json.loads(v) for _, v in read_topic(bootstrap_servers, topic, expect_at_least=12)]
    by_scope: dict[str, list[dict]] = {}
    for r in records:
        by_scope.setdefault(r["budget"]["scope"], []).append(r)
    assert set(by_scope) == {"p0", "p600"}
    period, next_period = by_scope["p0"], by_scope["p600"]
    assert len(period) == 10 and len(next_period) == 2
    assert {r["budget"]["epsilon_cap"] for r in period} == {2.0}
    assert max(r["budget"]["epsilon_spent"] for r in period) <= 2.0
    # the period's guarantee recomputed from what was published (the smaller ε of the two routes, docs/privacy.md §3)
    assert reported_epsilon(compose(e for r in period for e in events_of(r)), 1e-7) <= 2.0
    statuses = [r["status"] for r in sorted(period, key=lambda r: r["window"]["start"])]
    assert statuses[:2] == ["released"] * 2 and "budget_exhausted" in statuses[2:]
    assert {r["budget"]["epsilon_cap"] for r in next_period} == {20.0}
    assert {r["status"] for r in next_period} == {"released"}

    text = log.read_text()
    assert text.count("budget scope p0 keeps the cap it was first charged under") == 1, text[-3000:]
    assert "budget.epsilon = 20" in text and "applies from the next budget period on" in text

    shown = cli("budget", "show", "p0", "--config", str(cfg), "--json")
    assert shown.returncode == 0, shown.stderr
    (row,) = json.loads(shown.stdout)
    assert row["epsilon_cap"] == 2.0 and row["cap_stored"] and row["epsilon_spent"] <= 2.0
    verified = cli("budget", "verify", "--config", str(cfg))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "p0: OK" in verified.stdout and "stored cap ε 2," in verified.stdout
    assert "p600: OK" in verified.stdout and "stored cap ε 20," in verified.stdout
    client.close()
