"""The release worker in-process: real redis-server and real ledger, records collected instead of produced.

Window state is written into Redis directly following the window contract (what ingest writes), which is
all the release worker reads. Kafka delivery is covered by test_release_e2e.py / test_release_crash.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from stream_dp.accounting.composition import compose
from stream_dp.accounting.budget import scope_for
from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.config import Config, config_from_mapping
from stream_dp.store.keys import Keys
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox
from stream_dp.release.records import events_of, validate_record
from stream_dp.release.worker import ReleaseWorker
from tests.support.windows import set_watermark, write_window

pytestmark = pytest.mark.integration
SIZE = 60


class ListPublisher:
    """Collects records; ``fail_after`` makes it raise (a broker outage) after that many sends."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.records: list[dict[str, Any]] = []
        self.fail_after = fail_after

    def publish(self, record: dict[str, Any]) -> None:
        if self.fail_after is not None and len(self.records) >= self.fail_after:
            raise ConnectionError("broker unavailable")
        self.records.append(json.loads(json.dumps(record)))

    def close(self) -> None:
        pass


def make_cfg(**releases: Any) -> Config:
    base: dict[str, Any] = {
        "topk": {"enabled": True, "k": 3, "k_bar": 10, "epsilon": 1000.0, "delta": 1e-6},
        "alerts": {"enabled": False},
        "sample": {"enabled": False},
        "histogram": {"enabled": False},
    }
    for name, over in releases.items():
        base[name] = {**base.get(name, {}), **over}
    return config_from_mapping({
        "redis": {"key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 600, "start": "0"},
        "budget": {"epsilon": 1e9, "delta": 1e-3, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": base,
    }, environ={})


def make_worker(redis_client, cfg: Config, publisher: ListPublisher | None = None, *, worker_id: str = "w1",
                seed: int | None = 1) -> tuple[ReleaseWorker, ListPublisher, Ledger]:
    publisher = publisher or ListPublisher()
    ledger = Ledger(redis_client, BudgetCap.from_config(cfg.budget), keys=Keys(cfg.redis.key_prefix))
    metrics = ReleaseMetrics(CollectorRegistry())
    outbox = Outbox(ledger, publisher, metrics)  # type: ignore[arg-type]
    worker = ReleaseWorker(cfg, redis_client, ledger, outbox, metrics, worker_id=worker_id, rng=seed)
    return worker, publisher, ledger


def drain(worker: ReleaseWorker, limit: int = 50) -> int:
    n = 0
    while worker.run_once() is not None:
        n += 1
        assert n < limit
    return n


def window_counts(i: int) -> dict[str, float]:
    # distinct, well separated counts: with a huge ε the released top-k is the true top-k
    return {f"key-{i}-{j}": float(100 * (j + 1)) for j in range(20)}


def test_each_closed_window_is_released_once_per_type_and_schema_valid(redis_client) -> None:
    cfg = make_cfg()
    keys = Keys("t")
    for i in range(3):
        write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
    set_watermark(redis_client, keys, 2 * SIZE)  # windows 0 and 1 closed, 2 still open
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 2
    assert [r["release_id"] for r in pub.records] == ["0-60.topk", "60-120.topk"]
    for rec in pub.records:
        validate_record(rec)
        assert rec["status"] == "released"
    # huge ε: exactly the true top-3 in order
    assert [it["key"] for it in pub.records[0]["items"]] == ["key-0-19", "key-0-18", "key-0-17"]
    assert pub.records[0]["hit_bottom"] is False
    # released windows have retention TTLs, are marked, and are not released again
    assert redis_client.hget(keys.window_meta(0), "state") == b"released"
    assert 0 < redis_client.ttl(keys.window_counts(0)) <= 600
    assert redis_client.ttl(keys.window_counts(2 * SIZE)) == -1
    assert drain(worker) == 0
    set_watermark(redis_client, keys, 3 * SIZE)
    assert drain(worker) == 1 and len(pub.records) == 3
    # the ledger's spent equals the sum of the published costs
    scope = pub.records[0]["budget"]["scope"]
    spent = ledger.remaining(scope).spent
    assert spent.rho == pytest.approx(compose(e for r in pub.records for e in events_of(r)).rho, rel=1e-12)


def test_pay_what_you_get_charges_the_outcomes_returned(redis_client) -> None:
    # all counts equal and small ε: ⊥ tends to win early; whatever happened, the charge is per outcome
    cfg = make_cfg(topk={"k": 5, "k_bar": 10, "epsilon": 0.05, "delta": 1e-6})
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {f"k{j}": 3.0 for j in range(30)})
    set_watermark(redis_client, keys, SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg, seed=3)
    drain(worker)
    (rec,) = pub.records
    validate_record(rec)
    (event,) = events_of(rec)
    assert event.count == len(rec["items"]) + int(rec["hit_bottom"])
    assert rec["hit_bottom"]  # a flat histogram far below the ⊥ offset stops early
    scope = rec["budget"]["scope"]
    assert ledger.remaining(scope).spent.rho == pytest.approx(event.count * 0.05**2 / 8)
    assert ledger.history(scope)  # reservation and settlement are in the event log


def test_a_tiny_budget_runs_out_status_records_appear_and_the_cap_holds(redis_client) -> None:
    cfg = make_cfg(topk={"k": 3, "k_bar": 10, "epsilon": 1.0, "delta": 1e-6})
    cfg = cfg.replace(budget=type(cfg.budget)(period_seconds=86400, epsilon=7.0, delta=1e-5, delta_prime=1e-7))
    keys = Keys("t")
    for i in range(6):
        write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
    set_watermark(redis_client, keys, 6 * SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    ran = []
    builder = worker.builders["topk"]
    original = builder.run
    builder.run = lambda *a, **kw: ran.append(1) or original(*a, **kw)  # type: ignore[method-assign]
    assert drain(worker) == 6
    statuses = [r["status"] for r in pub.records]
    assert len(pub.records) == 6 and len({r["release_id"] for r in pub.records}) == 6
    assert "budget_exhausted" in statuses and statuses[0] == "released"
    # once exhausted, stays exhausted; the mechanism ran only for the released ones
    first_out = statuses.index("budget_exhausted")
    assert all(s == "budget_exhausted" for s in statuses[first_out:])
    assert len(ran) == statuses.count("released")
    for rec in pub.records:
        validate_record(rec)
        assert rec["budget"]["epsilon_spent"] <= cfg.budget.epsilon
    scope = pub.records[0]["budget"]["scope"]
    state = ledger.remaining(scope)
    assert state.epsilon_spent <= cfg.budget.epsilon and state.delta_spent <= cfg.budget.delta
    assert worker.metrics.releases.labels("topk", "budget_exhausted")._value.get() == statuses.count(
        "budget_exhausted")


def test_stored_but_unpublished_releases_are_published_first_and_never_recomputed(redis_client) -> None:
    cfg = make_cfg()
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, window_counts(0))
    set_watermark(redis_client, keys, SIZE)
    broken = ListPublisher(fail_after=0)
    worker, _, ledger = make_worker(redis_client, cfg, broken)
    with pytest.raises(ConnectionError):
        worker.run_once()  # charged and stored, the publish failed
    scope = "1970-01-01"
    assert ledger.unpublished(scope) == ["0-60.topk"]
    stored = json.loads(ledger.stored(scope, "0-60.topk"))["record"]
    # a new worker (different seed: fresh noise would differ) publishes the stored record first
    worker2, pub2, _ = make_worker(redis_client, cfg, seed=99)
    worker2.run_once()
    assert pub2.records[0] == {**stored, "budget": pub2.records[0]["budget"]}
    assert ledger.unpublished(scope) == []
    drain(worker2)
    assert [r["release_id"] for r in pub2.records] == ["0-60.topk", "0-60.topk"]  # identical duplicate
    assert pub2.records[0] == pub2.records[1]


def test_a_release_id_already_charged_by_another_worker_is_published_as_stored(redis_client) -> None:
    cfg = make_cfg(topk={"k": 3, "k_bar": 10, "epsilon": 0.01, "delta": 1e-6})  # small ε: noise matters
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, window_counts(0))
    set_watermark(redis_client, keys, SIZE)
    a, pub_a, _ = make_worker(redis_client, cfg, seed=5, worker_id="a")
    b, pub_b, _ = make_worker(redis_client, cfg, seed=6, worker_id="b")
    # a commits but "crashes" before publishing; b takes over the window
    a.outbox.publisher = ListPublisher(fail_after=0)  # type: ignore[assignment]
    with pytest.raises(ConnectionError):
        a.run_once()
    b.recovered = True  # skip start-up recovery: b must find the stored release through the window itself
    assert b.run_once() is not None
    assert len(pub_b.records) == 1
    stored = json.loads(a.ledger.stored("1970-01-01", "0-60.topk"))["record"]
    assert pub_b.records[0]["items"] == stored["items"] and pub_b.records[0]["created_at"] == stored["created_at"]
    assert b.metrics.releases.labels("topk", "republished")._value.get() == 1


