"""Window reader and claims against a real redis-server (the window contract written directly)."""

from __future__ import annotations


import numpy as np
import pytest

from stream_dp.store.keys import Keys
from stream_dp.node_batches import RideAlong
from stream_dp.release.claim import ClaimLost, WindowClaims
from stream_dp.release.windows import Window, WindowReader
from tests.support.windows import set_watermark, write_window
from waiting import wait_for

pytestmark = pytest.mark.integration
KEYS = Keys("t")


def test_closable_windows_follow_the_global_watermark(redis_client) -> None:
    reader = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    for start in (0, 60, 120):
        write_window(redis_client, KEYS, start, 60, {"a": 1})
    assert reader.closable() == []  # no watermark yet
    set_watermark(redis_client, KEYS, 119.9)
    assert reader.closable() == [Window(0, 60)]  # [60, 120) ends after the watermark
    set_watermark(redis_client, KEYS, 120)
    assert reader.closable() == [Window(0, 60), Window(60, 120)]


def test_reads_only_what_each_release_needs(redis_client) -> None:
    reader = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    counts = {f"k{i}": float(i) for i in range(1, 1001)}
    write_window(redis_client, KEYS, 0, 60, counts)
    w = Window(0, 60)
    top = reader.top_counts(w, 3).now()
    assert list(top.items()) == [("k1000", 1000.0), ("k999", 999.0), ("k998", 998.0)]
    assert reader.counts_of(w, ["k5", "absent", "k7"]).now() == {"k5": 5.0, "absent": 0.0, "k7": 7.0}
    whole = reader.all_counts(w, chunk=64)  # many chunks, last one partial
    assert len(whole) == 1000 and whole.as_dict() == counts
    assert whole.counts.dtype == np.float64
    # the same reads queued on a ride-along (one command each): the same results as sent on their own
    ride = RideAlong()
    queued = [reader.top_counts(w, 3).later(ride), reader.counts_of(w, ["k5", "absent", "k7"]).later(ride),
              reader.counts_of(w, []).later(ride)]
    ride.flush(redis_client)
    assert [q.value for q in queued] == [top, {"k5": 5.0, "absent": 0.0, "k7": 7.0}, {}]  # type: ignore[union-attr]


def test_mark_released_needs_the_claim_and_sets_retention(redis_client) -> None:
    reader = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    claims = WindowClaims(redis_client, keys=KEYS, worker_id="w1", ttl_seconds=30)
    write_window(redis_client, KEYS, 0, 60, {"a": 2})
    set_watermark(redis_client, KEYS, 60)
    claim = claims.acquire(0)
    assert claim is not None
    assert not reader.mark_released(Window(0, 60), claim_key=claim.key, token="other:99", retention_seconds=100)
    assert redis_client.ttl(KEYS.window_counts(0)) == -1
    assert reader.mark_released(Window(0, 60), claim_key=claim.key, token=claim.token, retention_seconds=100)
    assert 0 < redis_client.ttl(KEYS.window_counts(0)) <= 100
    assert 0 < redis_client.ttl(KEYS.window_meta(0)) <= 100
    assert redis_client.hget(KEYS.window_meta(0), "state") == b"released"
    assert reader.closable() == [] and reader.is_released(Window(0, 60))


def test_claims_exclude_each_other_and_carry_increasing_fencing_tokens(redis_client) -> None:
    a = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=30)
    b = WindowClaims(redis_client, keys=KEYS, worker_id="b", ttl_seconds=30)
    ca = a.acquire(0)
    assert ca is not None and b.acquire(0) is None
    assert a.drop(ca)
    cb = b.acquire(0)
    assert cb is not None and cb.fence > ca.fence
    assert not a.drop(ca)  # not ours any more: nothing happens
    assert b.held(cb)


