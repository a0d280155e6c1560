"""The key layout's top-k and watched-key reads (``release/key_windows.py``, docs/design/key-sharded-counts.md)
against real Redis: the same counts written as one unsharded window (what :class:`WindowReader` reads today)
and, through the real step-2 script (``count_keys.lua``), into S key shards; both reads return identical
dicts in identical order -- the input of the top-k and alerts mechanisms is the single-shard input, so their
release is too, draw for draw. On a single redis-server (S = 2, 12) and on a 3-master cluster (S = 12, the key
shards on every master, each read one batch per master). The sample's and the histogram's whole-window
reads (its count histogram, the keys at its ranks, the whole window) against the unsharded reads too."""

from __future__ import annotations

import random

import numpy as np
import pytest

from stream_dp.node_batches import run_batched, run_reads
from stream_dp.release.key_shards import route_by_key_shard
from stream_dp.release.key_windows import KeyShardReads
from stream_dp.release.windows import Window, WindowReader
from stream_dp.store import scripts
from stream_dp.store.key_counts import CountEntry, count_args, split_by_key_shard
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration

SIZE = 60
WINDOW = Window(3600, 3600 + SIZE)
ALPHABET = ["a", "b", "z", "é", "日", "𝄞", "0"]


def _both(client, shards: int, rnd: random.Random, trial: int
          ) -> tuple[WindowReader, KeyShardReads | WindowReader, list[str]]:
    """A random window (many ties, non-ASCII keys) as one unsharded window and as key shards filled by chunks
    through count_keys.lua (under prefixes of this trial's own); returns both readers and the window's keys."""
    single, layered = Keys(f"one{trial}"), Keys(f"ks{trial}", shards, "key")
    count = scripts.register(client, "count_keys")
    total: dict[str, int] = {}
    items = []
    for chunk in range(rnd.randint(0, 30)):
        increments = {"".join(rnd.choices(ALPHABET, k=rnd.randint(1, 3))): rnd.randint(1, 3)
                      for _ in range(rnd.randint(1, 20))}
        for k, n in increments.items():
            total[k] = total.get(k, 0) + n
        for j, part in split_by_key_shard(increments, shards).items():
            ks, args = layered.key_shard(WINDOW.start, j), count_args([CountEntry(0, 0, chunk, part)])
            items.append((ks[0], lambda pipe, ks=ks, args=args: pipe.evalsha(count.sha, len(ks), *ks, *args)))
    if items:
        client.script_load(count.script)
        run_batched(client, items)  # one pipeline per master on a cluster
        client.zadd(single.window_counts(WINDOW.start), total)
    # the key-shard reads on their own, and served by the release's reader in the key layout
    by_key = rnd.choice([KeyShardReads(client, keys=layered), WindowReader(client, keys=layered, size_seconds=SIZE)])
    return WindowReader(client, keys=single, size_seconds=SIZE), by_key, sorted(total)


def _check(client, shards: int, seed: int, trials: int) -> None:
    rnd = random.Random(seed)
    for trial in range(trials):
        reader, by_key, present = _both(client, shards, rnd, trial)
        for n in (1, 5, 50, 1001):
            want = list(reader.top_counts(WINDOW, n).now().items())
            assert list(by_key.top_counts(WINDOW, n).now().items()) == want, (trial, n)
        watched = rnd.sample(present, min(len(present), 5)) + ["never-seen", *present[:2]]
        want_watched = list(reader.counts_of(WINDOW, watched).now().items())
        step = by_key.counts_of(WINDOW, watched)
        assert list(step.now().items()) == want_watched
        # both reads are one batch each: they can ride along with another step, here sent together
        top, counts = run_reads(client, by_key.top_counts(WINDOW, 5).batch, step.batch)
        assert list(top.items()) == list(reader.top_counts(WINDOW, 5).now().items())
        assert list(counts.items()) == want_watched


@pytest.mark.parametrize("shards", [2, 12])
def test_key_shard_reads_equal_the_unsharded_reads(redis_client, shards):
    _check(redis_client, shards, seed=shards, trials=15)