def alerts_cfg(**over: Any) -> Config:
    alerts = {"enabled": True, "watchlist": ["w1", "w2"], "threshold": 50.0, "k": 3, "epsilon": 1000.0}
    cfg = make_cfg(topk={"k": 2}, alerts={**alerts, **over.pop("alerts", {})})
    if "period_seconds" in over:
        cfg = cfg.replace(budget=type(cfg.budget)(period_seconds=over["period_seconds"], epsilon=1e9, delta=1e-3,
                                                  delta_prime=1e-7))
    return cfg


def _dump_redis(client: Any) -> str:
    """Every value in the database as text (strings, hashes, lists, sets, sorted sets, streams)."""
    parts = []
    for name in client.scan_iter(count=1000):
        kind = client.type(name).decode()
        if kind == "string":
            parts.append(repr(client.get(name)))
        elif kind == "hash":
            parts.append(repr(client.hgetall(name)))
        elif kind == "list":
            parts.append(repr(client.lrange(name, 0, -1)))
        elif kind == "set":
            parts.append(repr(client.smembers(name)))
        elif kind == "zset":
            parts.append(repr(client.zrange(name, 0, -1)))
        elif kind == "stream":
            parts.append(repr(client.xrange(name)))
    return "\n".join(parts)


def alerts_window(i: int) -> dict[str, float]:
    return {**window_counts(i), "w1": 500.0, "w2": 5.0}


