"""The release worker's batched round trips keep the release order (real redis-server, in-process worker).

The worker queues a release's mark-published and its type's after-commit writes (top-k's watchlist ``ZADD``,
the alerts' staged SVT state) to go ahead of its next Redis step, reads the mechanism's data in the
round trip of the reservation and the alerts' watched counts with top-k's (:class:`RideAlong`). What must
still hold, checked at the moment each record is handed to the broker:

- the release is charged and its record stored (charged before visible);
- it is still listed as unpublished (never marked published before the broker has it);
- an alerts record's staged SVT state is already in Redis (staged before the commit that references it);

and after each window: nothing unpublished, top-k's keys in the watchlist, the alerts state applied.
Plus: how many round trips the top-k and alerts releases take, and a flushed script cache.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import redis
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from stream_dp.accounting.budget import scope_for
from stream_dp.accounting.events import PureDpEvent
from stream_dp.accounting.ledger import BudgetCap, Ledger
from stream_dp.config import Config, config_from_mapping
from stream_dp.store.keys import Keys
from stream_dp.release.alerts import SVT_NAME
from stream_dp.release.metrics import ReleaseMetrics
from stream_dp.release.outbox import Outbox
from stream_dp.release.records import Envelope
from stream_dp.release.worker import ReleaseWorker
from tests.support.windows import set_watermark, write_window

pytestmark = pytest.mark.integration
SIZE = 60
WATCHED = ["key-0", "key-5", "key-19"]


def make_cfg(*, lifetime: bool = False, max_instances: int = 2) -> Config:
    budget: dict[str, Any] = {"epsilon": 1e9, "delta": 1e-3, "delta_prime": 1e-7, "period_seconds": 86400}
    if lifetime:
        budget["lifetime_epsilon"] = 1e10
    return config_from_mapping({
        "redis": {"key_prefix": "t"},
        "windows": {"size_seconds": SIZE, "retention_seconds": 600, "start": "0"},
        "budget": budget,
        "releases": {
            "topk": {"enabled": True, "k": 3, "k_bar": 10, "epsilon": 1000.0, "delta": 1e-6},
            "alerts": {"enabled": True, "watchlist": WATCHED, "threshold": 500.0, "k": 2, "epsilon": 1.0,
                       "max_instances_per_period": max_instances},
            "sample": {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 0.5, "delta": 1e-6},
            "histogram": {"enabled": False},
        },
    }, environ={})


def window_counts(i: int) -> dict[str, float]:
    return {f"key-{j}": float(100 * (j + 1) + i) for j in range(20)}


def what_redis_holds(client: redis.Redis, ledger: Ledger, keys: Keys, record: dict[str, Any]) -> dict[str, Any]:
    """Whether ``record``'s release is stored, charged and unpublished, and its staged SVT state (if any) exists."""
    rid, scope = record["release_id"], record["budget"]["scope"]
    payload = ledger.stored(scope, rid)
    ref = None
    if payload is not None and record["type"] == "alerts":
        ref = (Envelope.loads(payload).state or {}).get("alerts_state_ref")
    return {
        "rid": rid,
        "stored": payload is not None,
        "charged": bool(client.hexists(keys.ledger(scope, "charges"), rid)),
        "unpublished": rid in ledger.unpublished(scope),
        "staged": None if ref is None else bool(client.hexists(keys.svt(SVT_NAME, "pending"), ref)),
    }


class CheckingPublisher:
    """At each publish, records what Redis holds for the release being handed to the broker."""

    def __init__(self, client: redis.Redis, ledger: Ledger, keys: Keys) -> None:
        self.client, self.ledger, self.keys = client, ledger, keys
        self.records: list[dict[str, Any]] = []
        self.seen: list[dict[str, Any]] = []

    def publish(self, record: dict[str, Any]) -> None:
        self.seen.append(what_redis_holds(self.client, self.ledger, self.keys, record))
        self.records.append(json.loads(json.dumps(record)))

    def close(self) -> None:
        pass