def test_key_shard_reads_on_a_real_cluster(cluster):
    keys = Keys("ks", 12, "key")
    masters = {cluster.get_node_from_key(keys.key_shard_counts(WINDOW.start, j)).name for j in range(12)}
    assert len(masters) == 3  # the key shards of one window really are spread over every master
    _check(cluster, 12, seed=47, trials=6)


def test_the_key_reads_refuse_a_user_layout(redis_client):
    with pytest.raises(ValueError, match="windows.layout = 'user'"):
        KeyShardReads(redis_client, keys=Keys("u", 4))


def test_the_release_reader_in_the_key_layout_reads_what_ingest_wrote(redis_client):
    """End to end on ingest's side: the same random log applied by ingest's store in the key layout (S = 4) and
    unsharded in the user layout; the release's WindowReader returns the same top and watched counts, item for
    item and in order, the same whole window (as a dict) and the same count histogram; the keys at the
    sample's window ranks have the counts of one sorted set's ranks, and every key is at exactly one rank."""
    from store_helpers import apply_in_batches, random_log
    from stream_dp.ingest.store import WindowStore

    rnd = random.Random(21)
    logs = random_log(rnd, 2000, partitions=2, users=200, keys=300, span=SIZE / 2, pareto=0.6)
    layouts = (Keys("e2e-user"), Keys("e2e-key", 4, "key"))
    for keys in layouts:
        store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=3)
        apply_in_batches(store, logs, random.Random(2), size=SIZE, replays=True, most=250, shuffle=True)
    window = Window(0, SIZE)
    user, key = (WindowReader(redis_client, keys=keys, size_seconds=SIZE) for keys in layouts)
    assert len(user.top_counts(window, 10_000).now()) > 50  # many keys, many ties
    for n in (1, 10, 101, 10_000):
        assert list(key.top_counts(window, n).now().items()) == list(user.top_counts(window, n).now().items())
    watched = [f"k{i}" for i in range(0, 400, 7)] + ["never-seen"]
    assert list(key.counts_of(window, watched).now().items()) == list(user.counts_of(window, watched).now().items())
    _check_whole_window_reads(user, key, window)


def _check_whole_window_reads(user: WindowReader, key: WindowReader, window: Window, chunk: int = 7) -> None:
    whole = user.all_counts(window)
    assert key.all_counts(window, chunk=chunk).as_dict() == whole.as_dict()  # in chunks: several rounds
    histogram = user.count_histogram(window)
    assert key.count_histogram(window, chunk=3) == histogram
    ranks = np.arange(len(whole))
    counts = np.sort(whole.counts)
    got = key.members_at(window, ranks, counts, chunk=chunk)
    assert sorted(got) == sorted(whole.keys)  # every key at exactly one window rank
    assert [whole.as_dict()[k] for k in got] == counts.tolist()  # each with the count of its rank
    shuffled = np.random.default_rng(3).permutation(ranks)[:40]
    assert key.members_at(window, shuffled, counts[shuffled]) == [got[i] for i in shuffled.tolist()]
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):
        key.members_at(window, ranks[-1:], counts[-1:] + 1)
    with pytest.raises(RuntimeError, match="changed while it was being sampled"):
        key.members_at(window, ranks[-1:] + 1, counts[-1:])


def test_the_whole_window_reads_on_a_real_cluster(cluster):
    """S = 12 key shards over 3 masters: the whole window, its histogram and its ranks, each step one batch
    (one pipeline per master), equal the unsharded reads of the same counts."""
    rnd = random.Random(77)
    user_keys, key_keys = Keys("wcl-user"), Keys("wcl-key", 12, "key")
    counts = {f"k{i}": float(rnd.choice([1, 1, 1, 2, 2, 3, 5, 8, 40])) for i in range(500)}
    cluster.zadd(user_keys.window_counts(0), counts)
    for shard, part in route_by_key_shard(counts, 12).items():
        cluster.zadd(key_keys.key_shard_counts(0, shard), {k: counts[k] for k in part})
    window = Window(0, SIZE)
    user, key = (WindowReader(cluster, keys=keys, size_seconds=SIZE) for keys in (user_keys, key_keys))
    _check_whole_window_reads(user, key, window, chunk=50)