def test_alerts_watch_config_keys_and_earlier_topk_keys_with_one_persistent_instance(redis_client) -> None:
    cfg = alerts_cfg(alerts={"k": 2})
    keys = Keys("t")
    for i in range(4):
        write_window(redis_client, keys, i * SIZE, SIZE, alerts_window(i))
    set_watermark(redis_client, keys, 2 * SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 2
    set_watermark(redis_client, keys, 4 * SIZE)
    worker2, pub2, _ = make_worker(redis_client, cfg, seed=2)  # a restarted worker continues the instance
    assert drain(worker2) == 2
    records = pub.records + pub2.records
    alerts = [r for r in records if r["type"] == "alerts"]
    assert [r["release_id"] for r in alerts] == [f"{i * SIZE}-{(i + 1) * SIZE}.alerts" for i in range(4)]
    for rec in records:
        validate_record(rec)
    # window 0 watches only the config keys; window 1 also the keys top-k released in window 0, never
    # keys of its own window (its top-k ran first but is not "earlier")
    watched = [{it["key"] for it in r["items"]} | set() for r in alerts]
    assert alerts[0]["info"]["watchlist_size"] == 2
    assert alerts[1]["info"]["watchlist_size"] == 4
    assert "key-1-19" not in watched[1] and not any(k.startswith("key-1-") for k in watched[1])
    # huge ε: answers are right, estimates close, lower bounds below the estimate
    for i, r in enumerate(alerts):
        for it in r["items"]:
            truth = alerts_window(i).get(it["key"], 0.0)
            assert it["above"] == (truth > 50)
            if it["above"]:
                assert it["estimate"] == pytest.approx(truth, abs=1.0)
                assert it["lower_bound"] <= it["estimate"]
    # one instance at a time; each opened instance is charged once (its full ε), in the window it opened
    opened = [r for r in alerts if r["info"]["opened"]]
    assert opened[0] is alerts[0]
    for r in alerts:
        assert len(r["cost"]["events"]) == (1 if r["info"]["opened"] else 0)
        if r["info"]["opened"]:
            assert r["cost"]["events"][0]["epsilon"] == 1000.0
    instances = [r["info"]["instance"] for r in alerts]
    assert instances == sorted(instances) and instances[-1] == len(opened)
    # an exhausted instance answers nothing more: the rest of its window is unanswered, the next window
    # opens a new instance
    assert any(r["info"]["instance_exhausted"] for r in alerts)
    for prev, nxt in zip(alerts, alerts[1:]):
        if prev["info"]["instance_exhausted"]:
            assert nxt["info"]["opened"]
            assert len(prev["items"]) + prev["info"]["unanswered"] == prev["info"]["watchlist_size"]
    state = json.loads(redis_client.hget(keys.svt("alerts", "state"), "state"))
    assert state["window"] == 3 * SIZE
    # no recoverable noise (issue 16): nothing in Redis holds a generator state; the staged states were
    # applied and deleted; a closed instance keeps no noisy threshold
    dump = _dump_redis(redis_client)
    assert "bit_generator" not in dump and '"rng"' not in dump
    assert dump.count("noisy_threshold") == (0 if state["svt"] is None else 1)  # the live state only, no payload
    assert redis_client.hlen(keys.svt("alerts", "pending")) == 0
    assert (state["svt"] is None) == bool(alerts[-1]["info"]["instance_exhausted"])
    scope = alerts[0]["budget"]["scope"]
    assert ledger.remaining(scope).spent.rho == pytest.approx(
        compose(e for r in records for e in events_of(r)).rho, rel=1e-12)


def test_alerts_open_a_new_instance_at_a_budget_period_boundary(redis_client) -> None:
    cfg = alerts_cfg(period_seconds=2 * SIZE, alerts={"threshold": 1e6})  # nothing is ever above
    keys = Keys("t")
    for i in range(4):
        write_window(redis_client, keys, i * SIZE, SIZE, alerts_window(i))
    set_watermark(redis_client, keys, 4 * SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 4
    alerts = [r for r in pub.records if r["type"] == "alerts"]
    assert [r["info"]["opened"] for r in alerts] == [True, False, True, False]
    assert [r["budget"]["scope"] for r in alerts] == ["p0", "p0", "p120", "p120"]
    assert all(not it["above"] for r in alerts for it in r["items"])
    # each period's ledger holds the instance that answered about its windows
    for scope in ("p0", "p120"):
        hist = [e for e in ledger.history(scope) if e.type in ("charge", "settle")]
        svt = [ev for e in hist for ev in e.events if ev.mechanism == "adaptive_svt"]
        assert len(svt) == 1


def test_alerts_status_when_the_budget_cannot_open_an_instance(redis_client) -> None:
    cfg = alerts_cfg(alerts={"epsilon": 5.0})
    cfg = cfg.replace(budget=type(cfg.budget)(period_seconds=86400, epsilon=6.0, delta=1e-3, delta_prime=1e-7),
                      releases=type(cfg.releases)(topk=type(cfg.releases.topk)(enabled=False),
                                                  alerts=cfg.releases.alerts,
                                                  sample=cfg.releases.sample,
                                                  histogram=type(cfg.releases.histogram)(enabled=False)))
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, alerts_window(0))
    set_watermark(redis_client, keys, SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    # one instance (ε = 5) fits an empty period of ε = 6, but not after something else spent ε = 2
    assert ledger.charge(scope_for(0, 86400), "earlier-release", [PureDpEvent(2.0)]).accepted
    drain(worker)
    (rec,) = pub.records
    validate_record(rec)
    assert rec["status"] == "budget_exhausted" and rec["items"] == [] and rec["cost"]["events"] == []


def test_argmax_and_watch_topk_release_public_answers(redis_client) -> None:
    cfg = make_cfg(argmax={"enabled": True, "epsilon": 50.0, "delta": 1e-6},
                   watch_topk={"enabled": True, "k": 2, "epsilon": 500.0},
                   alerts={"enabled": False, "watchlist": ["w1", "w2", "w3"]})
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {**window_counts(0), "key-0-19": 100000.0, "w1": 900.0,
                                              "w2": 30.0, "w3": 500.0})
    write_window(redis_client, keys, SIZE, SIZE, {"w1": 1.0})
    set_watermark(redis_client, keys, 2 * SIZE)
    worker, pub, _ = make_worker(redis_client, cfg)
    assert drain(worker) == 2
    for rec in pub.records:
        validate_record(rec)
    by_id = {r["release_id"]: r for r in pub.records}
    # a clear winner (margin far above the large-margin thresholds) is found over the public universe
    assert by_id["0-60.argmax"]["items"] == [{"key": "key-0-19", "rank": 1}]
    # no margin in a window with one small count: the universe of unseen keys wins, nothing is named
    assert by_id["60-120.argmax"]["items"] == [] and by_id["60-120.argmax"]["info"]["no_clear_winner"]
    wt = by_id["0-60.watch_topk"]
    assert [it["key"] for it in wt["items"]] == ["w1", "w3"]
    assert wt["items"][0]["gap"] == pytest.approx(400.0, abs=5.0)
    assert [e["mechanism"] for e in wt["cost"]["events"]] == ["noisy_topk_with_gap"]


def test_the_schema_rejects_malformed_records(redis_client) -> None:
    import jsonschema

    cfg = make_cfg()
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, window_counts(0))
    set_watermark(redis_client, keys, SIZE)
    worker, pub, _ = make_worker(redis_client, cfg)
    drain(worker)
    (good,) = pub.records
    validate_record(good)
    broken = [
        {k: v for k, v in good.items() if k != "budget"},
        {**good, "schema_version": 2},
        {**good, "release_id": "0-60.unknown"},
        {**good, "items": [{"rank": 1}]},  # no key
        {**good, "hit_bottom": None},  # a released top-k must say whether it stopped at ⊥
        {**good, "status": "budget_exhausted"},  # a status record carries no items or cost
        {**good, "count": 5},  # no room for extra (e.g. raw) fields
    ]
    for rec in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate_record(rec)


