"""Every process on a real 3-master Redis Cluster (``redis.cluster = true``): ingest and release workers
as processes, exact counts against the test oracle, one release per (window, type), ``stream-dp budget
verify`` and ``stream-dp tail`` through the cluster."""

from __future__ import annotations

import json

import pytest

from cluster_helpers import local_cluster
from ingest_helpers import config_mapping, create_topic, ground_truth, make_events, produce, stop_worker
from ingest_helpers import start_worker as start_ingest
from ingest_helpers import write_toml
from release_processes import by_release_id, cli, read_topic, start_worker, stop, wait_for, wait_started
from stream_dp.config import RedisConfig
from stream_dp.connections import redis_client
from stream_dp.ingest.store import WindowStore
from stream_dp.keys import Keys
from stream_dp.release.records import validate_record

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SIZE = 60
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
WINDOWS = 3
MAX_KEYS = 3
TYPES = ("topk", "alerts", "sample")
PREFIX = "cl"


def test_ingest_release_budget_and_tail_on_a_three_master_cluster(tmp_path, bootstrap_servers, topic_name):
    with local_cluster(tmp_path / "cluster", masters=3) as cluster:
        events_topic, releases_topic = topic_name("events"), topic_name("releases")
        create_topic(bootstrap_servers, events_topic, 2)
        events = make_events(11, 2000, users=300, keys=120, windows=WINDOWS, size=SIZE, t0=T0)
        events.append({"user": "user-tick", "key": "tick", "ts": T0 + WINDOWS * SIZE + SIZE / 2})
        truth = ground_truth(events, size=SIZE, max_keys=MAX_KEYS)
        data = config_mapping(bootstrap_servers, cluster.url, events_topic, group=topic_name("g"), size=SIZE,
                              max_keys=MAX_KEYS, lateness=0, idle=1.0, prefix=PREFIX,
                              budget={"epsilon": 1e9, "delta": 1e-3})
        data["redis"]["cluster"] = True
        data["kafka"]["releases_topic"] = releases_topic
        data["releases.topk"] = {"enabled": True, "k": 5, "k_bar": 40, "epsilon": 1e4, "delta": 1e-6}
        data["releases.alerts"] = {"enabled": True, "watchlist": ["item-1", "item-2"], "threshold": 20.0, "k": 3, "epsilon": 1e4}
        data["releases.sample"] = {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 1.0, "delta": 1e-6}
        data["releases.histogram"] = {"enabled": False}
        cfg_path = write_toml(tmp_path / "stream-dp.toml", data)
        produce(bootstrap_servers, events_topic, events)
        ingest = start_ingest(cfg_path, tmp_path / "ingest.log")
        release = start_worker(cfg_path, worker_id="r1", log_path=tmp_path / "release.log", claim_ttl=10.0)
        client = redis_client(RedisConfig(url=cluster.url, cluster=True))
        keys = Keys(PREFIX)
        try:
            wait_for(lambda: client.zcard(keys.release_index("released")) >= WINDOWS, timeout=180,
                     what=f"{WINDOWS} windows released on the cluster", procs=[ingest, release])
            messages = read_topic(bootstrap_servers, releases_topic, expect_at_least=WINDOWS * len(TYPES))
        finally:
            wait_started(tmp_path / "release.log")
            assert stop(release) == 0, (tmp_path / "release.log").read_text()[-3000:]
            assert stop_worker(ingest) == 0, (tmp_path / "ingest.log").read_text()[-3000:]
        # exact bounded counts, read back through the cluster client
        store = WindowStore(client, keys=keys, window_size=SIZE)
        for start, want in truth.items():
            if start < T0 + WINDOWS * SIZE:
                assert store.counts(start) == want, f"window {start}"
        # the state really is spread: windows, ledger and ingest progress live on more than one master
        owners = {cluster.master_of(k).port for k in
                  [keys.window_counts(T0 + i * SIZE) for i in range(WINDOWS)]
                  + [keys.ledger(s, "totals") for s in client.smembers(f"{PREFIX}:{{ledger}}:scopes")]
                  + [keys.watermarks()]}
        assert len(owners) >= 2
        groups = by_release_id(messages)
        expected = {f"{T0 + i * SIZE}-{T0 + (i + 1) * SIZE}.{t}" for i in range(WINDOWS) for t in TYPES}
        assert set(groups) == expected
        for rid, values in groups.items():
            assert len(values) == 1, f"{rid} published {len(values)} times"
            validate_record(json.loads(values[0]))
        verify = cli("budget", "verify", "--config", str(cfg_path))
        assert verify.returncode == 0, verify.stdout + verify.stderr
        listed = cli("budget", "list", "--config", str(cfg_path), "--json")
        assert listed.returncode == 0 and json.loads(listed.stdout), listed.stderr
        tail = cli("tail", "--config", str(cfg_path), "--count", str(len(expected)), "--json")
        assert tail.returncode == 0, tail.stderr
        assert {json.loads(line)["release_id"] for line in tail.stdout.splitlines()} == expected
        client.close()
