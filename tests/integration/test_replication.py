"""write_then_wait and min_replicas_acked against real redis-server processes: a master with a replica
(single-node deployment) and a 3-master cluster with one replica each."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from stream_dp.config import RedisConfig
from stream_dp.connections import redis_client
from stream_dp.dev.devstack import Service
from stream_dp.replication import NotReplicated, resolve_min_replicas, write_then_wait
from cluster_helpers import local_cluster, master_with_replica

pytestmark = pytest.mark.integration


@pytest.fixture
def master_and_replica(tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    with master_with_replica(tmp_path) as pair:
        yield pair


def _cfg(port: int, **kw: object) -> RedisConfig:
    return RedisConfig(url=f"redis://127.0.0.1:{port}/0", **kw)  # type: ignore[arg-type]


def test_confirmed_write_is_on_the_replica(master_and_replica):
    master, replica = master_and_replica
    client = redis_client(_cfg(master.port))
    replies = write_then_wait(client, "sdp:{t}:a", 1, 5000, lambda p: (p.set("sdp:{t}:a", "v"), p.incr("sdp:{t}:n")))
    assert replies == [True, 1]
    with redis.Redis(port=replica.port) as r:  # confirmed: already on the replica, no waiting needed
        assert r.get("sdp:{t}:a") == b"v" and r.get("sdp:{t}:n") == b"1"


def test_zero_replicas_only_writes(master_and_replica):
    master, _ = master_and_replica
    client = redis_client(_cfg(master.port))
    assert write_then_wait(client, "sdp:{t}:a", 0, 1, lambda p: p.set("sdp:{t}:a", "v")) == [True]


def test_a_paused_replica_means_not_replicated_and_a_wait_elsewhere_would_be_fooled(master_and_replica):
    master, replica = master_and_replica
    client = redis_client(_cfg(master.port))
    other = redis.Redis(port=master.port)  # another connection, whose own last write was replicated
    other.set("sdp:{t}:warm", "1")
    assert other.execute_command("WAIT", 1, 5000) == 1
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        with pytest.raises(NotReplicated) as caught:
            write_then_wait(client, "sdp:{t}:secret", 1, 200, lambda p: p.set("sdp:{t}:secret", "value-42"))
        msg = str(caught.value)
        assert "redis.min_replicas_acked" in msg and "redis.replication_timeout_ms" in msg
        assert "value-42" not in msg and "secret" not in msg  # neither the value nor the key
        assert isinstance(caught.value, redis.ConnectionError)  # the workers' transient path
        # The trap write_then_wait avoids: WAIT on another connection only covers that connection's own
        # writes -- it answers 1 at once, although the write above is not on the replica.
        assert other.execute_command("WAIT", 1, 200) == 1
    finally:
        os.kill(replica.pid, signal.SIGCONT)
        other.close()
    # once the replica runs again, the same write is confirmed
    assert write_then_wait(client, "sdp:{t}:secret", 1, 5000, lambda p: p.set("sdp:{t}:secret", "v")) == [True]


def test_auto_resolves_from_the_deployment(master_and_replica, tmp_path):
    master, _ = master_and_replica
    client = redis_client(_cfg(master.port))
    assert resolve_min_replicas(_cfg(master.port), client) == 1
    assert resolve_min_replicas(_cfg(master.port, min_replicas_acked=0), client) == 0
    assert resolve_min_replicas(_cfg(master.port, min_replicas_acked=2), client) == 2


def test_auto_is_zero_on_a_lone_server(redis_url):
    cfg = RedisConfig(url=redis_url)
    assert resolve_min_replicas(cfg, redis_client(cfg)) == 0


@pytest.mark.slow
def test_cluster_waits_on_the_master_that_owns_the_key(tmp_path):
    with local_cluster(tmp_path, masters=3, replicas=1) as cluster:
        cfg = RedisConfig(url=cluster.url, cluster=True)
        client = redis_client(cfg)
        assert isinstance(client, redis.RedisCluster)
        assert resolve_min_replicas(cfg, client) == 1
        keys = [f"sdp:{{k{i}}}:x" for i in range(12)]
        owners = {cluster.master_of(k).port for k in keys}
        assert len(owners) == 3  # the keys really spread over every master
        for k in keys:
            assert write_then_wait(client, k, 1, 5000, lambda p, k=k: p.set(k, "v")) == [True]
            with cluster.replica_of(cluster.master_of(k)).client() as r:
                assert r.execute_command("READONLY") and r.get(k) == b"v"
        target = keys[0]
        master = cluster.master_of(target)
        others = [k for k in keys if cluster.master_of(k).port != master.port]
        with cluster.paused(cluster.replica_of(master)):
            with pytest.raises(NotReplicated):
                write_then_wait(client, target, 1, 200, lambda p: p.set(target, "w"))
            assert write_then_wait(client, others[0], 1, 5000, lambda p: p.set(others[0], "w")) == [True]
        client.close()
