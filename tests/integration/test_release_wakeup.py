"""The release worker wakes when ingest closes a window, not at its next poll (real redis-server, real ingest
store scripts, the worker's own loop; a 3-master cluster for the stream's slot)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from stream_dp.ingest.store import WindowStore
from stream_dp.keys import Keys
from stream_dp.release.wakeup import WindowCloses
from stream_dp.testing.windows import write_window
from cluster_helpers import local_cluster
from test_release_worker import SIZE, make_cfg, make_worker, window_counts
from waiting import wait_for

pytestmark = pytest.mark.integration

LONG_POLL = 120.0  # far longer than any wait below: only a wake-up can release a window in time


def _advance(store: WindowStore, watermark: float) -> None:
    """Ingest's watermark step for one partition that is caught up (the production scripts, all phases)."""
    store.advance_watermark({0: (watermark, True)}, known_partitions=[0], idle_timeout=3600)


def _entries(client, keys: Keys) -> list[float]:
    return [float(fields[b"watermark"]) for _, fields in client.xrange(keys.window_closes())]


def test_ingest_adds_an_entry_only_when_the_watermark_passes_a_window_end(redis_client) -> None:
    keys = Keys("t")
    store = WindowStore(redis_client, keys=keys, window_size=SIZE)
    _advance(store, 30.0)  # the first global watermark: one entry (nothing to compare it with)
    assert _entries(redis_client, keys) == [30.0]
    _advance(store, 50.0)  # still inside [0, 60): no window closed
    _advance(store, 59.5)
    assert _entries(redis_client, keys) == [30.0]
    _advance(store, 60.0)  # [0, 60) closes exactly at its end
    _advance(store, 61.0)
    assert _entries(redis_client, keys) == [30.0, 60.0]
    _advance(store, 4 * SIZE + 1.0)  # three windows at once: one entry
    _advance(store, 100.0)  # backwards: ignored
    assert _entries(redis_client, keys) == [30.0, 60.0, 4 * SIZE + 1.0]


def test_a_close_before_the_wait_is_not_missed_and_each_entry_wakes_once(redis_client) -> None:
    keys = Keys("t")
    store = WindowStore(redis_client, keys=keys, window_size=SIZE)
    _advance(store, 30.0)
    closes, stop = WindowCloses(redis_client, keys), threading.Event()
    closes.start()  # the worker's start: entries before it are the first pass's business
    assert closes.wait(0.3, stop) is False
    _advance(store, SIZE + 1.0)  # while a pass runs, before the worker waits again
    t = time.monotonic()
    assert closes.wait(LONG_POLL, stop) is True
    assert time.monotonic() - t < 5
    assert closes.wait(0.3, stop) is False  # that entry is spent


def test_a_stop_request_ends_a_long_wait_promptly(redis_client) -> None:
    closes, stop = WindowCloses(redis_client, Keys("t")), threading.Event()
    closes.start()
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(closes.wait(LONG_POLL, stop)))
    waiter.start()
    wait_for(closes.waiting.is_set, timeout=10, what="the wait to start")
    stop.set()
    waiter.join(timeout=5)
    assert not waiter.is_alive() and outcome == [False]


def test_a_waiting_worker_releases_a_window_as_soon_as_ingest_closes_it(redis_client) -> None:
    cfg = make_cfg()
    worker, publisher, _ = make_worker(redis_client, cfg)
    worker.poll_seconds = LONG_POLL
    store = WindowStore(redis_client, keys=worker.keys, window_size=SIZE)
    write_window(redis_client, worker.keys, 0, SIZE, window_counts(0))
    _advance(store, 30.0)  # [0, 60) still open
    stop = threading.Event()
    loop = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    loop.start()
    try:
        wait_for(worker.closes.waiting.is_set, timeout=30, what="the worker to finish its first pass and wait")
        assert publisher.records == []
        t = time.monotonic()
        _advance(store, SIZE + 0.5)
        wait_for(lambda: [r for r in publisher.records if r["window"]["start"] == 0], timeout=20,
                 what="the closed window's top-k (a worker that only polls takes 120 s)")
        assert time.monotonic() - t < 20
        wait_for(worker.closes.waiting.is_set, timeout=30, what="the worker to wait again")
        assert [r["type"] for r in publisher.records] == ["topk"]
    finally:
        stop.set()
        loop.join(timeout=10)
    assert not loop.is_alive()


@pytest.fixture
def cluster(tmp_path) -> Iterator:
    with local_cluster(tmp_path, masters=3) as nodes:
        client = nodes.client()
        try:
            yield client
        finally:
            client.close()


def test_the_wake_up_works_on_a_redis_cluster(cluster) -> None:
    keys = Keys("c")
    assert cluster.keyslot(keys.window_closes()) == cluster.keyslot(keys.watermarks())  # one script, one slot
    store = WindowStore(cluster, keys=keys, window_size=SIZE)
    _advance(store, 30.0)
    closes, stop = WindowCloses(cluster, keys), threading.Event()
    closes.start()
    waiter_outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: waiter_outcome.append(closes.wait(LONG_POLL, stop)))
    waiter.start()
    wait_for(closes.waiting.is_set, timeout=10, what="the wait to start")
    _advance(store, SIZE + 1.0)
    waiter.join(timeout=20)
    stop.set()
    waiter.join(timeout=5)
    assert waiter_outcome == [True]
