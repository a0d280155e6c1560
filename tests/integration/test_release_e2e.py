"""End to end: events on Kafka → ingest worker process → Redis windows → release worker process → releases
topic. Real broker, real Redis, both workers as processes.

- several windows → exactly one schema-valid record per (window, type) on the releases topic;
- with a very large ε the released top-k is the true top-k of the bounded counts (the ingest ground truth),
  in the user layout and in the key layout (``windows.layout = "key"``, 12 key shards);
- with a tiny budget the period runs out: budget_exhausted status records appear, the ledger stays under
  its cap and its spent equals the published costs.
"""

from __future__ import annotations

import json

import pytest
import redis

from ingest_helpers import config_mapping, create_topic, ground_truth, make_events, produce, stop_worker
from ingest_helpers import start_worker as start_ingest
from ingest_helpers import write_toml
from release_processes import by_release_id, read_topic, start_worker, stop, wait_for, wait_started
from stream_dp.accounting.composition import compose
from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.store.keys import Keys
from stream_dp.release.records import events_of, validate_record

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SIZE = 60
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
WINDOWS = 4
MAX_KEYS = 3
TYPES = ("topk", "alerts", "sample")


def run_pipeline(tmp_path, bootstrap: str, redis_url: str, topic_name, *, seed: int, releases: dict,
                 budget: dict, windows: dict | None = None) -> tuple[list[dict], dict[int, dict[str, int]], redis.Redis]:
    events_topic, releases_topic = topic_name("events"), topic_name("releases")
    create_topic(bootstrap, events_topic, 2)
    events = make_events(seed, 3000, users=400, keys=150, windows=WINDOWS, size=SIZE, t0=T0)
    # one event in a later window moves the watermark past the last window (partitions then go idle)
    events.append({"user": "user-tick", "key": "tick", "ts": T0 + WINDOWS * SIZE + SIZE / 2})
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    data = config_mapping(bootstrap, redis_url, events_topic, group=topic_name("g"), size=SIZE, max_keys=MAX_KEYS,
                          lateness=0, idle=1.0, prefix="e2e", budget=budget)
    data["kafka"]["releases_topic"] = releases_topic
    data["windows"].update(windows or {})
    data["releases.histogram"] = {"enabled": False}  # TYPES: each type below enabled, the histogram not
    for name, values in releases.items():
        data[f"releases.{name}"] = {"enabled": True, **values}
    cfg = write_toml(tmp_path / "stream-dp.toml", data)
    produce(bootstrap, events_topic, events)
    ingest = start_ingest(cfg, tmp_path / "ingest.log")
    release = start_worker(cfg, worker_id="r1", log_path=tmp_path / "release.log", claim_ttl=10.0)
    client = redis.Redis.from_url(redis_url)
    try:
        wait_for(lambda: client.zcard(Keys("e2e").release_index("released")) >= WINDOWS, timeout=120,
                 what=f"{WINDOWS} windows released")
        messages = read_topic(bootstrap, releases_topic, expect_at_least=WINDOWS * len(TYPES))
    finally:
        wait_started(tmp_path / "release.log")
        assert stop(release) == 0, (tmp_path / "release.log").read_text()[-3000:]
        assert stop_worker(ingest) == 0, (tmp_path / "ingest.log").read_text()[-3000:]
    groups = by_release_id(messages)
    expected = {f"{T0 + i * SIZE}-{T0 + (i + 1) * SIZE}.{t}" for i in range(WINDOWS) for t in TYPES}
    assert set(groups) == expected  # one release per (window, type); the open tick window is not released
    records = []
    for rid, values in groups.items():
        assert len(values) == 1, f"{rid} published {len(values)} times"
        rec = json.loads(values[0])
        validate_record(rec)
        records.append(rec)
    return records, truth, client


@pytest.mark.parametrize("windows", [{}, {"layout": "key", "shards": 12}], ids=["user", "key-12"])
def test_windows_from_ingest_are_released_once_and_large_epsilon_topk_is_the_true_topk(
        tmp_path, bootstrap_servers, redis_url, topic_name, windows) -> None:
    """Also in the key layout (12 key shards: the two-step apply in the ingest process, the drain and the reads
    per key shard in the release process): the same records, the same true top-k."""
    k, k_bar = 5, 40
    records, truth, client = run_pipeline(
        tmp_path, bootstrap_servers, redis_url, topic_name, seed=3, windows=windows,
        releases={"topk": {"k": k, "k_bar": k_bar, "epsilon": 1e4, "delta": 1e-6},
                  "alerts": {"watchlist": ["item-1", "item-2"], "threshold": 20.0, "k": 3, "epsilon": 1e4},
                  "sample": {"scheme": "pps", "tau": 0.05, "epsilon": 1.0, "delta": 1e-6}},
        budget={"epsilon": 1e9, "delta": 1e-3})
    checked = 0
    for rec in records:
        assert rec["status"] == "released"
        if rec["type"] != "topk":
            continue
        counts = truth[rec["window"]["start"]]
        ranked = sorted(counts.values(), reverse=True)
        released = [it["key"] for it in rec["items"]]
        # ties may be released in any order; the counts of the released keys are the true top-k counts
        assert [counts[key] for key in released] == ranked[:len(released)]
        if ranked[k - 1] > ranked[k_bar] + 1.01:  # the top-k clear the ⊥ count h_(k̄+1) + 1 + tiny
            assert len(released) == k and rec["hit_bottom"] is False
            checked += 1
    assert checked >= 2
    # alerts with a huge ε: the watched keys' answers match the bounded counts
    for rec in (r for r in records if r["type"] == "alerts"):
        counts = truth[rec["window"]["start"]]
        for it in rec["items"]:
            assert it["above"] == (counts.get(it["key"], 0) > 20.0) or abs(counts.get(it["key"], 0) - 20.0) < 1
    client.close()


def test_a_tiny_budget_runs_out_into_status_records_and_the_ledger_stays_under_its_cap(
        tmp_path, bootstrap_servers, redis_url, topic_name) -> None:
    budget = {"epsilon": 2.0, "delta": 1e-4, "delta_prime": 1e-7}
    records, _, client = run_pipeline(
        tmp_path, bootstrap_servers, redis_url, topic_name, seed=4,
        releases={"topk": {"k": 3, "k_bar": 20, "epsilon": 0.2, "delta": 1e-6},
                  "alerts": {"watchlist": ["item-1", "item-2"], "threshold": 20.0, "k": 2, "epsilon": 0.5},
                  "sample": {"scheme": "pps", "tau": 0.05, "epsilon": 0.3, "delta": 1e-6}},
        budget=budget)
    statuses = [r["status"] for r in records]
    assert "budget_exhausted" in statuses and "released" in statuses
    for rec in records:
        assert rec["budget"]["epsilon_spent"] <= budget["epsilon"]
        assert rec["budget"]["delta_spent"] <= budget["delta"]
        if rec["status"] == "budget_exhausted":
            assert rec["items"] == [] and rec["cost"]["events"] == []
    (scope,) = {r["budget"]["scope"] for r in records}
    ledger = Ledger(client, BudgetCap(budget["epsilon"], budget["delta"], budget["delta_prime"]), keys=Keys("e2e"))
    state = ledger.remaining(scope)
    assert state.epsilon_spent <= budget["epsilon"] and state.delta_spent <= budget["delta"]
    assert state.spent.rho == pytest.approx(compose(e for r in records for e in events_of(r)).rho, rel=1e-9)
    client.close()