class ListPublisher:
    """Collects records (no Redis calls of its own: the round-trip count is the worker's alone)."""

    def __init__(self, on_publish: Any = None) -> None:
        self.records: list[dict[str, Any]] = []
        self.on_publish = on_publish

    def publish(self, record: dict[str, Any]) -> None:
        self.records.append(json.loads(json.dumps(record)))
        if self.on_publish is not None:
            self.on_publish(record)

    def close(self) -> None:
        pass


def counted_worker(client: redis.Redis, cfg: Config, keys: Keys, windows: int
                   ) -> tuple[ReleaseWorker, ListPublisher, Ledger, list["RoundTrips"]]:
    """``windows`` windows written, and a worker whose publisher marks each record in the round-trip count
    once the test appends its :class:`RoundTrips` to the returned list."""
    for i in range(windows):
        write_window(client, keys, i * SIZE, SIZE, window_counts(i))
    trips: list[RoundTrips] = []
    pub = ListPublisher(lambda record: trips and trips[0].mark(f"published {record['release_id']}"))
    worker, _, ledger = make_worker(client, cfg, pub)
    return worker, pub, ledger, trips


def make_worker(client: redis.Redis, cfg: Config, publisher: Any = None) -> tuple[ReleaseWorker, Any, Ledger]:
    keys = Keys(cfg.redis.key_prefix)
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys,
                    lifetime_cap=BudgetCap.lifetime_from_config(cfg.budget))
    publisher = publisher if publisher is not None else CheckingPublisher(client, ledger, keys)
    metrics = ReleaseMetrics(CollectorRegistry())
    worker = ReleaseWorker(cfg, client, ledger, Outbox(ledger, publisher, metrics), metrics,  # type: ignore[arg-type]
                           worker_id="w1", rng=1)
    return worker, publisher, ledger


@pytest.mark.parametrize("lifetime", [False, True], ids=["period-cap", "lifetime-cap"])
def test_each_record_is_charged_stored_staged_and_unpublished_when_it_reaches_the_broker(redis_client, lifetime) -> None:
    cfg = make_cfg(lifetime=lifetime)
    keys = Keys("t")
    worker, pub, ledger = make_worker(redis_client, cfg)
    scope = scope_for(0, 86400)
    for i in range(4):  # instances open in windows 0 and (once the first is exhausted) later: both paths
        write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
        set_watermark(redis_client, keys, (i + 1) * SIZE)
        assert worker.run_once() is not None
        # after the window: every release marked published, top-k's keys watched, the alerts state applied
        assert ledger.unpublished(scope) == []
        topk = next(r for r in pub.records if r["release_id"] == f"{i * SIZE}-{(i + 1) * SIZE}.topk")
        watch = {k.decode() for k in redis_client.zrange(keys.release_index("watchlist"), 0, -1)}
        assert {item["key"] for item in topk["items"]} <= watch
        state = json.loads(redis_client.hget(keys.svt(SVT_NAME, "state"), "state"))
        assert state["window"] == i * SIZE
        assert redis_client.hlen(keys.svt(SVT_NAME, "pending")) == 0  # applied, nothing left staged
    assert [s["rid"].split(".")[1] for s in pub.seen] == ["topk", "alerts", "sample"] * 4
    for seen in pub.seen:
        assert seen["stored"] and seen["charged"], seen
        assert seen["unpublished"], f"{seen['rid']} was marked published before the broker had it"
        if seen["rid"].endswith(".alerts") and seen["staged"] is not None:
            assert seen["staged"], f"{seen['rid']}: its SVT state was not staged before its commit"
    assert any(s["staged"] for s in pub.seen), "no alerts release carried a staged state"
    opened = [r["info"]["opened"] for r in pub.records if r["type"] == "alerts"]
    assert True in opened and False in opened, opened  # both the reserve + settle and the charge paths


