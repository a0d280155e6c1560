"""The ``argmax`` release reads only the sorted prefix its search needs (CHS14 Algorithm 1;
``release/argmax_prefix.py``), on a real redis-server, and releases what the whole-window read releases.

The same counts are written as one unsharded window, as user shards (S = 2, counts split over the shards and
summed by the reader's threshold algorithm) and as key shards (S = 1, 2, 12); the production builder's read
and run give, for the same seed, the record main's whole-window code gives on the window read whole
(``tests/support/large_margin_oracle.py``) -- in every layout, the same record. A 10⁵-key window with a
clear winner reads one prefix of 257 counts per shard, measured by the bytes Redis sent.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from stream_dp.config import Config, config_from_mapping
from stream_dp.mechanisms import UNLISTED
from stream_dp.mechanisms._validation import tie_key
from stream_dp.node_batches import run_reads
from stream_dp.release.argmax_builder import ArgmaxBuilder
from stream_dp.release.argmax_prefix import WindowPrefix
from stream_dp.release.windows import Window, WindowReader
from stream_dp.rng import make_rng
from stream_dp.store.keys import Keys, key_shard_of
from tests.support.large_margin_oracle import main_large_margin_argmax

pytestmark = pytest.mark.integration

SIZE = 60
WINDOW = Window(3600, 3600 + SIZE)
#: (windows.layout, windows.shards) read
LAYOUTS = [("user", 1), ("user", 2), ("key", 1), ("key", 2), ("key", 12)]


def _cfg(epsilon: float) -> Config:
    return config_from_mapping({"releases": {"argmax": {"enabled": True, "window_epsilon": epsilon, "window_delta": 1e-6}}},
                               environ={})


def _write(client, counts: dict[str, int], layout: str, shards: int, prefix: str, rnd: random.Random) -> Keys:
    """The window's counts in ``layout`` with ``shards`` shards under ``prefix``: key shards hold each key's
    whole count; user shards split it (the reader sums them)."""
    keys = Keys(prefix, shards, layout)
    parts: dict[str, dict[str, int]] = {}
    for key, count in counts.items():
        if layout == "key":
            name = keys.key_shard_counts(WINDOW.start, key_shard_of(key, shards))
            parts.setdefault(name, {})[key] = count
            continue
        cut = rnd.randint(0, count) if shards > 1 else count
        for shard, share in enumerate([cut, count - cut][:shards]):
            if share:
                parts.setdefault(keys.window_counts(WINDOW.start, shard), {})[key] = share
    pipe = client.pipeline(transaction=False)
    for name, members in parts.items():
        items = list(members.items())
        for s in range(0, len(items), 10_000):
            pipe.zadd(name, dict(items[s:s + 10_000]))
    pipe.execute()
    return keys


def _lazy_record(client, keys: Keys, cfg: Config, seed: int, *, ride: bool = False) -> tuple[dict, WindowPrefix]:
    builder, reader = ArgmaxBuilder(cfg), WindowReader(client, keys=keys, size_seconds=SIZE)
    step = builder.read(reader, WINDOW, [])
    if ride and step.batch is not None:  # the first prefix sent with another step's commands, as the worker does
        data, = run_reads(client, step.batch)
    else:
        data = step.now()
    record = builder.run(WINDOW, data, make_rng(seed)).to_record()
    return record, data


def _whole_record(client, keys: Keys, cfg: Config, seed: int) -> dict:
    """The record the release gave before the prefix read: the whole window read, main's mechanism (over the
    counts in rank order, the order the prefix version draws in)."""
    builder = ArgmaxBuilder(cfg)
    whole = WindowReader(client, keys=keys, size_seconds=SIZE).all_counts(WINDOW).as_dict()
    ranked = dict(sorted(whole.items(), key=lambda kc: (kc[1], tie_key(kc[0])), reverse=True))
    a = cfg.releases.argmax
    key = main_large_margin_argmax(ranked, epsilon=a.window_epsilon, delta=a.window_delta, n=1,
                                   universe_size=max(len(ranked), builder.universe_size()), rng=make_rng(seed))
    items = [] if key is UNLISTED else [{"key": str(key), "rank": 1}]
    return {"items": items, "info": {"no_clear_winner": key is UNLISTED}}


def _windows(rnd: random.Random) -> list[tuple[str, dict[str, int], float]]:
    """(name, counts, ε): a clear winner; five keys tied ahead (the draw among them resolves a tie); a deep
    search past the first prefix; no clear winner (every count read); a window smaller than the first prefix;
    an empty window."""
    tail = {f"k{i}-{rnd.choice('abé日')}": rnd.randint(1, 40) for i in range(3000)}
    tied = {**tail, **{f"top{i}": 3000 for i in range(5)}}
    deep = {f"d{i:05d}": 1000 - i // 400 for i in range(3000)}
    flat = {f"f{i}": rnd.randint(1, 3) for i in range(1500)}
    return [("winner", {**tail, "winner": 5000}, 1.0), ("tied", tied, 1.0), ("deep", deep, 30.0),
            ("flat", flat, 1.0), ("tiny", {"a": 3, "b": 3, "c": 1}, 5.0), ("empty", {}, 1.0)]


@pytest.mark.parametrize("layout,shards", LAYOUTS, ids=[f"{a}-{s}" for a, s in LAYOUTS])
def test_the_prefix_release_is_the_whole_window_release(redis_client, layout: str, shards: int) -> None:
    rnd = random.Random(shards)
    for name, counts, epsilon in _windows(rnd):
        keys = _write(redis_client, counts, layout, shards, f"{name}-{layout}{shards}", rnd)
        unsharded = _write(redis_client, counts, "user", 1, f"{name}-single", rnd)
        cfg = _cfg(epsilon)
        deeper = 0
        for seed in range(12):
            record, prefix = _lazy_record(redis_client, keys, cfg, seed, ride=seed % 2 == 1)
            want = _whole_record(redis_client, keys, cfg, seed)
            assert {"items": record["items"], "info": record["info"]} == want, (name, seed)
            # the same record as the unsharded window's, every field
            assert record == _lazy_record(redis_client, unsharded, cfg, seed)[0], (name, seed)
            deeper += len(prefix.reads) > 1
        if name in ("deep", "flat"):
            assert deeper, f"{name}: no seed read past the first prefix"
        if name == "tied":
            drawn = {_lazy_record(redis_client, keys, cfg, s)[0]["items"][0]["key"] for s in range(40)}
            assert len(drawn) > 1 and drawn <= {f"top{i}" for i in range(5)}


def _sent_bytes(client) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


@pytest.mark.parametrize("layout,shards", [("user", 1), ("key", 12)], ids=["user-1", "key-12"])
def test_a_large_window_with_a_clear_winner_reads_one_prefix(redis_client, layout: str, shards: int) -> None:
    """10⁵ keys, one far ahead: one prefix of 257 counts per shard read, against the whole window's 10⁵."""
    rng = np.random.default_rng(4)
    counts = {f"key-{i:06d}": int(c) for i, c in enumerate(rng.integers(1, 60, 10**5))}
    counts["winner"] = 5000
    keys = _write(redis_client, counts, layout, shards, "large", random.Random(0))
    cfg = _cfg(1.0)
    before = _sent_bytes(redis_client)
    record, prefix = _lazy_record(redis_client, keys, cfg, seed=3)
    lazy = _sent_bytes(redis_client) - before
    before = _sent_bytes(redis_client)
    WindowReader(redis_client, keys=keys, size_seconds=SIZE).all_counts(WINDOW)
    whole = _sent_bytes(redis_client) - before
    assert record["items"] == [{"key": "winner", "rank": 1}]
    assert prefix.reads == [("top", 257)]
    print(f"\n{layout}:{shards} 10^5 keys: prefix read {lazy} bytes, whole window {whole} bytes "
          f"({whole / lazy:.0f}x)")
    assert lazy * 20 < whole


def test_the_prefix_release_on_a_real_cluster(cluster) -> None:
    """Key S = 12 on a 3-master cluster (each prefix read one pipeline per master): the whole-window record."""
    keys = Keys("argmax-cluster", 12, "key")
    masters = {cluster.get_node_from_key(keys.key_shard_counts(WINDOW.start, j)).name for j in range(12)}
    assert len(masters) == 3
    rnd = random.Random(12)
    for name, counts, epsilon in _windows(rnd):
        keys = _write(cluster, counts, "key", 12, f"{name}-cluster", rnd)
        cfg = _cfg(epsilon)
        for seed in range(4):
            record, _ = _lazy_record(cluster, keys, cfg, seed, ride=seed % 2 == 1)
            assert {"items": record["items"], "info": record["info"]} == _whole_record(cluster, keys, cfg, seed), name
