"""The released domain (stream_dp/release/released_domain.py, docs/privacy.md §10) through the release worker on a
real redis-server: a window's domain is learned from the records earlier windows *published* -- read back from the
ledger's outbox in schedule order -- and every record states it, so a subscriber recomputes it from the topic.

Window state is written the way ingest writes it (tests.support.windows). The histogram runs at ε = 50
(σ² = 0.142, τ = 4, interval ± 1): a tracked key with count ≥ 3 is re-earned (its interval stays above 0), a
tracked key with count 0 is not (P[noise ≥ 2] < 1e-6), so the assertions hold for any noise draw.
"""

from __future__ import annotations

from typing import Any

import pytest

from eval.continual import MemoryProducer
from stream_dp.accounting.budget import scope_for
from stream_dp.config import Config, config_from_mapping
from stream_dp.store.keys import Keys
from stream_dp.release.outbox import Publisher
from stream_dp.release.records import validate_record
from stream_dp.release.released_domain import (DomainNotPublished, DomainRule, domain_digest,
                                               learned_domain_of_view)
from stream_dp.release.windows import Window
from tests.support.windows import set_watermark, write_window
from stream_dp.wire import join_parts

from test_release_worker import drain, make_worker

pytestmark = pytest.mark.integration
SIZE = 60


def cfg_with(*, memory: int = 2, budget: dict[str, Any] | None = None, **releases: Any) -> Config:
    base: dict[str, Any] = {
        "topk": {"enabled": False}, "alerts": {"enabled": False}, "sample": {"enabled": False},
        "histogram": {"enabled": True, "epsilon": 50.0, "delta": 1e-6, "domain_from_released": True,
                      "domain_memory_windows": memory},
    }
    for name, over in releases.items():
        base[name] = {**base.get(name, {}), **over}
    return config_from_mapping({
        "redis": {"key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 600, "start": "0"},
        "budget": budget or {"epsilon": 1e9, "delta": 1e-3, "delta_prime": 1e-7, "period_seconds": 86400},
        "releases": base,
    }, environ={})


def learned(record: dict[str, Any]) -> dict[str, Any]:
    return record["domain"]["from_released"]


def check_against_the_topic(records: list[dict[str, Any]], cfg: Config, release_type: str) -> None:
    """What a subscriber does: recompute each record's learned domain from the records before it and compare the
    digest and counts the record states."""
    rule = DomainRule.of(cfg, release_type)
    assert rule is not None
    for rec in records:
        if rec["type"] != release_type or rec["status"] != "released":
            continue
        validate_record(rec)
        mine = learned_domain_of_view(records, rule, rec["window"]["start"], size=SIZE, schedule_start=0)
        stated = learned(rec)
        assert (stated["digest"], stated["keys"], stated["candidates"]) == (
            domain_digest(mine.keys), len(mine.keys), mine.candidates), rec["release_id"]


def test_the_histogram_tracks_published_keys_and_lets_them_age_out(redis_client) -> None:
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"a": 50.0, "b": 40.0, "c": 2.0})
    write_window(redis_client, keys, SIZE, SIZE, {"a": 3.0, "d": 60.0})  # a below τ = 4; b absent
    set_watermark(redis_client, keys, 5 * SIZE)  # windows 2..4 empty
    cfg = cfg_with(memory=2)
    worker, pub, _ = make_worker(redis_client, cfg)
    assert drain(worker) == 5
    w = {rec["window"]["start"] // SIZE: rec for rec in pub.records}
    by_source = {i: {it["key"]: it["source"] for it in w[i]["items"]} for i in w}
    # window 0 has no earlier window: nothing learned, a and b found above the threshold
    assert w[0]["domain"] == {"size": 0, "static": 0, "from_released": {
        "types": ["histogram"], "memory_windows": 2, "windows": [], "order": "recent", "max_keys": 1000,
        "candidates": 0, "keys": 0, "digest": domain_digest([])}}
    assert by_source[0] == {"a": "discovered", "b": "discovered"}
    # window 1 tracks a and b (released whatever their noisy count: a's 3 is below τ), finds d
    assert by_source[1] == {"d": "discovered", "a": "domain", "b": "domain"}
    assert learned(w[1])["windows"] == [0, 0] and w[1]["domain"]["size"] == 2
    assert w[1]["mechanism"]["parameters"]["domain_size"] == 2
    # window 2 reads windows 0 and 1: d and a (re-earned in 1, most recent first), then b (last shown in 0)
    assert set(by_source[2]) == {"d", "a", "b"} and learned(w[2])["windows"] == [0, SIZE]
    # window 3 reads 1 and 2: b was not re-earned in 1 (count 0) -- it aged out; window 4 reads two empty windows
    assert set(by_source[3]) == {"d", "a"}
    assert by_source[4] == {} and w[4]["domain"]["size"] == 0
    check_against_the_topic(pub.records, cfg, "histogram")


def test_most_often_published_first_and_the_bound(redis_client) -> None:
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"often": 30.0, "once": 90.0})
    write_window(redis_client, keys, SIZE, SIZE, {"often": 30.0, "late": 80.0})
    set_watermark(redis_client, keys, 3 * SIZE)
    cfg = cfg_with(memory=3, histogram={"domain_order": "frequent", "domain_max_keys": 2})
    worker, pub, _ = make_worker(redis_client, cfg)
    assert drain(worker) == 3
    third = pub.records[2]
    # candidates: often (2 windows), late and once (1 each; late more recent) -- the bound keeps two
    assert learned(third)["candidates"] == 3 and learned(third)["digest"] == domain_digest(["often", "late"])
    assert {it["key"] for it in third["items"]} == {"often", "late"}
    check_against_the_topic(pub.records, cfg, "histogram")


