"""The release benchmark's windows (bench/release_windows.py) hold what the bench says, on one redis-server
(``COPY`` of the templates) and on a real 3-master Redis Cluster (``DUMP`` once, ``RESTORE`` under each
window's names on the masters that own them): every key's count as the Zipf oracle gives it, in its key shard
(key layout) or split over the user shards (user layout), with the meta and index entries the release
worker reads. The figures of ``bench_release --cluster-masters 3`` rest on this."""

from __future__ import annotations

import numpy as np
import pytest

from bench.release_windows import TEMPLATE, WindowMaker, counts_key, load_template, zipf_counts
from stream_dp.store.keys import Keys, key_shard_of

pytestmark = pytest.mark.integration

N, A, TOP, SIZE = 3_000, 1.0, 5_000.0, 3600


def window(client, keys: Keys, start: int) -> list[dict[str, float]]:
    """Each shard's counts of the window, member → count."""
    return [{m.decode(): s for m, s in client.zrange(counts_key(keys, start, shard), 0, -1, withscores=True)}
            for shard in range(keys.shards)]


def oracle() -> dict[str, float]:
    return {f"item-{j}": float(c) for j, c in enumerate(zipf_counts(N, A, TOP))}


def check_window(client, keys: Keys, start: int) -> None:
    shards, expected = window(client, keys, start), oracle()
    if keys.layout == "key":  # each key's whole count in its key shard, nothing anywhere else
        assert shards == [{k: c for k, c in expected.items() if key_shard_of(k, keys.shards) == j}
                          for j in range(keys.shards)]
    else:  # the shards' counts add up to the key's count, each key in at least one shard
        summed: dict[str, float] = {}
        for part in shards:
            for k, c in part.items():
                assert c > 0
                summed[k] = summed.get(k, 0.0) + c
        assert summed == expected
        assert sum(len(part) > 0 for part in shards) == keys.shards  # split, not all in one
    for shard in range(keys.shards):
        assert client.hgetall(keys.window_meta(start, shard)) == {b"start": str(start).encode(),
                                                                  b"end": str(start + SIZE).encode()}
    assert client.zscore(keys.windows_index(), str(start)) == start


@pytest.mark.parametrize("layout,shards", [("key", 12), ("user", 4), ("user", 1)])
def test_windows_restored_on_a_cluster_hold_the_template_counts_on_every_master(cluster, layout, shards) -> None:
    keys = Keys("bench", shards, layout)
    load_template(cluster, N, A, TOP, shards=shards, layout=layout)
    maker = WindowMaker(cluster, keys, SIZE)
    assert maker.payloads is not None and maker.payload_bytes > 0
    assert not any(cluster.exists(f"{TEMPLATE}:{j}") for j in range(shards))  # dumped, then dropped from Redis
    for start in (SIZE, 2 * SIZE):
        maker.open(start)
        check_window(cluster, keys, start)
    if shards == 12:  # the window's shards are spread over all three masters
        assert len({cluster.get_node_from_key(counts_key(keys, SIZE, j)).name for j in range(shards)}) == 3
    maker.drop_counts(SIZE)
    assert window(cluster, keys, SIZE) == [{} for _ in range(shards)]
    check_window(cluster, keys, 2 * SIZE)  # the other window untouched
    assert len(maker.seconds) == 2


@pytest.mark.parametrize("layout,shards", [("key", 12), ("user", 4)])
def test_windows_copied_on_one_redis_hold_the_same_counts(redis_client, layout, shards) -> None:
    keys = Keys("bench", shards, layout)
    load_template(redis_client, N, A, TOP, shards=shards, layout=layout)
    maker = WindowMaker(redis_client, keys, SIZE)
    assert maker.payloads is None and maker.payload_bytes == 0  # server-side COPY, the templates stay
    maker.open(SIZE)
    check_window(redis_client, keys, SIZE)


def test_the_user_layout_split_is_the_same_whatever_the_chunking(cluster, redis_client, monkeypatch) -> None:
    """The template is written in chunks; the multinomial split draws row by row, so the window is the one a
    single draw over all keys gives (on either deployment)."""
    import bench.release_windows as release_windows

    keys = Keys("bench", 4, "user")
    load_template(cluster, N, A, TOP, shards=4)
    WindowMaker(cluster, keys, SIZE).open(SIZE)
    monkeypatch.setattr(release_windows, "CHUNK", 7)
    load_template(redis_client, N, A, TOP, shards=4)
    WindowMaker(redis_client, keys, SIZE).open(SIZE)
    whole = np.random.default_rng(1).multinomial(zipf_counts(N, A, TOP).astype(np.int64), [0.25] * 4)
    expected = [{f"item-{j}": float(whole[j, s]) for j in range(N) if whole[j, s] > 0} for s in range(4)]
    assert window(cluster, keys, SIZE) == expected == window(redis_client, keys, SIZE)