def test_sample_releases_tokens_and_estimates_from_the_whole_window(redis_client) -> None:
    cfg = make_cfg(topk={"enabled": False}, sample={"enabled": True, "scheme": "pps", "tau": 0.05,
                                                    "epsilon": 2.0, "delta": 1e-6})
    keys = Keys("t")
    counts = {f"k{j}": float(j) for j in range(1, 3001)}  # more keys than one read chunk of the test
    write_window(redis_client, keys, 0, SIZE, counts)
    set_watermark(redis_client, keys, SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    worker.reader.read_chunk = 1000  # the window is read in several chunks
    drain(worker)
    (rec,) = pub.records
    validate_record(rec)
    assert rec["cost"]["events"][0]["mechanism"] == "private_weighted_sample"
    # charged as Δ = 5 composed per-key mechanisms at (ε/Δ, δ/Δ)
    event = rec["cost"]["events"][0]
    assert (event["epsilon"], event["delta"], event["count"]) == (0.4, 2e-7, 5)
    assert rec["mechanism"]["parameters"]["estimator"] == "mle"
    sampled = {it["key"]: it for it in rec["items"]}
    # PPS with τ = 0.05: keys with count ≥ 1/τ = 20 are sampled with probability 1 unless the sanitizer
    # drops them; the largest keys are far above the sanitizer's reporting threshold at ε/Δ = 0.4
    assert all(f"k{j}" in sampled for j in range(2900, 3001))
    for key, it in sampled.items():
        assert 1 <= it["token"] <= counts[key]


def test_sample_of_an_empty_window_is_released_empty_and_charged(redis_client) -> None:
    """Every window on the schedule is released, empty ones too: the sample reads an empty histogram, reads no
    key, publishes no item, and is charged like any other (its cost does not depend on the data)."""
    from stream_dp.release.builders import SampleBuilder
    from stream_dp.release.windows import Window

    cfg = make_cfg(topk={"enabled": False}, sample={"enabled": True, "scheme": "pps", "tau": 0.05,
                                                    "epsilon": 2.0, "delta": 1e-6})
    worker, _, _ = make_worker(redis_client, cfg)
    builder = SampleBuilder(cfg)
    data = builder.read(worker.reader, Window(0, SIZE), []).now()
    assert data[0] == []
    draft = builder.run(Window(0, SIZE), data, 1)
    assert draft.items == [] and draft.info == {"sampled": 0}
    assert tuple(draft.events) == builder.measurement.privacy_map() and len(draft.events) > 0


def test_metrics_count_releases_budget_and_svt_without_keys_in_labels(redis_client) -> None:
    from prometheus_client import generate_latest

    cfg = alerts_cfg(alerts={"k": 2})
    keys = Keys("t")
    for i in range(2):
        write_window(redis_client, keys, i * SIZE, SIZE, alerts_window(i))
    set_watermark(redis_client, keys, 2 * SIZE)
    registry = CollectorRegistry()
    ledger = Ledger(redis_client, BudgetCap.from_config(cfg.budget), keys=keys)
    metrics = ReleaseMetrics(registry)
    pub = ListPublisher()
    worker = ReleaseWorker(cfg, redis_client, ledger, Outbox(ledger, pub, metrics), metrics,  # type: ignore[arg-type]
                           worker_id="m", rng=1)
    assert drain(worker) == 2

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert value("stream_dp_release_releases_total", type="topk", outcome="released") == 2
    assert value("stream_dp_release_releases_total", type="alerts", outcome="released") == 2
    assert value("stream_dp_release_releases_total", type="sample", outcome="budget_exhausted") == 0  # exists at 0
    assert value("stream_dp_release_items_total", type="topk") == 4
    assert value("stream_dp_release_windows_total") == 2
    assert value("stream_dp_release_publish_latency_seconds_count") == 2
    assert value("stream_dp_svt_instances_opened_total") == sum(r["info"].get("opened", False) for r in pub.records)
    answers = sum(len(r["items"]) for r in pub.records if r["type"] == "alerts")
    assert value("stream_dp_svt_answers_total", answer="above") + value("stream_dp_svt_answers_total",
                                                                          answer="below") == answers
    scope = pub.records[-1]["budget"]["scope"]
    assert value("stream_dp_budget_epsilon_spent", scope=scope) == pytest.approx(pub.records[-1]["budget"]["epsilon_spent"])
    assert value("stream_dp_release_phase_seconds_total", phase="mechanism") > 0
    text = generate_latest(registry).decode()
    assert "key-0-" not in text and "w1" not in text  # no key ever becomes a label value


def test_a_new_svt_instance_draws_from_its_own_stream_not_the_workers(redis_client) -> None:
    # the stored state holds no generator (issue 16): a resumed instance draws fresh noise and never
    # replays the noise the worker then draws for the next window's other mechanisms
    from stream_dp.mechanisms import AdaptiveSVT

    cfg = alerts_cfg(alerts={"threshold": 1e6})
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, alerts_window(0))
    set_watermark(redis_client, keys, SIZE)
    worker, _, _ = make_worker(redis_client, cfg)
    drain(worker)
    state = json.loads(redis_client.hget(keys.svt("alerts", "state"), "state"))
    resumed = AdaptiveSVT.from_state(state["svt"])
    worker_next = worker.rng.random(8)
    svt_next = resumed._rng.random(8)
    assert not (worker_next == svt_next).any()