def test_a_budget_exhausted_window_publishes_no_key_to_learn_from(redis_client) -> None:
    """Two windows per budget period and room for one release each: window 1 is refused (nothing ran), so window
    2 (memory 1) learns from it nothing, though its data held a clear winner."""
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"a": 50.0})
    write_window(redis_client, keys, SIZE, SIZE, {"e": 500.0})
    set_watermark(redis_client, keys, 3 * SIZE)
    probe = cfg_with(memory=1)
    cfg = cfg_with(memory=1, budget={"epsilon": 60.0, "delta": 1e-3, "delta_prime": 1e-7,
                                     "period_seconds": 2 * SIZE, "allow_partial_period": True})
    assert probe.releases.histogram.epsilon == 50.0
    worker, pub, _ = make_worker(redis_client, cfg)
    assert drain(worker) == 3
    assert [r["status"] for r in pub.records] == ["released", "budget_exhausted", "released"]
    assert pub.records[2]["domain"]["size"] == 0 and learned(pub.records[2])["windows"] == [SIZE, SIZE]
    assert "e" not in {it["key"] for it in pub.records[2]["items"]}
    check_against_the_topic(pub.records, cfg, "histogram")


def test_a_restarted_worker_and_a_second_worker_learn_the_same_domain(redis_client) -> None:
    """Nothing of the domain lives in a worker: a new worker (a restart) and two workers taking turns compute it
    from the stored records, exactly as a subscriber does."""
    keys = Keys("t")
    for i, counts in enumerate([{"a": 50.0}, {"b": 50.0, "a": 5.0}, {"c": 50.0}, {"a": 9.0}]):
        write_window(redis_client, keys, i * SIZE, SIZE, counts)
    cfg = cfg_with(memory=2)
    first, pub, _ = make_worker(redis_client, cfg, worker_id="first")
    set_watermark(redis_client, keys, 2 * SIZE)
    assert drain(first) == 2
    set_watermark(redis_client, keys, 4 * SIZE)
    restarted, _, _ = make_worker(redis_client, cfg, pub, worker_id="restarted", seed=2)
    other, _, _ = make_worker(redis_client, cfg, pub, worker_id="other", seed=3)
    assert restarted.run_once() is not None and other.run_once() is not None
    assert restarted.run_once() is None and other.run_once() is None
    assert [r["window"]["start"] for r in pub.records] == [0, SIZE, 2 * SIZE, 3 * SIZE]
    assert learned(pub.records[3])["digest"] == domain_digest(["c", "b", "a"])
    check_against_the_topic(pub.records, cfg, "histogram")


def test_the_domain_reads_only_released_windows_and_published_records(redis_client) -> None:
    """The worker releases windows in schedule order; the reader checks it rather than trusting it."""
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"a": 50.0})
    set_watermark(redis_client, keys, SIZE)
    cfg = cfg_with(memory=2)
    worker, pub, ledger = make_worker(redis_client, cfg)
    assert drain(worker) == 1
    rule = DomainRule.of(cfg, "histogram")
    assert rule is not None
    with pytest.raises(DomainNotPublished, match="windows starting at 60 released first"):
        worker.released_domains.domain_for(Window(2 * SIZE, 3 * SIZE), rule)
    assert worker.released_domains.domain_for(Window(SIZE, 2 * SIZE), rule).keys == ("a",)
    # a record stored but not marked published (a crash between commit and publication) is not read
    scope = scope_for(0, cfg.budget.period_seconds)
    redis_client.zadd(keys.ledger(scope, "unpublished"), {"0-60.histogram": 1})
    fresh, _, _ = make_worker(redis_client, cfg, worker_id="fresh")
    with pytest.raises(DomainNotPublished, match="stored but not yet published"):
        fresh.released_domains.domain_for(Window(SIZE, 2 * SIZE), rule)
    assert len(pub.records) == 1