class RoundTrips:
    """Counts the worker's round trips (one per command sent alone, one per pipeline) between publishes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from redis.client import Pipeline

        self.steps: list[str] = []
        real_cmd, real_pipe = redis.Redis.execute_command, Pipeline.execute
        steps = self.steps

        def execute_command(client: Any, *args: Any, **options: Any) -> Any:
            steps.append(str(args[0]))
            return real_cmd(client, *args, **options)

        def execute(pipe: Any, *args: Any, **kwargs: Any) -> Any:
            steps.append("pipeline")
            return real_pipe(pipe, *args, **kwargs)

        monkeypatch.setattr(redis.Redis, "execute_command", execute_command)
        monkeypatch.setattr(Pipeline, "execute", execute)

    def mark(self, label: str) -> None:
        self.steps.append(label)

    def between(self, first: str, last: str) -> int:
        start = self.steps.index(first) + 1
        return sum(1 for s in self.steps[start:self.steps.index(last)] if not s.startswith(("published ", "run ")))


@pytest.mark.parametrize("threshold, opens", [(5000.0, False), (50.0, True)], ids=["continues", "opens"])
def test_top_k_and_alerts_take_few_round_trips(redis_client, monkeypatch, threshold, opens) -> None:
    """Closable windows (1: the watermark, the cursor, the next windows' marks, and for the window guessed
    next the claim's EXISTS + fence INCR, its watchlist and the alerts' state), claim ([SET NX + the first
    reads + top-k's reservation and top k̄+1 + the watched counts (+ the alerts' reservation when an instance
    opens)]), top-k's commit ([the alerts' staged state + settle + the alerts' commit]): top-k is published
    three round trips after the poll, and the alerts record goes to the broker with it, whether its instance
    continues (no count reaches the threshold: never exhausted) or opens (k = 2 positives exhaust it in
    every window). (Before: four round trips after the poll.)"""
    cfg = make_cfg(max_instances=0)
    cfg = dataclasses.replace(cfg, releases=dataclasses.replace(
        cfg.releases, alerts=dataclasses.replace(cfg.releases.alerts, threshold=threshold)))
    keys = Keys("t")
    worker, pub, ledger, trips = counted_worker(redis_client, cfg, keys, 3)
    set_watermark(redis_client, keys, 3 * SIZE)
    worker.run_once()  # the first window: scripts loaded, the scope indexed (once per process)
    trips.append(RoundTrips(monkeypatch))
    for i in (1, 2):
        window = f"{i * SIZE}-{(i + 1) * SIZE}"
        trips[0].mark(f"run {i}")
        assert worker.run_once() is not None
        assert trips[0].between(f"run {i}", f"published {window}.topk") == 3, " ".join(trips[0].steps)
        opened = next(r for r in pub.records if r["release_id"] == f"{window}.alerts")["info"]["opened"]
        assert opened == opens
        between = trips[0].between(f"published {window}.topk", f"published {window}.alerts")
        assert between == 0, " ".join(trips[0].steps)
    assert [r["status"] for r in pub.records] == ["released"] * 9
    report = ledger.verify(scope_for(0, 86400))
    assert report.ok and report.open_reservations == 0, report.problems


def test_a_flushed_script_cache_is_loaded_again_for_a_batched_step(redis_client) -> None:
    """A restarted (or flushed) Redis has no scripts: a batch that runs them by SHA loads them and is sent again."""
    cfg = make_cfg()
    keys = Keys("t")
    worker, pub, ledger = make_worker(redis_client, cfg)
    for i in range(3):
        write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
        set_watermark(redis_client, keys, (i + 1) * SIZE)
        redis_client.script_flush()
        assert worker.run_once() is not None
    assert [r["type"] for r in pub.records] == ["topk", "alerts", "sample"] * 3
    assert all(r["status"] == "released" for r in pub.records)
    scope = scope_for(0, 86400)
    assert ledger.unpublished(scope) == []
    report = ledger.verify(scope)
    assert report.ok and report.open_reservations == 0, report.problems


def test_queued_writes_keep_their_order_across_the_masters_of_a_cluster(tmp_path) -> None:
    """On a cluster the ride-along's writes and step run in list order even when their slots are on several
    masters (top-k's mark on the ledger's master, the watchlist on another, the staged SVT state on a third,
    then the alerts commit back on the first): grouping by master would run the commit before the staging.
    Each item returns the server's ``TIME``; the times must not go backwards."""
    from cluster_helpers import local_cluster

    from stream_dp.node_batches import RideAlong, run_in_order

    with local_cluster(tmp_path, masters=3) as nodes:
        client = nodes.client()
        try:
            by_node: dict[str, str] = {}
            for i in range(200):
                by_node.setdefault(client.get_node_from_key(f"k{i}").name, f"k{i}")
                if len(by_node) == 3:
                    break
            a, b, c = by_node.values()

            def now(key: str) -> tuple[str, Any]:
                return key, lambda pipe: pipe.eval("return redis.call('TIME')", 1, key)

            def micros(reply: list) -> int:
                return int(reply[0]) * 1_000_000 + int(reply[1])

            times = [micros(r) for r in run_in_order(client, [now(a), now(b), now(c), now(a), now(b)])]
            assert times == sorted(times)
            ride = RideAlong()
            for key in (a, c, b):
                ride.write(now(key))
            step = [micros(r) for r in ride.run(client, [now(a)])]
            assert len(step) == 1 and not ride
        finally:
            client.close()


