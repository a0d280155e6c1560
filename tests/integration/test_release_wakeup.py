"""The release worker wakes when ingest closes a window, not at its next poll (real redis-server, real ingest
store scripts, the worker's own loop; a 3-master cluster for the stream's slot)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys
from stream_dp.node_batches import node_client, run_reads
from stream_dp.release.wakeup import WindowCloses
from tests.support.windows import set_watermark, write_window
from cluster_helpers import local_cluster
from test_release_worker import SIZE, make_cfg, make_worker, window_counts
from waiting import wait_for

pytestmark = pytest.mark.integration

LONG_POLL = 120.0  # far longer than any wait below: only a wake-up can release a window in time
LONG_TIMEOUT = 300.0  # the socket timeout of the clients whose reads block that long


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
    closes = WindowCloses(redis_client, keys, max_block_seconds=LONG_POLL)
    closes.start()  # the worker's start: entries before it are the first pass's business
    assert run_reads(redis_client, closes.wait_reads(0.3)) == [False]
    _advance(store, SIZE + 1.0)  # while a pass runs, before the worker waits again
    t = time.monotonic()
    assert run_reads(redis_client, closes.wait_reads(LONG_POLL)) == [True]
    assert time.monotonic() - t < 5
    assert run_reads(redis_client, closes.wait_reads(0.3)) == [False]  # that entry is spent


def test_the_wait_is_capped_below_the_socket_timeout(redis_client) -> None:
    cfg = make_cfg()
    worker, _, _ = make_worker(redis_client, dataclasses.replace(
        cfg, redis=dataclasses.replace(cfg.redis, socket_timeout_seconds=1.0)))
    worker.closes.start()
    t = time.monotonic()
    assert run_reads(redis_client, worker.closes.wait_reads(LONG_POLL)) == [False]  # 0.8 × 1 s, not 120 s
    assert 0.7 < time.monotonic() - t < 10


def _release_on_close(client, keys_prefix: str, close: Callable[[WindowStore, Keys, float], None] | None = None) -> None:
    """A worker whose idle pass waits 120 s releases a window as soon as ingest's watermark step closes it
    (``close``: another way to move the watermark); the poll's reads ride behind the wait, so the watermark
    they see is the new one."""
    cfg = make_cfg()  # the client's socket timeout (300 s): one read may block the whole 120 s
    cfg = dataclasses.replace(cfg, redis=dataclasses.replace(cfg.redis, key_prefix=keys_prefix,
                                                             socket_timeout_seconds=LONG_TIMEOUT))
    worker, publisher, _ = make_worker(client, cfg)
    worker.poll_seconds = LONG_POLL
    store = WindowStore(client, keys=worker.keys, window_size=SIZE)
    write_window(client, worker.keys, 0, SIZE, window_counts(0))
    _advance(store, 30.0)  # [0, 60) still open
    stop = threading.Event()
    loop = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    loop.start()
    try:
        # the first pass finds nothing; the second waits for a close: its read is blocked in Redis
        wait_for(lambda: _blocked(client, worker.keys), timeout=30, what="the worker's read to block in Redis")
        assert publisher.records == []
        t = time.monotonic()
        if close is None:
            _advance(store, SIZE + 0.5)
        else:
            close(store, worker.keys, SIZE + 0.5)
        wait_for(lambda: [r for r in publisher.records if r["window"]["start"] == 0], timeout=20,
                 what="the closed window's top-k (a worker that only polls takes 120 s)")
        assert time.monotonic() - t < 20
        wait_for(lambda: _blocked(client, worker.keys), timeout=30, what="the worker to wait again")
        assert [r["type"] for r in publisher.records] == ["topk"]
    finally:
        stop.set()
        client.xadd(worker.keys.window_closes(), {"watermark": "wake"})  # ends the 120 s wait now
        loop.join(timeout=10)
    assert not loop.is_alive()


def _blocked(client, keys: Keys) -> bool:
    """Whether a client is blocked on the node holding the close notices (the worker's pass, waiting)."""
    return int(node_client(client, keys.window_closes()).info("clients")["blocked_clients"]) > 0


def test_a_waiting_worker_releases_a_window_as_soon_as_ingest_closes_it(redis_url) -> None:
    with redis.Redis.from_url(redis_url, socket_timeout=LONG_TIMEOUT) as client:
        _release_on_close(client, "t")


def test_the_test_helper_set_watermark_wakes_a_waiting_worker_as_ingest_does(redis_url) -> None:
    """(Release tests that run the worker's own loop move the watermark with ``set_watermark``.)"""
    with redis.Redis.from_url(redis_url, socket_timeout=LONG_TIMEOUT) as client:
        _release_on_close(client, "h", close=lambda store, keys, wm: set_watermark(store.client, keys, wm))


def test_an_idle_worker_stops_within_one_poll_interval(redis_client) -> None:
    worker, _, _ = make_worker(redis_client, make_cfg())
    worker.poll_seconds = 1.0
    stop = threading.Event()
    loop = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    loop.start()
    wait_for(lambda: _blocked(redis_client, worker.keys), timeout=30, what="the worker's read to block in Redis")
    stop.set()
    loop.join(timeout=10)
    assert not loop.is_alive()


@pytest.fixture
def cluster(tmp_path) -> Iterator:
    with local_cluster(tmp_path, masters=3) as nodes:
        client = nodes.client(socket_timeout=LONG_TIMEOUT)
        try:
            yield client
        finally:
            client.close()


def test_the_wake_up_works_on_a_redis_cluster(cluster) -> None:
    keys = Keys("c")
    assert cluster.keyslot(keys.window_closes()) == cluster.keyslot(keys.watermarks())  # one script, one slot
    _release_on_close(cluster, "c")
