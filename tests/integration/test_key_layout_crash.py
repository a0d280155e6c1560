"""The key layout's two-step apply survives SIGKILL of a real ingest worker at each step
(docs/design/key-sharded-counts.md "Crashes"; ``windows.layout = "key"``, 4 shards, a real broker and
redis-server).

For each crash point of :mod:`stream_dp.ingest.crashpoints` -- ``after_record`` (step 1 returned, step 2 not
sent), ``after_count`` (step 2 returned, nothing deleted from pending, offsets not committed), ``after_trim``
(a later step 1 deleted counted entries) -- the worker (``tests/integration/crashing_ingest.py``) is
SIGKILLed there three times, at a random hit of the point each time, and restarted; a last, plain worker
consumes the rest. The key shards then hold exactly the oracle's counts (tests/support/bounding_oracle.py)
and no pending entry is left uncounted. (A crash part way through step 2 is tested in process,
tests/integration/test_key_layout_apply.py: on one redis-server step 2 is one pipeline.) And the case no replay
heals: a worker SIGKILLed between the steps of its last chunk and never restarted, the window closed anyway;
the release worker's drain counts the pending entries and the released counts equal the oracle's."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from ingest_helpers import (REPO, committed_total, config_mapping, create_topic, ground_truth, make_events, produce,
                            redis_counts, start_worker, stop_worker, wait_for, write_toml)
from store_helpers import uncounted_pending
from kill_at import CRASHED
from stream_dp.ingest.crashpoints import POINTS
from stream_dp.ingest.store import WindowStore
from stream_dp.processes import die_with_parent
from stream_dp.store.keys import Keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIZE = 600
MAX_KEYS = 3
PARTITIONS = 2
SHARDS = 4
N = 6000
KILLS = 3


def _start_crashing(cfg_file, log_path, spec: str) -> subprocess.Popen[bytes]:
    here = str(REPO / "tests" / "integration")
    env = {k: v for k, v in os.environ.items() if k != "STREAM_DP_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), here])  # the applier process unpickles kill_at's object
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, os.path.join(here, "crashing_ingest.py"), "--crash-at", spec,
                                 "--config", str(cfg_file)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, preexec_fn=die_with_parent)


def _killed_after_step_one(cfg_file, log_path) -> None:
    """A worker SIGKILLed right after step 1 of its first batch (one batch: the whole stream)."""
    proc = _start_crashing(cfg_file, log_path, "after_record@1")
    try:
        wait_for(lambda: proc.poll() is not None, timeout=90, interval=0.1, what="the worker to die after step 1")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert CRASHED in log_path.read_text()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_step_of_the_two_step_apply_counts_stay_exact(bootstrap_servers, redis_client, redis_url,
                                                                      topic_name, tmp_path, point):
    topic, group = topic_name("events"), topic_name("group")
    create_topic(bootstrap_servers, topic, PARTITIONS)
    events = make_events(len(point), N, users=600, keys=200, windows=3, size=SIZE)
    produce(bootstrap_servers, topic, events)
    data = config_mapping(bootstrap_servers, redis_url, topic, group=group, size=SIZE, max_keys=MAX_KEYS,
                          kafka={"max_poll_records": 150, "session_timeout_ms": 6000, "heartbeat_interval_ms": 400})
    data["windows"].update(shards=SHARDS, layout="key")
    cfg_file = write_toml(tmp_path / "ingest.toml", data)
    rnd = random.Random(point)
    crashed = []
    for kill in range(KILLS):
        log = tmp_path / f"crash{kill}.log"
        proc = _start_crashing(cfg_file, log, f"{point}@{rnd.randint(1, 4)}")
        try:
            wait_for(lambda proc=proc: proc.poll() is not None, timeout=90, interval=0.1,
                     what=f"the worker to die at {point} (kill {kill + 1})")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        text = log.read_text()
        assert CRASHED in text and "Traceback" not in text, text[-3000:]
        crashed.append(committed_total(bootstrap_servers, group, topic, PARTITIONS))
    assert crashed[-1] < N, f"the kills must land before the end of the stream: {crashed}"
    final = start_worker(cfg_file, tmp_path / "final.log")
    try:
        wait_for(lambda: committed_total(bootstrap_servers, group, topic, PARTITIONS) == N, timeout=120, interval=0.3,
                 what="every event committed")
    finally:
        assert stop_worker(final) == 0
    keys = Keys("sdp", SHARDS, "key")
    store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    assert redis_counts(store, truth) == truth
    assert all(uncounted_pending(redis_client, keys, start) == [] for start in truth)
    assert not any(redis_client.exists(keys.window_counts(start, s)) for start in truth for s in range(SHARDS))


@pytest.mark.timeout(300)
def test_sigkill_after_recording_a_sources_last_chunk_is_healed_by_the_replay(bootstrap_servers, redis_client,
                                                                              redis_url, topic_name, tmp_path):
    """The case only the replay's re-read of pending heals: the worker dies right after step 1 of the *last*
    chunk of its sources (no later chunk's step-1 reply will name their pending entries), and the replay finds
    every event a duplicate, so it sends no step 1 at all. One partition, one window, one batch."""
    topic, group = topic_name("events"), topic_name("group")
    create_topic(bootstrap_servers, topic, 1)
    events = make_events(7, 300, users=80, keys=40, windows=1, size=SIZE)
    produce(bootstrap_servers, topic, events)
    data = config_mapping(bootstrap_servers, redis_url, topic, group=group, size=SIZE, max_keys=MAX_KEYS,
                          kafka={"session_timeout_ms": 6000, "heartbeat_interval_ms": 400})
    data["windows"].update(shards=SHARDS, layout="key")
    cfg_file = write_toml(tmp_path / "ingest.toml", data)
    keys = Keys("sdp", SHARDS, "key")
    store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    _killed_after_step_one(cfg_file, tmp_path / "crash.log")
    recorded = sum(int(store.meta(start, s).get("events_applied", 0)) for start in truth for s in range(SHARDS))
    assert recorded == sum(sum(c.values()) for c in truth.values()), "step 1 must have recorded the whole stream"
    assert redis_counts(store, truth) == {start: {} for start in truth}  # recorded, counted nowhere yet
    final = start_worker(cfg_file, tmp_path / "final.log")
    try:
        wait_for(lambda: redis_counts(store, truth) == truth, timeout=90, interval=0.3,
                 what="the replay to count the pending entries")
        assert "already applied" in (tmp_path / "final.log").read_text()  # it was a replay of duplicates
    finally:
        assert stop_worker(final) == 0
    assert all(uncounted_pending(redis_client, keys, start) == [] for start in truth)


@pytest.mark.timeout(300)
def test_a_window_closed_after_a_sigkill_between_the_steps_is_released_with_the_oracle_counts(
        bootstrap_servers, redis_client, redis_url, topic_name, tmp_path):
    """The case no replay heals: the worker is SIGKILLed right after step 1 of its last chunk and never comes
    back; the window is closed anyway (here by a watermark advance standing for the idle-partition timeout of
    the surviving workers). The release worker's drain counts the pending entries before it reads: the
    production release worker (in process, on the same Redis and config) publishes a histogram at an ε where
    the noise is 0 that equals the oracle's counts at or above its threshold, in every window."""
    from stream_dp.config import load_config
    from tests.support.neighbours import release_in_process

    topic, group = topic_name("events"), topic_name("group")
    create_topic(bootstrap_servers, topic, 1)
    events = make_events(11, 300, users=80, keys=40, windows=1, size=SIZE)
    produce(bootstrap_servers, topic, events)
    data = config_mapping(bootstrap_servers, redis_url, topic, group=group, size=SIZE, max_keys=MAX_KEYS,
                          kafka={"session_timeout_ms": 6000, "heartbeat_interval_ms": 400},
                          budget={"epsilon": 1e9, "delta": 0.5})
    data["windows"].update(shards=SHARDS, layout="key")
    data["releases.topk"] = {"enabled": False}
    data["releases.alerts"] = {"enabled": False}
    data["releases.sample"] = {"enabled": True, "window_epsilon": 1.0, "window_delta": 1e-6}
    data["releases.histogram"] = {"enabled": True, "window_epsilon": 1e5, "window_delta": 1e-6, "max_keys": 10_000}
    cfg_file = write_toml(tmp_path / "stream-dp.toml", data)
    keys = Keys("sdp", SHARDS, "key")
    store = WindowStore(redis_client, keys=keys, window_size=SIZE, max_keys_per_user=MAX_KEYS)
    truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
    _killed_after_step_one(cfg_file, tmp_path / "crash.log")
    assert all(uncounted_pending(redis_client, keys, start) for start in truth)  # recorded, counted nowhere
    closing = max(truth) + 2 * SIZE
    state = store.advance_watermark({0: (float(closing), False)}, known_partitions=[0], idle_timeout=120)
    assert state.global_watermark is not None and state.global_watermark > max(truth)
    view = release_in_process(load_config(cfg_file), redis_client, rng=1)
    histograms = {r["window"]["start"]: r for r in view.records if r["type"] == "histogram"}
    assert set(truth) <= set(histograms)
    for start, counts in truth.items():
        released = {item["key"]: item["count"] for item in histograms[start]["items"]}
        assert released and released == {k: c for k, c in counts.items() if c >= min(released.values())}, start
        assert uncounted_pending(redis_client, keys, start) == []