def test_a_production_worker_draws_from_a_csprng_and_its_releases_work(redis_client) -> None:
    from stream_dp.rng import is_secure

    cfg = alerts_cfg()
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, alerts_window(0))
    set_watermark(redis_client, keys, SIZE)
    worker, pub, _ = make_worker(redis_client, cfg, seed=None)  # what build_worker passes in production
    assert is_secure(worker.rng)
    assert drain(worker) == 1
    assert {r["type"] for r in pub.records} == set(worker.types) and pub.records
    assert all(r["status"] == "released" for r in pub.records)


def test_worker_refuses_to_start_when_one_release_can_never_fit_the_period_cap(redis_client) -> None:
    """A cap smaller than one worst-case release would refuse every window: fail at startup instead."""
    from stream_dp.config import ConfigError

    cfg = make_cfg(topk={"epsilon": 0.5, "k": 3})
    cfg = cfg.replace(budget=dataclasses.replace(cfg.budget, epsilon=1.5))  # topk worst case: Σε = 1.5
    make_worker(redis_client, cfg)  # fits exactly: starts
    tight = cfg.replace(budget=dataclasses.replace(cfg.budget, epsilon=1.4))
    with pytest.raises(ConfigError, match="budget.epsilon"):
        make_worker(redis_client, tight)
    sample = make_cfg(sample={"enabled": True, "delta": 1e-3})
    with pytest.raises(ConfigError, match="budget.delta"):
        make_worker(redis_client, sample.replace(budget=dataclasses.replace(sample.budget, delta=1e-4)))