@pytest.mark.parametrize("fits", [True, False], ids=["alerts-fit", "alerts-refused"])
def test_an_opening_reserved_in_top_k_round_trip_runs_its_mechanism_only_once_accepted(redis_client, fits) -> None:
    """The alerts' opening reservation rides on top-k's (decided against top-k's worst-case hold). When the
    period cannot cover the instance, the alerts record is a budget_exhausted status -- no answers, no
    instance charged -- while top-k and the sample are released; when it can, the instance opens and is
    charged once. (Running the alerts mechanism on a refused hold fails this: the ledger refuses its settle.)"""
    base = make_cfg(max_instances=0)
    cfg = dataclasses.replace(base, budget=dataclasses.replace(base.budget, epsilon=1000.0), releases=dataclasses.replace(
        base.releases, topk=dataclasses.replace(base.releases.topk, epsilon=1.0),
        alerts=dataclasses.replace(base.releases.alerts, threshold=50.0, epsilon=40.0)))
    keys = Keys("t")
    worker, pub, ledger = make_worker(redis_client, cfg)
    scope = scope_for(0, 86400)
    for i in range(2):
        write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
    set_watermark(redis_client, keys, SIZE)
    assert worker.run_once() is not None  # window 0: the scope indexed, an instance opened and exhausted
    # leave room for top-k and the sample of window 1 but (unless `fits`) not for a 40-ε instance
    worst = worker.worst_case_events()
    need = sum(e.basic()[0] for t in ("topk", "sample") for e in worst[t])
    left = ledger.remaining(scope).epsilon_remaining
    filler = left - need - (45.0 if fits else 20.0)
    assert filler > 0
    assert ledger.charge(scope, "filler", [PureDpEvent(filler)]).accepted
    set_watermark(redis_client, keys, 2 * SIZE)
    assert worker.run_once() is not None
    records = {r["type"]: r for r in pub.records if r["release_id"].startswith(f"{SIZE}-")}
    assert records["topk"]["status"] == "released" and records["sample"]["status"] == "released"
    alerts = records["alerts"]
    if fits:
        assert alerts["status"] == "released" and alerts["info"]["opened"] and alerts["cost"]["epsilon"] == 40.0
    else:
        assert alerts["status"] == "budget_exhausted" and alerts["items"] == []
    assert ledger.unpublished(scope) == []


class ObservedProducer:
    """The real release producer, watched: logs each send (and what Redis holds for that release right then),
    each flush and each acknowledgement the publisher awaited. ``lose_ack``: the awaited acknowledgement of that
    release id fails once, after the broker's real one arrived (an acknowledgement lost on its way back)."""

    def __init__(self, producer: Any, client: redis.Redis, ledger: Ledger, keys: Keys, *, lose_ack: str | None = None):
        self.producer, self.client, self.ledger, self.keys = producer, client, ledger, keys
        self.lose_ack = lose_ack
        self.log: list[str] = []
        self.seen: list[dict[str, Any]] = []
        self.records: dict[str, dict[str, Any]] = {}

    def send(self, topic: str, *, key: bytes, value: bytes) -> "ObservedDelivery":
        record = json.loads(value)
        self.records[record["release_id"]] = record
        self.seen.append(what_redis_holds(self.client, self.ledger, self.keys, record))
        self.log.append(f"send {record['release_id']}")
        return ObservedDelivery(self, self.producer.send(topic, key=key, value=value), record["release_id"])

    def flush(self, timeout: float | None = None) -> None:
        self.log.append("flush")
        self.producer.flush(timeout)

    def close(self) -> None:
        self.producer.close()


