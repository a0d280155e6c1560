"""Key-sharded counts (layout "key", docs/design/key-sharded-counts.md) against a real redis-server.

- The window's counts written once into one sorted set and once into its key shards
  (``Keys.key_shard_counts``, split by ``key_shard_of``): the merge of the key shards' ``ZREVRANGE 0 n-1``
  equals the one set's ``ZREVRANGE 0 n-1``, members, counts and order -- Redis's own tie-break on the member
  bytes, not a model of it.
- The layout is recorded with the release schedule; a deployment started in one layout refuses the other,
  naming ``windows.layout`` -- also as real worker processes: an ingest worker and a release worker configured
  with ``windows.layout = "key"`` on user-layout data each exit 2 with one line naming the setting, no
  traceback."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from ingest_helpers import REPO, config_mapping, write_toml
from stream_dp.processes import free_port

from stream_dp.config import WindowsConfig
from stream_dp.release.key_shards import merge_disjoint_top
from stream_dp.schedule import ScheduleMismatch, establish
from stream_dp.store.keys import KEY_HASH, SHARD_HASH, Keys, key_shard_of

pytestmark = pytest.mark.integration

START = 3600
# ASCII, Latin-1 and astral keys, prefixes of each other: ties among them are ordered by their UTF-8 bytes
ALPHABET = ["a", "b", "z", "é", "ÿ", "日", "𝄞", "0", "~"]


def _read(client, name: str, n: int) -> list[tuple[str, float]]:
    return [(m.decode(), s) for m, s in client.zrevrange(name, 0, n - 1, withscores=True)]


@pytest.mark.parametrize("shards", [2, 12])
def test_merged_key_shard_tops_equal_one_sorted_sets_top(redis_client, shards):
    rnd = random.Random(47 + shards)
    keys = Keys("ks", shards, "key")
    single = "ks:{single}:counts"
    for trial in range(40):
        redis_client.flushdb()
        size = rnd.randint(0, 300)
        counts = {"".join(rnd.choices(ALPHABET, k=rnd.randint(1, 3))): rnd.randint(1, 4) for _ in range(size)}
        pipe = redis_client.pipeline(transaction=False)
        if counts:
            pipe.zadd(single, counts)
        for key, c in counts.items():
            pipe.zadd(keys.key_shard_counts(START, key_shard_of(key, shards)), {key: c})
        pipe.execute()
        for n in (1, 7, 101, 400):
            parts = [_read(redis_client, keys.key_shard_counts(START, j), n) for j in range(shards)]
            assert list(merge_disjoint_top(parts, n).items()) == _read(redis_client, single, n), (trial, n)


def _windows(shards: int) -> WindowsConfig:
    return WindowsConfig(size_seconds=60, start="0", shards=shards)


def test_a_key_layout_deployment_records_its_layout_and_refuses_the_user_layout(redis_client):
    establish(redis_client, Keys("kl", 12, "key"), _windows(12))
    recorded = json.loads(redis_client.get(Keys("kl").schedule()))
    assert recorded == {"start": 0, "size": 60, "shards": 12, "shard_hash": SHARD_HASH, "layout": "key",
                        "key_hash": KEY_HASH}
    establish(redis_client, Keys("kl", 12, "key"), _windows(12))  # a restart in the same layout
    with pytest.raises(ScheduleMismatch, match=r"windows\.layout is 'user' .* written in layout 'key'.*"
                                               r"keep windows\.layout = 'key'"):
        establish(redis_client, Keys("kl", 12), _windows(12))


@pytest.mark.parametrize("recorded_before_layouts", [False, True])
def test_a_user_layout_deployment_keeps_its_record_and_refuses_the_key_layout(redis_client,
                                                                              recorded_before_layouts):
    """The user layout's record is the one written before layouts existed (no layout field), and a record
    of that form -- old data -- refuses a key-layout config: its counts are in the user shards."""
    keys = Keys("ul", 4)
    if recorded_before_layouts:
        redis_client.set(keys.schedule(), json.dumps({"start": 0, "size": 60, "shards": 4,
                                                      "shard_hash": SHARD_HASH}))
    establish(redis_client, keys, _windows(4))
    assert json.loads(redis_client.get(keys.schedule())) == {"start": 0, "size": 60, "shards": 4,
                                                             "shard_hash": SHARD_HASH}
    with pytest.raises(ScheduleMismatch, match=r"windows\.layout is 'key' .* written in layout 'user'"):
        establish(redis_client, Keys("ul", 4, "key"), _windows(4))


def _worker(module: str, config, tmp_path) -> tuple[int, str]:
    """Run ``python -m <module> --config <config>`` to its exit; its exit code and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAM_DP_", "STREAMDP_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-m", module, "--config", str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ERROR" in line or "config error" in line]


def test_an_ingest_worker_in_the_key_layout_on_user_layout_data_exits_2_naming_the_setting(redis_url, redis_client,
                                                                                            tmp_path):
    """Old data: a deployment whose schedule was recorded in the user layout (as every deployment before
    layouts existed). An ingest worker configured with the key layout refuses to start before it touches a
    window: the release would read key shards that were never written."""
    data = config_mapping(f"127.0.0.1:{free_port()}", redis_url, "events", group="g", size=60, max_keys=3,
                          prefix="old")
    windows = WindowsConfig(size_seconds=60, start=data["windows"]["start"])
    establish(redis_client, Keys("old"), windows)  # the user-layout deployment's first start
    recorded = redis_client.get(Keys("old").schedule())
    data["windows"]["layout"] = "key"
    code, text = _worker("workers.ingest", write_toml(tmp_path / "key.toml", data), tmp_path)
    assert code == 2 and "Traceback" not in text, text[-3000:]
    errors = _error_lines(text)
    assert len(errors) == 1 and "windows.layout is 'key'" in errors[0] and "keep windows.layout = 'user'" in errors[0], text
    assert redis_client.get(Keys("old").schedule()) == recorded  # the record is left as it was
    assert redis_client.keys("old:{w:*") == []  # no window was touched


def test_a_release_worker_in_the_key_layout_on_user_layout_data_exits_2_naming_the_setting(redis_url, redis_client,
                                                                                              tmp_path):
    """The release worker reads the key layout now; on data recorded in the user layout it would read key
    shards that were never written and release every window empty, so it refuses to start, naming the
    setting (the schedule's record, checked before the worker touches a window)."""
    data = config_mapping(f"127.0.0.1:{free_port()}", redis_url, "events", group="g", size=60, max_keys=3,
                          prefix="rel")
    establish(redis_client, Keys("rel"), WindowsConfig(size_seconds=60, start=data["windows"]["start"]))
    data["windows"]["layout"] = "key"
    code, text = _worker("workers.release", write_toml(tmp_path / "release.toml", data), tmp_path)
    assert code == 2 and "Traceback" not in text, text[-3000:]
    errors = _error_lines(text)
    assert len(errors) == 1 and "windows.layout is 'key'" in errors[0] and "keep windows.layout = 'user'" in errors[0], text
