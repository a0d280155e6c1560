"""The scale-out benchmark refuses a run that counted wrong: its check of Redis against the oracle
(bench/bench_scaleout.py ``check_counts``) on a real redis-server, right and deliberately wrong."""

from __future__ import annotations

import pytest

from bench.bench_scaleout import WINDOW_SECONDS, check_counts
from stream_dp.store.keys import Keys

pytestmark = pytest.mark.integration

W0, W1 = 7200, 7200 + WINDOW_SECONDS
ORACLE = {W0: {"a": 3, "b": 1}, W1: {"a": 1}}


def _write(client, counts: dict[int, dict[str, int]], *, shards: int) -> None:
    """Counts as ingest leaves them: split over the window's shards, each window in the windows index."""
    keys = Keys(shards=shards)
    for start, per_key in counts.items():
        client.zadd(keys.windows_index(), {str(start): start})
        for i, (key, count) in enumerate(per_key.items()):
            for unit in range(count):  # one user at a time, spread over the shards
                client.zincrby(keys.window_counts(start, (i + unit) % shards), 1, key)


@pytest.mark.parametrize("shards", [1, 3])
def test_exact_counts_pass(redis_client, shards) -> None:
    _write(redis_client, ORACLE, shards=shards)
    check_counts(redis_client, shards, ORACLE)


@pytest.mark.parametrize("wrong,message", [
    ({W0: {"a": 2, "b": 1}, W1: {"a": 1}}, "window 7200: 1 of 2 keys counted wrong .*'a': 2 in Redis, 3 expected"),
    ({W0: {"a": 3, "b": 1, "c": 1}, W1: {"a": 1}}, "window 7200: 1 of 2 keys .*'c': 1 in Redis, 0 expected"),
    ({W0: {"a": 3, "b": 1}}, "window 10800: 1 of 1 keys .*'a': 0 in Redis, 1 expected"),
    ({**ORACLE, W1 + WINDOW_SECONDS: {"x": 1}}, "windows the stream has no events in: \\[14400\\]"),
])
def test_a_count_off_by_one_a_key_or_a_window_too_many_or_too_few_fails_the_run(redis_client, wrong, message) -> None:
    _write(redis_client, wrong, shards=3)
    with pytest.raises(AssertionError, match=message):
        check_counts(redis_client, 3, ORACLE)