def test_an_expired_claim_is_taken_over_and_the_old_holder_is_fenced_off(redis_client) -> None:
    a = WindowClaims(redis_client, keys=KEYS, worker_id="a", ttl_seconds=30)
    b = WindowClaims(redis_client, keys=KEYS, worker_id="b", ttl_seconds=30)
    reader = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    write_window(redis_client, KEYS, 0, 60, {"a": 1})
    ca = a.acquire(0)
    redis_client.pexpire(ca.key, 1)  # a's claim expires (a paused, e.g. a long GC or a network partition)
    wait_for(lambda: not redis_client.exists(ca.key), timeout=5, interval=0.001, what="a's claim to expire")
    cb = b.acquire(0)
    assert cb is not None and cb.fence > ca.fence
    with pytest.raises(ClaimLost):
        a.renew(ca)
    assert not reader.mark_released(Window(0, 60), claim_key=ca.key, token=ca.token, retention_seconds=10)
    assert reader.mark_released(Window(0, 60), claim_key=cb.key, token=cb.token, retention_seconds=10)


def test_closable_finds_new_windows_behind_hundreds_of_released_ones(redis_client) -> None:
    """More closed windows than one page of the index: released ones never hide newer closed ones."""
    keys = Keys("t")
    reader = WindowReader(redis_client, keys=keys, size_seconds=10)
    n = 450
    for i in range(n):
        write_window(redis_client, keys, i * 10, 10, {"a": 1.0})
    set_watermark(redis_client, keys, n * 10)
    # Released windows still in ingest's index (as after a crash before pruning) ...
    redis_client.zadd(keys.release_index("released"), {str(i * 10): i * 10 for i in range(n - 5)})
    assert [w.start for w in reader.closable(limit=100)] == [i * 10 for i in range(n - 5, n)]
    # ... and released windows pruned from it by mark_released.
    claim = "t:claim"
    for i in range(n - 5, n):
        redis_client.set(claim, "tok")
        assert reader.mark_released(Window(i * 10, i * 10 + 10), claim_key=claim, token="tok", retention_seconds=60)
    assert reader.closable(limit=100) == []
    assert redis_client.zscore(keys.windows_index(), str((n - 1) * 10)) is None
    write_window(redis_client, keys, n * 10, 10, {"a": 1.0})
    set_watermark(redis_client, keys, (n + 1) * 10)
    assert [w.start for w in reader.closable(limit=100)] == [n * 10]


def test_closable_with_a_guessed_cursor_equals_a_fresh_read(redis_client) -> None:
    """closable() reads the released marks of the windows after the cursor it last saw together with the
    watermark; whatever happened meanwhile (another worker moved the cursor, more windows closed than it
    guessed, a window released out of order behind the cursor), it lists what a reader with no guess lists,
    in one round trip when the guess holds."""
    keys = Keys("t")
    mine = WindowReader(redis_client, keys=keys, size_seconds=10)
    claim = "t:claim"
    redis_client.set(claim, "tok")

    def fresh() -> list[Window]:
        return WindowReader(redis_client, keys=keys, size_seconds=10).closable(limit=100)

    def release(reader: WindowReader, start: int) -> None:
        assert reader.mark_released(Window(start, start + 10), claim_key=claim, token="tok", retention_seconds=60)

    for i in range(40):
        write_window(redis_client, keys, i * 10, 10, {"a": 1.0})
    set_watermark(redis_client, keys, 20)
    assert mine.closable() == fresh() == [Window(0, 10), Window(10, 20)]
    release(mine, 0)  # the cursor moves to 0, as mine saw it
    sent = []
    real = redis_client.zmscore
    redis_client.zmscore = lambda *a, **kw: sent.append(a) or real(*a, **kw)  # type: ignore[method-assign]
    try:
        assert mine.closable() == fresh() == [Window(10, 20)]
        assert len(sent) == 1  # only fresh()'s: mine guessed right
    finally:
        del redis_client.zmscore
    release(WindowReader(redis_client, keys=keys, size_seconds=10), 10)  # another worker moves the cursor
    set_watermark(redis_client, keys, 300)  # more windows closed than guessed
    release(WindowReader(redis_client, keys=keys, size_seconds=10), 50)  # out of order, behind the cursor
    assert mine.closable() == fresh() == [Window(s, s + 10) for s in range(20, 300, 10) if s != 50]
    release(mine, 20)
    assert mine.closable() == fresh() and mine.closable()[0] == Window(30, 40)