class ObservedDelivery:
    def __init__(self, owner: ObservedProducer, delivery: Any, rid: str) -> None:
        self.owner, self.delivery, self.rid = owner, delivery, rid

    def get(self, timeout: float | None = None) -> None:
        self.delivery.get(timeout)
        if self.owner.lose_ack == self.rid:
            from stream_dp.release.producers import ProduceFailed

            self.owner.lose_ack = None
            raise ProduceFailed(f"no acknowledgement of {self.rid} came back (test)")
        self.owner.log.append(f"acked {self.rid}")


def observed_worker(client: redis.Redis, bootstrap: str, topic: str, **observe: Any) -> tuple[ReleaseWorker, ObservedProducer, Ledger]:
    from stream_dp import topics
    from stream_dp.release.outbox import Publisher
    from stream_dp.release.producers import release_producer

    cfg = make_cfg()
    cfg = dataclasses.replace(cfg, kafka=dataclasses.replace(cfg.kafka, bootstrap_servers=bootstrap, releases_topic=topic))
    topics.create(cfg.kafka, ("releases",))
    keys = Keys(cfg.redis.key_prefix)
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget), keys=keys)
    producer = ObservedProducer(release_producer(cfg), client, ledger, keys, **observe)
    worker, _, ledger = make_worker(client, cfg, Publisher(producer, topic, timeout=20))
    return worker, producer, ledger


def test_top_k_and_the_alerts_riding_on_it_are_both_sent_before_an_acknowledgement_is_awaited(
        redis_client, bootstrap_servers, topic_name) -> None:
    """The alerts record, committed in top-k's round trip, goes to the broker right behind top-k's, not one
    broker round trip later; both were charged, stored (and the alerts' state staged) before either was
    sent, and neither is marked published before its acknowledgement. On the topic: every record once, in
    release order. (Publishing them one after the other fails the order of the log.)"""
    from release_processes import read_topic

    topic = topic_name("releases")
    worker, producer, ledger = observed_worker(redis_client, bootstrap_servers, topic)
    keys = Keys("t")
    try:
        for i in range(3):
            write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
            set_watermark(redis_client, keys, (i + 1) * SIZE)
            assert worker.run_once() is not None
    finally:
        worker.outbox.publisher.close()
    def one_by_one(w: str, types: tuple[str, ...]) -> list[str]:
        return [f"{step} {w}.{t}" if step else "flush" for t in types for step in ("send", "", "acked")]

    # window 0 indexes the budget scope: nothing rides there yet (the usual path, one record at a time)
    expected = one_by_one(f"0-{SIZE}", ("topk", "alerts", "sample"))
    opened = []
    for i in (1, 2):
        w = f"{i * SIZE}-{(i + 1) * SIZE}"
        opened.append(producer.records[f"{w}.alerts"]["info"]["opened"])
        expected += [f"send {w}.topk", f"send {w}.alerts", "flush", f"acked {w}.topk", f"acked {w}.alerts",
                     *one_by_one(w, ("sample",))]
    assert sorted(opened) == [False, True], opened  # an instance that continues and one that opens
    assert producer.log == expected
    for seen in producer.seen:
        assert seen["stored"] and seen["charged"] and seen["unpublished"], seen
        assert seen["staged"] in (None, True), seen
    assert ledger.unpublished(scope_for(0, 86400)) == []
    on_topic = read_topic(bootstrap_servers, topic, expect_at_least=9)
    assert [key for key, _ in on_topic] == [e.split()[1] for e in expected if e.startswith("send ")]