def test_histogram_releases_noisy_counts_above_the_threshold_and_settles_its_reserved_cost(redis_client) -> None:
    # each window alone (no released domain: window 1 would track window 0's keys, tests/integration/test_released_domain.py)
    cfg = make_cfg(topk={"enabled": False},
                   histogram={"enabled": True, "epsilon": 2.0, "delta": 1e-7, "max_keys": 3, "confidence": 0.9,
                              "domain_from_released": False})
    keys = Keys("t")
    counts = {**{f"hot{j}": float(5000 + 1000 * j) for j in range(5)}, "rare": 1.0, "small": 2.0}
    write_window(redis_client, keys, 0, SIZE, counts)
    write_window(redis_client, keys, SIZE, SIZE, {"only-one-user": 1.0})
    set_watermark(redis_client, keys, 2 * SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 2
    first, second = pub.records
    for rec in pub.records:
        validate_record(rec)
        assert rec["type"] == "histogram" and rec["status"] == "released"
    params = first["mechanism"]["parameters"]
    # the cap keeps the 3 largest noisy counts among the 5 keys above the threshold
    assert [it["key"] for it in first["items"]] == ["hot4", "hot3", "hot2"]
    assert first["info"] == {"above_threshold": 5, "capped": True, "ci_half_width": first["info"]["ci_half_width"],
                             "confidence": 0.9}
    for it in first["items"]:
        assert isinstance(it["count"], int) and it["ci_low"] < it["count"] < it["ci_high"]
        assert abs(it["count"] - counts[it["key"]]) < 10 * float(Fraction(params["sigma2"])) ** 0.5
    # a window whose only key one user touched: nothing above τ, still a (charged) record
    assert second["items"] == [] and second["info"]["above_threshold"] == 0
    (event,) = events_of(first)
    assert event.kind == "zcdp" and event.rho == pytest.approx(5 / (2 * float(Fraction(params["sigma2"]))))
    assert event.delta == 1e-7
    scope = first["budget"]["scope"]
    assert ledger.remaining(scope).spent.rho == pytest.approx(2 * event.rho, rel=1e-12)
    assert events_of(second) == [event]


def test_histogram_with_laplace_noise_charges_pure_epsilon_and_its_threshold_delta(redis_client) -> None:
    """releases.histogram.noise = "laplace": discrete Laplace counts, one (ε, δ) event (basic route), the record
    says so; a key only one user touched stays below τ."""
    cfg = make_cfg(topk={"enabled": False},
                   histogram={"enabled": True, "noise": "laplace", "epsilon": 2.0, "delta": 1e-7, "max_keys": 10})
    keys = Keys("t")
    counts = {**{f"hot{j}": float(500 + 100 * j) for j in range(3)}, "rare": 1.0}
    write_window(redis_client, keys, 0, SIZE, counts)
    set_watermark(redis_client, keys, SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 1
    (rec,) = pub.records
    validate_record(rec)
    params = rec["mechanism"]["parameters"]
    assert rec["mechanism"]["name"] == "laplace_histogram" and params["noise"] == "discrete_laplace"
    assert [it["key"] for it in rec["items"]] == ["hot2", "hot1", "hot0"]
    scale = float(Fraction(params["scale"]))
    assert scale == 5 / 2.0  # Δ/ε with the default Δ = 5
    for it in rec["items"]:
        assert abs(it["count"] - counts[it["key"]]) < 40 * scale
    (event,) = events_of(rec)
    assert event.kind == "approx_dp" and event.epsilon == 2.0 and event.delta == 1e-7
    spent = ledger.remaining(rec["budget"]["scope"]).spent
    assert spent.basic_epsilon == 2.0 and spent.basic_delta == 1e-7


def test_histogram_with_the_exact_calibration_charges_both_guarantees(redis_client) -> None:
    """releases.histogram.calibration = "exact": σ and τ by the exact joint profile at (ε, δ + δ′), one
    ZCdpAndApproxDpEvent (both guarantees); the ledger takes the smaller ε of its two routes -- the exact ε for
    one window -- and the record names the calibration."""
    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram
    from stream_dp.mechanisms.sparse_gaussian_profile import sparse_histogram_delta

    cfg = make_cfg(topk={"enabled": False},
                   histogram={"enabled": True, "calibration": "exact", "epsilon": 2.0, "delta": 1e-7, "max_keys": 10})
    keys = Keys("t")
    counts = {**{f"hot{j}": float(500 + 100 * j) for j in range(3)}, "rare": 1.0}
    write_window(redis_client, keys, 0, SIZE, counts)
    set_watermark(redis_client, keys, SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 1
    (rec,) = pub.records
    validate_record(rec)
    params = rec["mechanism"]["parameters"]
    assert rec["mechanism"]["name"] == "gaussian_histogram" and params["calibration"] == "exact"
    assert [it["key"] for it in rec["items"]] == ["hot2", "hot1", "hot0"]
    sigma2, tau, total = Fraction(params["sigma2"]), params["threshold"], 1e-7 + cfg.budget.delta_prime
    assert sparse_histogram_delta(sigma2=sigma2, threshold=tau, max_keys_per_user=5, epsilon=2.0) <= total
    zcdp = calibrate_histogram(epsilon=2.0, threshold_delta=1e-7, conversion_delta=cfg.budget.delta_prime,
                               max_keys_per_user=5)
    assert sigma2 < zcdp.sigma2 and tau < zcdp.threshold  # less noise, lower threshold, same (ε, δ + δ′)
    (event,) = events_of(rec)
    assert event.kind == "zcdp_and_approx_dp" and (event.epsilon, event.delta) == (2.0, total)
    assert event.rho == pytest.approx(5 / (2 * float(sigma2))) and event.zcdp_delta <= total
    spent = ledger.remaining(rec["budget"]["scope"]).spent
    assert (spent.basic_epsilon, spent.basic_delta, spent.rho) == (2.0, total, event.rho)
    assert spent.epsilon(cfg.budget.delta_prime) == 2.0  # the cap rule's smaller ε: the exact one
    assert rec["budget"]["epsilon_spent"] == pytest.approx(2.0)


def test_topk_with_a_known_domain_tracks_it_and_discovers_keys_outside_it(redis_client, tmp_path) -> None:
    domain_file = tmp_path / "catalogue.txt"
    domain_file.write_text("d3\n\nd4\n")
    cfg = make_cfg(topk={"k": 3, "k_bar": 5, "epsilon": 1000.0, "delta": 1e-6, "domain": ["d1", "d2"],
                         "domain_file": str(domain_file), "domain_from_released": True,
                         "discovery_share": 0.2, "discovery": "limited_domain"})
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"d1": 5000.0, "d3": 3000.0, "new": 9000.0, "noise": 2.0})
    write_window(redis_client, keys, SIZE, SIZE, {"d1": 10.0, "new": 7000.0, "d4": 4000.0})
    set_watermark(redis_client, keys, 2 * SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 2
    first, second = pub.records
    for rec in pub.records:
        validate_record(rec)
        assert rec["mechanism"]["name"] == "known_domain_topk"
    assert [(it["key"], it["source"]) for it in first["items"]] == [
        ("new", "discovered"), ("d1", "domain"), ("d3", "domain")]
    assert first["mechanism"]["parameters"]["domain_size"] == 4  # d1, d2, d3, d4
    # "new" was released in window 0, so it is in window 1's domain
    assert [(it["key"], it["source"]) for it in second["items"]] == [
        ("new", "domain"), ("d4", "domain"), ("d1", "domain")]
    assert second["mechanism"]["parameters"]["domain_size"] == 5
    # charged: discovery outcomes (pay what you get, with δ) + 3 tracked peels (no δ); ρ split 0.2 / 0.8
    discover, track = events_of(first)
    assert (discover.mechanism, track.mechanism) == ("limited_domain_topk", "known_domain_gumbel_topk")
    assert discover.count == len(first["info"]["discovered"]) + int(first["hit_bottom"])
    assert discover.epsilon == pytest.approx(1000.0 * 0.2 ** 0.5) and discover.delta == 1e-6
    assert track.epsilon == pytest.approx(1000.0 * 0.8 ** 0.5) and track.count == 3 and track.delta == 0.0
    scope = first["budget"]["scope"]
    spent = ledger.remaining(scope).spent
    assert spent.rho == pytest.approx(compose(e for r in pub.records for e in events_of(r)).rho, rel=1e-12)


def test_a_state_stored_by_an_older_version_is_scrubbed_and_closed(redis_client) -> None:
    """Before issue 16 the stored SVT state carried its generator state (recoverable noise): on load it is
    closed (the next window opens a new instance) and the generator state is deleted from Redis."""
    from stream_dp.mechanisms import AdaptiveSVT
    from stream_dp.release.alerts import AlertsStore

    keys = Keys("t")
    gen = np.random.Generator(np.random.PCG64(3))
    svt = {**AdaptiveSVT(50, k=3, epsilon=1.0, rng=gen).to_state(),
           "rng": {"bit_generator": "PCG64", "state": json.dumps(gen.bit_generator.state)}}
    legacy = {"instance": 1, "scope": "p0", "svt": svt, "window": 0}
    redis_client.hset(keys.svt("alerts", "state"), mapping={"window": 0, "state": json.dumps(legacy)})
    store = AlertsStore(redis_client, keys=keys)
    state = store.from_stored(store.load().now())
    assert state is not None and state.closed and state.instance == 1
    assert "bit_generator" not in _dump_redis(redis_client)


def test_after_start_runs_once_when_start_up_is_done_and_not_when_it_failed(redis_client) -> None:
    """The release process freezes its start-up heap out of the garbage collector's view through
    ``after_start`` (stream_dp.processes.freeze_start_up_heap): it must run after start-up (schedule, scripts,
    recovery) has finished, exactly once, and not for a start that failed."""
    from stream_dp.schedule import ScheduleMismatch

    keys = Keys("t")
    calls: list[bool] = []
    cfg = make_cfg()
    worker, _, _ = make_worker(redis_client, cfg)
    worker.after_start = lambda: calls.append(worker.recovered)
    write_window(redis_client, keys, 0, SIZE, {"a": 5.0})
    set_watermark(redis_client, keys, 2 * SIZE)
    assert drain(worker) == 2
    assert calls == [True]  # once, with start-up finished, however many passes ran
    worker.start()
    assert calls == [True]

    other = cfg.replace(windows=dataclasses.replace(cfg.windows, size_seconds=2 * SIZE))  # refused: schedule differs
    failing, _, _ = make_worker(redis_client, other, worker_id="w2")
    failing.after_start = lambda: calls.append(failing.recovered)
    with pytest.raises(ScheduleMismatch):
        failing.run_once()
    assert calls == [True]


def _strict_json(data: bytes) -> Any:
    """RFC 8259 JSON only: ``NaN``/``Infinity`` (Python's json extension) refused, as browsers, Go, Java and
    jq refuse them."""
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")
    return json.loads(data, parse_constant=refuse)


async def _asgi_get(app: Any, path: str) -> tuple[int, bytes]:
    """One GET through the ASGI app itself (no HTTP client library needed): status and body."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": [],
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


class WirePublisher(ListPublisher):
    """Keeps what a subscriber receives: the bytes of :func:`stream_dp.release.records.encode`."""

    def publish(self, record: dict[str, Any]) -> None:
        from stream_dp.release.records import encode

        self.records.append(_strict_json(encode(record)))


def test_every_release_type_reaches_subscribers_as_strict_json_and_the_dashboard_serves_it(redis_client) -> None:
    """A zCDP-only release (histogram) has no finite basic-composition ε; its record carries ``null`` there,
    never ``Infinity`` (which strict parsers refuse and the dashboard's JSON responses cannot encode)."""
    from stream_dp.client import check_record
    from stream_dp.dashboard.app import create_app
    from stream_dp.dashboard.board import ReleaseBoard
    from stream_dp.release.records import encode, with_budget

    cfg = make_cfg(histogram={"enabled": True, "epsilon": 2.0, "delta": 1e-7},
                   sample={"enabled": True, "delta": 1e-5})
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {**{f"hot{j}": float(500 + 100 * j) for j in range(5)}, "rare": 1.0})
    set_watermark(redis_client, keys, SIZE)
    worker, pub, ledger = make_worker(redis_client, cfg, WirePublisher())
    assert drain(worker) == 1
    assert {r["type"] for r in pub.records} == {"topk", "histogram", "sample"}
    for rec in pub.records:  # what the ledger stores (and republishes after a crash) is strict JSON too
        _strict_json(ledger.stored(worker.scope_for(0), rec["release_id"]).encode())
    histogram = next(r for r in pub.records if r["type"] == "histogram")
    assert histogram["cost"]["epsilon"] is None and histogram["cost"]["rho"] > 0
    board = ReleaseBoard()
    for rec in pub.records:
        validate_record(rec)
        assert check_record(rec) == rec  # the subscriber client's check
        board.add(rec)
    status, body = asyncio.run(_asgi_get(create_app(board), "/api/releases"))
    assert status == 200 and _strict_json(body)["count"] == 3
    # a record stored by an earlier version (ε written as a float infinity) is published as null, and a
    # non-finite number anywhere else is refused before it reaches the topic
    legacy = {**histogram, "cost": {**histogram["cost"], "epsilon": float("inf")}}
    assert _strict_json(encode(with_budget(legacy, histogram["budget"])))["cost"]["epsilon"] is None
    with pytest.raises(ValueError):
        encode({**histogram, "info": {"x": float("nan")}})