def test_count_histogram_and_members_at_read_only_what_sampling_needs(redis_client) -> None:
    from stream_dp.release.sampling import count_classes, sample_count_classes

    reader = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    rng = np.random.default_rng(3)
    counts = {f"k{i:04d}": float(c) for i, c in enumerate(np.floor(rng.pareto(1.0, 3000) * 3) + 1)}
    write_window(redis_client, KEYS, 0, 60, counts)
    w = Window(0, 60)
    hist = reader.count_histogram(w, chunk=7)  # many Lua calls, last one partial
    values, sizes = np.unique(np.array(list(counts.values())), return_counts=True)
    assert hist == [(float(v), int(n)) for v, n in zip(values, sizes)]
    order = sorted(counts, key=lambda k: (counts[k], k.encode()))  # ZRANGE order
    ranks = np.array([0, 5, 2999, 1500])
    want = np.array([counts[order[r]] for r in ranks])
    assert reader.members_at(w, ranks, want, chunk=3) == [order[r] for r in ranks]
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):
        reader.members_at(w, np.array([0]), np.array([want[0] + 1]))
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):
        reader.members_at(w, np.array([3000]), np.array([1.0]))
    # runs of consecutive ranks are read with one ZRANGE each: in the order asked, across chunk borders
    runs = np.array([10, 11, 12, 13, 40, 7, 8, 2997, 2998, 2999, 500, 501])
    assert reader.members_at(w, runs, np.array([counts[order[r]] for r in runs]), chunk=5) == [order[r] for r in runs]
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):  # a run past the end
        reader.members_at(w, np.array([2998, 2999, 3000]), np.array([counts[order[2998]], counts[order[2999]], 1.0]))
    # the Redis-backed sample is the in-memory one with the same seed (the same classes and ranks)
    params = dict(scheme="pps", tau=0.05, epsilon=1.0, delta=1e-3, max_keys_per_user=1, rng=9)
    from_redis = sample_count_classes(count_classes(hist), lambda r, c: reader.members_at(w, r, c), **params)
    in_memory = sample_count_classes(count_classes(hist), lambda r, c: [order[int(i)] for i in r], **params)
    assert from_redis.rows == in_memory.rows and len(from_redis.rows) > 10
    assert reader.count_histogram(Window(60, 120)) == []  # an empty (absent) window


@pytest.mark.parametrize("top_n", [1, 40, 700, 3001, 5000])
def test_the_sample_reuses_the_top_that_topk_read_and_gets_the_same_classes_and_keys(redis_client, top_n) -> None:
    """After top_counts (top-k reads first), the histogram walks only up to the top's lowest count and the
    keys within the top come from it: the same histogram, keys and sample as a reader that read nothing
    before (ties at the top's lowest count included; 3001 and 5000 read the whole 3000-key window)."""
    from stream_dp.release.sampling import count_classes, sample_count_classes

    rng = np.random.default_rng(5)
    counts = {f"k{i:04d}": float(c) for i, c in enumerate(np.floor(rng.pareto(1.0, 3000) * 3) + 1)}
    write_window(redis_client, KEYS, 0, 60, counts)
    w = Window(0, 60)
    fresh = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    reused = WindowReader(redis_client, keys=KEYS, size_seconds=60)
    assert len(reused.top_counts(w, top_n).now()) == min(top_n, 3000)
    hist = reused.count_histogram(w, chunk=7)
    assert hist == fresh.count_histogram(w, chunk=7)
    order = sorted(counts, key=lambda k: (counts[k], k.encode()))  # ZRANGE order
    ranks = np.array([2999, 0, 2998, 2300, 1500, 2999 - top_n, max(0, 3000 - top_n), 2000, 2001])
    ranks = ranks[(ranks >= 0) & (ranks < 3000)]
    want = np.array([counts[order[r]] for r in ranks])
    assert reused.members_at(w, ranks, want) == [order[r] for r in ranks]
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):
        reused.members_at(w, np.array([2999]), np.array([counts[order[2999]] + 1]))
    params = dict(scheme="pps", tau=0.05, epsilon=1.0, delta=1e-3, max_keys_per_user=1, rng=9)
    a = sample_count_classes(count_classes(hist), lambda r, c: reused.members_at(w, r, c), **params)
    b = sample_count_classes(count_classes(hist), lambda r, c: fresh.members_at(w, r, c), **params)
    assert a.rows == b.rows and len(a.rows) > 10