def test_an_alerts_record_acknowledged_behind_a_failed_top_k_stays_unpublished_and_is_published_again_identically(
        redis_client, bootstrap_servers, topic_name) -> None:
    """Top-k's acknowledgement fails, the alerts' (sent right behind it) arrives: the pass fails, neither is
    marked published (the alerts follow a failure), the sample is not released yet. The next pass publishes
    both stored records again, byte for byte, and the sample; every release is charged once."""
    from release_processes import by_release_id, read_topic

    topic = topic_name("releases")
    worker, producer, ledger = observed_worker(redis_client, bootstrap_servers, topic, lose_ack=f"{SIZE}-{2 * SIZE}.topk")
    keys = Keys("t")
    scope = scope_for(0, 86400)
    w = f"{SIZE}-{2 * SIZE}"
    try:
        write_window(redis_client, keys, 0, SIZE, window_counts(0))
        write_window(redis_client, keys, SIZE, SIZE, window_counts(1))
        set_watermark(redis_client, keys, SIZE)
        assert worker.run_once() is not None
        set_watermark(redis_client, keys, 2 * SIZE)
        with pytest.raises(KafkaError, match="no acknowledgement"):
            worker.run_once()
        assert producer.log[-3:] == [f"send {w}.topk", f"send {w}.alerts", "flush"]  # top-k's ack lost
        on_topic = [key for key, _ in read_topic(bootstrap_servers, topic, expect_at_least=5)]
        assert on_topic[-2:] == [f"{w}.topk", f"{w}.alerts"]  # the broker has both (flush waited for them) ...
        assert sorted(ledger.unpublished(scope)) == [f"{w}.alerts", f"{w}.topk"]  # ... but it is not marked
        assert ledger.stored(scope, f"{w}.sample") is None
        released = worker.run_once()
        assert released is not None and released.start == SIZE
    finally:
        worker.outbox.publisher.close()
    assert ledger.unpublished(scope) == []
    got = by_release_id(read_topic(bootstrap_servers, topic, expect_at_least=8))
    assert len(got[f"{w}.topk"]) == 2 and got[f"{w}.topk"][0] == got[f"{w}.topk"][1]
    assert len(got[f"{w}.alerts"]) == 2 and got[f"{w}.alerts"][0] == got[f"{w}.alerts"][1]
    assert len(got[f"{w}.sample"]) == 1
    report = ledger.verify(scope)
    assert report.ok and report.open_reservations == 0, report.problems


def test_a_worker_that_loses_the_window_after_its_poll_leaves_no_hold_behind(redis_client, monkeypatch) -> None:
    """Worker b polls (the window is closable, its claim free), then worker a releases the whole window, then
    b's claim round trip runs -- with top-k's reservation (and the alerts' opening) for a window now released.
    Those reservations return a's charges (idempotent per release id), b publishes nothing, and the ledger
    holds no open reservation: nothing is left that nobody would settle."""
    cfg = make_cfg(max_instances=0)
    cfg = dataclasses.replace(cfg, releases=dataclasses.replace(
        cfg.releases, alerts=dataclasses.replace(cfg.releases.alerts, threshold=50.0)))  # opens every window
    keys = Keys("t")
    scope = scope_for(0, 86400)
    a, pub_a, ledger = make_worker(redis_client, cfg, ListPublisher())
    b, pub_b, _ = make_worker(redis_client, cfg, ListPublisher())
    b.claims.worker_id = "w2"
    for i in range(2):
        write_window(redis_client, keys, i * SIZE, SIZE, window_counts(i))
    set_watermark(redis_client, keys, SIZE)
    assert b.run_once() is not None  # b released window 0 (scope indexed): its next guess is window 1
    set_watermark(redis_client, keys, 2 * SIZE)
    sent: list[Any] = []
    reserve = b.outbox.reserve

    def spy(scope: str, rid: str, events: tuple) -> Any:  # records the reservations queued on a ride-along
        step = reserve(scope, rid, events)
        later = step.later

        def queued(ride: Any) -> Any:
            pending = later(ride)
            sent.append((rid, pending))
            return pending

        step.later = queued  # type: ignore[method-assign]
        return step

    monkeypatch.setattr(b.outbox, "reserve", spy)
    acquire = b.claims.acquire_then_read

    def a_first(*args: Any, **kwargs: Any) -> Any:
        a.recovered = True
        assert a.run_once() is not None  # a releases window 1 between b's poll and b's claim
        return acquire(*args, **kwargs)

    monkeypatch.setattr(b.claims, "acquire_then_read", a_first)
    assert b.run_once() is None
    w = f"{SIZE}-{2 * SIZE}"
    assert sorted(rid for rid, _ in sent) == [f"{w}.alerts", f"{w}.topk"]  # b did send both reservations
    for rid, pending in sent:
        assert pending.done and pending.value.duplicate, rid  # ... and got a's charges back
    assert [r["release_id"] for r in pub_b.records] == [f"0-{SIZE}.{t}" for t in ("topk", "alerts", "sample")]
    assert [r["release_id"] for r in pub_a.records] == [f"{w}.{t}" for t in ("topk", "alerts", "sample")]
    assert pub_a.records[1]["info"]["opened"]
    report = ledger.verify(scope)
    assert report.ok and report.open_reservations == 0, report.problems


