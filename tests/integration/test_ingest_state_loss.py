"""Ingest refuses to count on when Redis lost the window state its committed offsets stand for
(stream_dp.ingest.state_check), with a real ingest process: a ``FLUSHALL`` under the running worker stops it
(exit code 2, naming the recovery) before the batch's offsets are committed; a restart refuses too; a start
with ``--accept-state-loss`` continues from the committed offsets. And the rule, row by row: a new group,
a deployment older than the marker, a lost state, an accepted loss.

Before (main at 50f0651): ingest carried on into the wiped Redis from its committed offsets, and the windows
not yet released silently lost every event counted before the loss."""

from __future__ import annotations

import pytest

from ingest_helpers import (config_mapping, create_topic, make_events, produce, start_worker, stop_worker,
                            wait_for, write_toml)
from stream_dp.config import load_config
from stream_dp.ingest import state_check
from stream_dp.keys import Keys
from stream_dp.state_epochs import StateLost

pytestmark = pytest.mark.integration
SIZE = 60


def _config(tmp_path, bootstrap, redis_url, topic, group):
    data = config_mapping(bootstrap, redis_url, topic, group=group, size=SIZE, max_keys=3)
    return write_toml(tmp_path / "ingest.toml", data)


def test_the_rule_row_by_row(tmp_path, bootstrap_servers, redis_url, redis_client, topic_name) -> None:
    cfg = load_config(_config(tmp_path, bootstrap_servers, redis_url, topic_name("events"), topic_name("g")))
    keys = Keys(cfg.redis.key_prefix)
    first = state_check.check(cfg, redis_client, committed={})  # a new group: nothing was counted
    assert first.origin.startswith("first start") and state_check.check(cfg, redis_client, committed={0: 5}) == first
    redis_client.delete(keys.ingest_epoch())
    redis_client.hset(keys.watermarks(), "0", "1.0")  # the state is there: a deployment older than the marker
    assert state_check.check(cfg, redis_client, committed={0: 5}).origin.startswith("adopted")
    redis_client.flushdb()
    with pytest.raises(StateLost) as info:
        state_check.check(cfg, redis_client, committed={0: 5, 1: 7})
    text = str(info.value)
    assert f"the consumer group {cfg.kafka.ingest_group_id} has committed offsets on {cfg.kafka.events_topic} " \
           "(0@5, 1@7)" in text
    assert "stream-dp budget rebuild --from-topic" in text and "--accept-state-loss" in text
    accepted = state_check.check(cfg, redis_client, accept_loss=True, committed={0: 5})
    assert accepted.origin.startswith("state loss accepted")


def test_flushall_under_a_running_ingest_stops_it_until_the_loss_is_accepted(tmp_path, bootstrap_servers, redis_url,
                                                                             redis_client, topic_name) -> None:
    topic, group = topic_name("events"), topic_name("group")
    create_topic(bootstrap_servers, topic, 2)
    cfg_file = _config(tmp_path, bootstrap_servers, redis_url, topic, group)
    keys = Keys("sdp")
    events = make_events(1, 400, users=50, keys=20, windows=4, size=SIZE)
    produce(bootstrap_servers, topic, events[:200])
    proc = start_worker(cfg_file, tmp_path / "run1.log")
    try:
        wait_for(lambda: redis_client.exists(keys.watermarks()) and redis_client.exists(keys.ingest_epoch()),
                 timeout=60, what="ingest counting", procs=[proc])
        wait_for(lambda: state_check.committed_offsets(load_config(cfg_file)), timeout=60, what="offsets committed",
                 procs=[proc])
        redis_client.flushdb()  # the operator's mistake (this test's own database)
        produce(bootstrap_servers, topic, events[200:])
        wait_for(lambda: proc.poll() is not None, timeout=60, what="ingest to stop")
    finally:
        stop_worker(proc)
    text = (tmp_path / "run1.log").read_text()
    assert proc.returncode == 2, text[-3000:]
    assert "Redis lost ingest's window state: the ingest epoch marker vanished" in text, text[-3000:]
    assert "--accept-state-loss" in text and "Traceback" not in text, text[-3000:]

    again = start_worker(cfg_file, tmp_path / "run2.log")
    wait_for(lambda: again.poll() is not None, timeout=60, what="the restart to refuse")
    text = (tmp_path / "run2.log").read_text()
    assert again.returncode == 2 and "has committed offsets on" in text and "Traceback" not in text, text[-3000:]

    accepted = start_worker(cfg_file, tmp_path / "run3.log", "--accept-state-loss")
    try:
        wait_for(lambda: redis_client.exists(keys.watermarks()), timeout=60, what="counting again", procs=[accepted])
    finally:
        assert stop_worker(accepted) == 0
    assert "continuing after Redis lost ingest's state (--accept-state-loss)" in (tmp_path / "run3.log").read_text()

