"""The tests' Redis Cluster fixtures: a real 3-master (+ replicas) cluster of redis-server processes, and a
single-node master with one replica.

The cluster runner itself lives in :mod:`tests.support.devcluster` (the benchmarks start the same clusters);
this module is the tests' entry point to it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.support.devcluster import LocalCluster, Node, cluster_port, local_cluster, wait_until
from stream_dp.dev.devstack import Service, find_redis_server, free_port

__all__ = ["LocalCluster", "Node", "cluster_port", "local_cluster", "master_with_replica", "wait_until"]


@contextmanager
def master_with_replica(tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    """A single-node redis-server master and one replica of it (real processes, free ports), the replica's
    link up; both stopped on exit (a SIGSTOPped one is continued first, so it handles SIGTERM)."""
    binary = str(find_redis_server())
    started: list[Service] = []

    def node(name: str, *extra: str) -> Service:
        workdir = tmp_path / name
        workdir.mkdir()

        def on_free_port() -> tuple[int, list[str]]:
            port = free_port()
            return port, [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                          "--save", "", "--appendonly", "no", *extra]

        port, argv = on_free_port()
        svc = Service(name, argv, port, tmp_path / f"{name}.log", rebind=on_free_port)
        svc.start()
        started.append(svc)
        return svc

    try:
        master = node("master")
        replica = node("replica", "--replicaof", "127.0.0.1", str(master.port))
        with redis.Redis(port=replica.port, decode_responses=True) as r:
            wait_until(lambda: r.info("replication").get("master_link_status") == "up", timeout=30,
                       what="the replica's link to its master")
        yield master, replica
    finally:
        for svc in started:
            if svc.proc is not None and svc.proc.poll() is None:
                svc.proc.send_signal(signal.SIGCONT)
            svc.stop()