def test_the_first_window_of_a_budget_period_takes_the_same_round_trips_once_the_worker_idled_before_it(
        redis_client, monkeypatch) -> None:
    """A window whose budget period (ledger scope) is new used to add the scope to the ledger's index first:
    its top-k reserved on its own and its alerts went to the broker after it (three more round trips). An
    idle worker now indexes the scope of the window it expects next before it waits, so that window is
    released like any other: top-k three round trips after the poll, the alerts with it."""
    cfg = make_cfg()
    cfg = dataclasses.replace(cfg, budget=dataclasses.replace(cfg.budget, period_seconds=2 * SIZE))
    keys = Keys("t")
    worker, pub, ledger, trips = counted_worker(redis_client, cfg, keys, 3)
    set_watermark(redis_client, keys, 2 * SIZE)
    assert worker.run_once() is not None and worker.run_once() is not None  # windows 0 and 1: the first period
    new_scope = worker.scope_for(2 * SIZE)
    assert new_scope != worker.scope_for(SIZE)
    # what the worker's loop does next: a pass at once (nothing due), then an idle pass waiting for a close
    assert worker.run_once() is None
    assert new_scope not in ledger.scopes()
    assert worker.run_once(wait_seconds=0.05) is None  # no close notice comes: it waits that long
    assert new_scope in ledger.scopes()
    trips.append(RoundTrips(monkeypatch))
    set_watermark(redis_client, keys, 3 * SIZE)
    trips[0].mark("run 2")
    assert worker.run_once() is not None
    window = f"{2 * SIZE}-{3 * SIZE}"
    assert trips[0].between("run 2", f"published {window}.topk") == 3, " ".join(trips[0].steps)
    assert trips[0].between(f"published {window}.topk", f"published {window}.alerts") == 0, " ".join(trips[0].steps)
    assert [r["status"] for r in pub.records] == ["released"] * 9
    for scope in (worker.scope_for(0), new_scope):
        report = ledger.verify(scope)
        assert report.ok and report.open_reservations == 0, report.problems


def test_a_poll_on_a_redis_that_lost_the_ledger_stops_before_it_claims_or_charges(redis_client) -> None:
    """The ledger epoch is read in the poll's round trip (stream_dp.release.ledger_guard): a Redis that lost
    the ledger stops the pass there -- no claim, no reservation, no charge, nothing published -- instead of
    charging on the wiped ledger and being stopped only at the publication (which a broken variant, the
    poll without its epoch read, does: tried, this test then fails on the charge it left)."""
    from stream_dp.release.ledger_guard import LedgerGuard, start_check
    from stream_dp.release.topic_reader import TopicContents
    from stream_dp.state_epochs import StateLost

    cfg = make_cfg()
    keys = Keys("t")
    worker, pub, ledger = make_worker(redis_client, cfg, ListPublisher())
    worker.outbox.guard = LedgerGuard(redis_client, keys,
                                      start_check(redis_client, keys, TopicContents("releases", [], {0: 0}, {0: 0})))
    write_window(redis_client, keys, 0, SIZE, window_counts(0))
    set_watermark(redis_client, keys, SIZE)
    redis_client.delete(keys.ledger_epoch())  # the ledger is gone (a FLUSHALL would take the window too)
    with pytest.raises(StateLost):
        worker.run_once()
    assert pub.records == [] and ledger.scopes() == []  # nothing charged, nothing reserved, no scope touched
    assert not redis_client.exists(keys.window_claim(0))  # and the window was never claimed