def test_a_record_published_in_parts_is_learned_whole(redis_client) -> None:
    """A histogram too large for one message goes out in parts; the domain is read from the stored (whole)
    record, and a subscriber that joins the parts (stream_dp.client) recomputes the same domain."""
    keys = Keys("t")
    many = {f"a-rather-long-key-name-to-fill-the-message-{i:04d}": 100.0 + i for i in range(600)}
    write_window(redis_client, keys, 0, SIZE, many)
    set_watermark(redis_client, keys, 2 * SIZE)
    cfg = cfg_with(memory=1)
    producer = MemoryProducer()  # keeps every message: the parts of large records
    publisher = Publisher(producer, "releases", max_message_bytes=16384)
    worker, _, _ = make_worker(redis_client, cfg, publisher)  # type: ignore[arg-type]
    assert drain(worker) == 2
    assert any("part" in m for m in producer.records)
    records: list[dict[str, Any]] = []
    for m in producer.records:
        if "part" not in m:
            records.append(m)
        elif m["part"]["index"] == m["part"]["count"] - 1:
            records.append(join_parts([p for p in producer.records if p["release_id"] == m["release_id"]]))
    assert [r["release_id"] for r in records] == ["0-60.histogram", "60-120.histogram"]
    assert learned(records[1])["keys"] == 600 and records[1]["domain"]["size"] == 600
    check_against_the_topic(records, cfg, "histogram")


def test_topk_learns_from_its_own_releases_and_discovers_by_threshold(redis_client) -> None:
    """Known-domain top-k with only a released domain: window 0 finds keys by threshold discovery (no k̄-based ⊥),
    window 1 tracks them -- also one that fell below the discovery threshold."""
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"hot": 900.0, "warm": 700.0, "cold": 1.0})
    write_window(redis_client, keys, SIZE, SIZE, {"hot": 900.0, "warm": 3.0, "new": 800.0})
    set_watermark(redis_client, keys, 2 * SIZE)
    cfg = cfg_with(memory=2, histogram={"enabled": False},
                   topk={"enabled": True, "k": 3, "k_bar": 10, "epsilon": 40.0, "delta": 1e-6,
                         "domain_from_released": True, "discovery_share": 0.5, "domain_memory_windows": 2})
    worker, pub, _ = make_worker(redis_client, cfg)
    assert drain(worker) == 2
    first, second = pub.records
    assert first["mechanism"]["parameters"]["discovery"] == "threshold"
    assert [(it["key"], it["source"]) for it in first["items"]][:2] == [("hot", "discovered"), ("warm", "discovered")]
    assert ("hot", "domain") in [(it["key"], it["source"]) for it in second["items"]]
    assert ("new", "discovered") in [(it["key"], it["source"]) for it in second["items"]]
    assert first["hit_bottom"] is False and second["domain"]["size"] >= 2
    check_against_the_topic(pub.records, cfg, "topk")


def test_the_alerts_watchlist_can_be_learned_from_topk(redis_client) -> None:
    """``releases.alerts.domain_from_released``: the watchlist is the config keys and the keys top-k published in
    the last windows (aging out), read under the window's claim; the alerts record states it."""
    keys = Keys("t")
    write_window(redis_client, keys, 0, SIZE, {"x": 900.0, "y": 800.0})
    write_window(redis_client, keys, SIZE, SIZE, {"x": 900.0, "z": 700.0})
    set_watermark(redis_client, keys, 4 * SIZE)
    cfg = cfg_with(memory=1, histogram={"enabled": False, "domain_from_released": False},
                   topk={"enabled": True, "k": 2, "k_bar": 5, "epsilon": 1000.0, "delta": 1e-6},
                   alerts={"enabled": True, "watchlist": ["fixed"], "threshold": 100, "k": 10, "epsilon": 1.0,
                           "domain_from_released": True, "domain_memory_windows": 1})
    worker, pub, _ = make_worker(redis_client, cfg)
    assert drain(worker) == 4
    alerts = [r for r in pub.records if r["type"] == "alerts"]
    watched = [sorted(it["key"] for it in r["items"]) for r in alerts]
    assert watched[0] == ["fixed"]  # nothing published before window 0
    assert watched[1] == ["fixed", "x", "y"] and watched[2] == ["fixed", "x", "z"]
    assert watched[3] == ["fixed"]  # window 2's top-k released nothing: x and z aged out
    assert alerts[1]["domain"]["static"] == 1 and alerts[1]["domain"]["size"] == 3
    check_against_the_topic(pub.records, cfg, "alerts")
