"""The batch applier (decode → window → bound → apply → watermark) in-process and as a child process,
against a real redis-server: outcomes, failures carried as outcomes, segment ordering, process lifetime."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import redis

from stream_dp.config import config_from_mapping
from stream_dp.processes import free_port
from stream_dp.ingest import applier as applier_mod
from stream_dp.ingest.applier import BatchApplier, BatchRequest, PartitionRecords
from stream_dp.ingest.runners import ApplierDied, ProcessRunner, ThreadRunner
from stream_dp.ingest.store import WindowStore
from stream_dp.store.keys import Keys

from demo_helpers import running
from ingest_helpers import wait_for

pytestmark = pytest.mark.integration

SIZE = 100


def _cfg(redis_url: str):
    return config_from_mapping({"redis": {"url": redis_url}, "windows": {"size_seconds": SIZE, "start": "0"},
                                "contribution": {"max_keys_per_user": 2}}, environ={})


def _store(client) -> WindowStore:
    return WindowStore(client, keys=Keys("sdp"), window_size=SIZE, max_keys_per_user=2)


def _records(partition: int, values: list[object], *, first_offset: int = 0) -> PartitionRecords:
    encoded = [json.dumps(v).encode() if isinstance(v, dict) else v for v in values]
    # record time = the event's time, as the trusted collector stamps it (1 s for records without one)
    stamps = [int(v["ts"] * 1000) if isinstance(v, dict) and "ts" in v else 1_000 for v in values]
    return PartitionRecords(partition, list(range(first_offset, first_offset + len(values))), stamps, encoded)


def _request(*parts: PartitionRecords) -> BatchRequest:
    owned = frozenset(p.partition for p in parts)
    return BatchRequest(list(parts), owned=owned, busy=owned, known=owned)


VALUES = [
    {"user": "a", "key": "x", "ts": 5}, {"user": "a", "key": "x", "ts": 6},  # second one: L∞
    b"\xff",  # not UTF-8
    {"user": "a", "key": "y", "ts": 7}, {"user": "a", "key": "z", "ts": 8},  # third key: L0 (Δ = 2)
    {"user": "b", "key": "x", "ts": 150}, {"key": "x", "ts": 9},  # next window; no user
]


def _check_outcome(out, client) -> None:
    assert out.failure is None
    assert (out.applied, out.linf, out.l0, out.duplicate, out.late) == (3, 1, 1, 0, 0)
    assert out.rejects == [(0, 2, "not_utf8"), (0, 6, "missing_user")]
    assert _store(client).counts(0) == {"x": 1, "y": 1}
    assert _store(client).counts(100) == {"x": 1}
    assert out.watermark is not None and out.watermark.windows_open == 2


def test_thread_runner_outcome(redis_client, redis_url):
    runner = ThreadRunner(BatchApplier(_cfg(redis_url), redis_client))
    try:
        runner.submit(_request(_records(0, VALUES)))
        _check_outcome(runner.result(), redis_client)
        runner.submit(_request(_records(0, VALUES)))  # the same offsets again: all duplicates
        again = runner.result()
        assert (again.applied, again.duplicate) == (0, 5)
    finally:
        runner.close()


def test_process_runner_outcome_and_clean_exit(redis_client, redis_url):
    runner = ProcessRunner(_cfg(redis_url))
    try:
        runner.submit(_request(_records(0, VALUES)))
        _check_outcome(runner.result(), redis_client)
        with pytest.raises(RuntimeError, match="no batch in flight"):
            runner.result()
    finally:
        runner.close()
    assert runner._proc.returncode == 0  # closing the socket ends it


def test_redis_failure_is_an_outcome_and_the_applier_keeps_serving(redis_client, redis_url):
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    runner = ProcessRunner(_cfg(dead))
    try:
        for _ in range(2):
            runner.submit(_request(_records(0, VALUES)))
            out = runner.result()
            assert out.failure is not None and out.failure.dependency == "redis"
            assert out.failure.error == "ConnectionError"
            runner.resume()  # what the loop does after it rewound
        assert runner._proc.poll() is None
    finally:
        runner.close()


def test_a_failed_segment_stops_the_rest_of_the_batch(redis_client, redis_url, monkeypatch):
    monkeypatch.setattr(applier_mod, "SEGMENT_RECORDS", 2)
    # window 0's bounding log is not a string: its chunk fails with WRONGTYPE inside Redis
    redis_client.hset(Keys("sdp").window_users(0), "a", "x")
    values = [{"user": "a", "key": "x", "ts": 5}, {"user": "b", "key": "x", "ts": 6},  # segment 1: window 0
              {"user": "c", "key": "x", "ts": 150}, {"user": "d", "key": "x", "ts": 160}]  # segment 2: window 100
    applier = BatchApplier(_cfg(redis_url), redis_client)
    try:
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            applier.apply_one(_request(_records(0, values)))
        # segment 2 was not sent: had it been, window 100's offset record would already be past offset 3,
        # and the replay of a later attempt could not tell its events from ones already applied
        assert _store(redis_client).counts(100) == {}
        assert redis_client.hget(Keys("sdp").window_offsets(100), "0") is None
        redis_client.delete(Keys("sdp").window_users(0))
        out = applier.apply_one(_request(_records(0, values)))  # the replay applies everything once
        assert (out.applied, out.duplicate) == (4, 0)
    finally:
        applier.close()


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_batch_queued_behind_a_failed_one_is_not_applied_until_resume(redis_client, redis_url, kind):
    """Two batches in flight, the first fails: the second must not be applied (its offset records would
    move past the first's events, and the replay would skip them) until the loop resumes the applier."""
    runner = (ThreadRunner(BatchApplier(_cfg(redis_url), redis_client)) if kind == "thread"
              else ProcessRunner(_cfg(redis_url)))
    redis_client.hset(Keys("sdp").window_users(0), "a", "x")  # window 0 fails with WRONGTYPE
    first = _request(_records(0, [{"user": "a", "key": "x", "ts": 5}]))
    second = _request(_records(0, [{"user": "b", "key": "x", "ts": 150}], first_offset=1))  # window 100
    try:
        runner.submit(first)
        runner.submit(second)
        with pytest.raises(RuntimeError, match="2 batches are already in flight"):
            runner.submit(second)
        failed, queued = runner.result(), runner.result()
        assert "WRONGTYPE" in failed.failure.message
        assert queued.failure.error == "NotApplied" and "ResponseError" in queued.failure.message
        assert _store(redis_client).counts(100) == {}
        assert redis_client.hget(Keys("sdp").window_offsets(100), "0") is None
        runner.submit(second)  # still refused: the loop has not resumed
        assert runner.result().failure.error == "NotApplied"
        redis_client.delete(Keys("sdp").window_users(0))
        runner.resume()
        runner.submit(first)
        runner.submit(second)
        assert [runner.result().applied, runner.result().applied] == [1, 1]
        assert _store(redis_client).counts(0) == {"x": 1} and _store(redis_client).counts(100) == {"x": 1}
        runner.submit(first)
        with pytest.raises(RuntimeError, match="with batches in flight"):
            runner.resume()
        runner.result()
    finally:
        runner.close()


def test_result_raises_when_the_applier_process_dies(redis_url):
    runner = ProcessRunner(_cfg(redis_url))
    try:
        os.kill(runner.pid, signal.SIGKILL)
        runner._proc.wait(timeout=10)
        with pytest.raises(ApplierDied):
            runner.submit(_request(_records(0, VALUES)))
            runner.result()
    finally:
        runner.close()


def test_the_applier_process_ends_with_the_process_that_started_it(redis_url, tmp_path):
    # a parent that starts an applier, reports its pid, then blocks; SIGKILL the parent
    script = textwrap.dedent(f"""
        import sys, time
        from stream_dp.config import config_from_mapping
        from stream_dp.ingest.runners import ProcessRunner
        runner = ProcessRunner(config_from_mapping({{"redis": {{"url": {redis_url!r}}}}}, environ={{}}))
        print(runner.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        child = int(parent.stdout.readline())
        assert running(child)
        parent.kill()
        parent.wait(timeout=10)
        wait_for(lambda: not running(child), timeout=10, interval=0.05, what="the applier process to end")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()


def test_the_applier_process_ignores_sigint_and_sigterm(redis_client, redis_url):
    runner = ProcessRunner(_cfg(redis_url))
    try:
        runner.submit(_request(_records(0, VALUES[:1])))
        assert runner.result().failure is None  # it is up and serving
        os.kill(runner.pid, signal.SIGINT)
        os.kill(runner.pid, signal.SIGTERM)
        # both are pending before the next request is sent: a fatal one would end the process at the
        # latest when its read returns, and result() would raise ApplierDied
        runner.submit(_request(_records(0, VALUES[1:2], first_offset=1)))
        out = runner.result()
        assert out.failure is None and out.linf == 1
    finally:
        runner.close()


@pytest.mark.parametrize("restart", [False, True])
def test_events_a_full_shard_refused_are_rejected_again_when_their_batch_is_replayed(redis_client, redis_url,
                                                                                    monkeypatch, restart):
    """Window 0's shard holds 10 log bytes: segment 1's chunk (4 pairs, 16 bytes) is refused as full, its
    offsets recorded; segment 2 then fails in Redis, so the batch's outcome is an error and no dead letter
    is written. The loop retries the batch (``restart``: a new applier process replays it, as after a
    crash): the refused events must come back as ``window_shard_full`` rejects again -- skipped as already
    applied, their dead letters would never be written -- while nothing is counted twice."""
    monkeypatch.setattr(applier_mod, "SEGMENT_RECORDS", 4)
    cfg = config_from_mapping({"redis": {"url": redis_url},
                               "windows": {"size_seconds": SIZE, "start": "0", "max_shard_log_bytes": 10},
                               "contribution": {"max_keys_per_user": 2}}, environ={})
    keys = Keys("sdp")
    redis_client.hset(keys.window_users(100), "a", "x")  # window 100's log is not a string: WRONGTYPE
    values = [{"user": u, "key": "x", "ts": 5 + i} for i, u in enumerate("abcd")]  # segment 1: window 0
    values += [{"user": "e", "key": "x", "ts": 150}, {"user": "f", "key": "x", "ts": 160}]  # segment 2
    applier = BatchApplier(cfg, redis_client)
    try:
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            applier.apply_one(_request(_records(0, values)))
        assert _store(redis_client).meta(0)["events_full"] == "4" and _store(redis_client).counts(0) == {}
        redis_client.delete(keys.window_users(100))
        full = [(0, i, "window_shard_full") for i in range(4)]
        if restart:
            runner = ProcessRunner(cfg)
            try:
                runner.submit(_request(_records(0, values)))
                out = runner.result()
            finally:
                runner.close()
        else:
            out = applier.apply_one(_request(_records(0, values)))
        assert out.failure is None
        assert (out.rejects, out.full, out.applied, out.duplicate) == (full, 4, 2, 0)
        again = applier.apply_one(_request(_records(0, values)))  # once more, e.g. the commit failed
        assert (again.rejects, again.applied, again.duplicate) == (full, 0, 2)
        assert _store(redis_client).counts(0) == {} and _store(redis_client).counts(100) == {"x": 2}
        assert _store(redis_client).meta(0)["events_full"] == "4"
    finally:
        applier.close()
