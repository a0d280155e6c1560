"""A local Redis Cluster for tests and benchmarks: redis-server processes in cluster mode on free loopback
ports (the dev stack's redis-server binary, :func:`stream_dp.dev.devstack.find_redis_server`).

:class:`LocalCluster` starts ``masters`` masters (the slots split evenly) and optionally one replica per
master (``CLUSTER REPLICATE``), and waits -- by polling ``CLUSTER INFO`` / ``CLUSTER NODES`` / ``INFO
replication``, never by sleeping -- until every node reports ``cluster_state:ok`` and every replica's link
is up. Helpers find the master that owns a key, its replica, SIGKILL / SIGSTOP / SIGCONT a node, force or
await a replica's promotion, and restart a killed node (it rejoins as a replica of its successor).

Nodes use a short ``cluster-node-timeout`` (failure detection in about a second) and
``cluster-replica-validity-factor 0`` (a replica may always be promoted, however long its link was down --
the failover tests stop replicas on purpose). No persistence: a restarted node comes back empty and
resynchronises from its new master. Not for production: no auth, loopback only.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from stream_dp.dev.devstack import Service, find_redis_server

SLOTS = 16384
READY_SECONDS = 60.0
NODE_TIMEOUT_MS = 1000


def cluster_port() -> int:
    """A free port p <= 55535 whose cluster-bus port p + 10000 is free too (Redis needs both)."""
    rnd = random.Random()
    for _ in range(200):
        port = rnd.randrange(20000, 55535)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a cluster node")  # pragma: no cover


def wait_until(condition: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``condition`` (connection errors count as "not yet") until truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Node:
    """One redis-server process of the cluster."""

    index: int
    service: Service
    workdir: Path
    node_id: str = ""

    @property
    def port(self) -> int:
        return self.service.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.service.pid is not None, f"node {self.address} is not running"
        return self.service.pid

    def client(self, **opts: Any) -> redis.Redis:
        """A plain (non-cluster) client of this node only."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, **opts)

    def call(self, *args: Any) -> Any:
        with self.client(decode_responses=True) as c:
            return c.execute_command(*args)

    def info(self, section: str) -> dict[str, Any]:
        with self.client(decode_responses=True) as c:
            return c.info(section)

    def cluster_info(self) -> dict[str, str]:
        with self.client(decode_responses=True) as c:
            return c.cluster("INFO")

    def is_master(self) -> bool:
        return self.info("replication").get("role") == "master"


class LocalCluster:
    """``masters`` masters (+ ``replicas`` replicas each, 0 or 1) on loopback; :meth:`close` stops them all."""

    def __init__(self, workdir: Path, *, masters: int = 3, replicas: int = 0,
                 extra_args: tuple[str, ...] = ()) -> None:
        if masters < 3 and replicas:
            raise ValueError("automatic failover needs at least 3 masters")
        if replicas not in (0, 1):
            raise ValueError("replicas per master must be 0 or 1")
        self.workdir = workdir
        self.n_masters, self.n_replicas = masters, replicas
        self.extra_args = extra_args
        self.binary = str(find_redis_server())
        self.nodes: list[Node] = []
        self.stopped: set[int] = set()  # indexes of SIGSTOPped nodes (not asked anything meanwhile)

    # --- life cycle --------------------------------------------------------------------------------
    def _argv(self, port: int, workdir: Path) -> list[str]:
        return [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                "--cluster-enabled", "yes", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--cluster-config-file", str(workdir / "nodes.conf"), "--cluster-replica-validity-factor", "0",
                "--appendonly", "no", "--save", "", "--maxmemory-policy", "noeviction", *self.extra_args]

    def _on_free_ports(self, workdir: Path) -> tuple[int, list[str]]:
        port = cluster_port()
        return port, self._argv(port, workdir)

    def start(self) -> "LocalCluster":
        total = self.n_masters * (1 + self.n_replicas)
        for i in range(total):
            port = cluster_port()
            workdir = self.workdir / f"node{i}"
            workdir.mkdir(parents=True, exist_ok=True)
            svc = Service(f"redis-cluster-{i}", self._argv(port, workdir), port, self.workdir / f"node{i}.log",
                          rebind=functools.partial(self._on_free_ports, workdir))
            svc.start()
            self.nodes.append(Node(i, svc, workdir))
        for node in self.nodes:
            node.node_id = node.call("CLUSTER", "MYID")
        masters = self.nodes[:self.n_masters]
        per_node = SLOTS // self.n_masters
        for i, node in enumerate(masters):
            end = SLOTS if i == self.n_masters - 1 else (i + 1) * per_node
            node.call("CLUSTER", "ADDSLOTS", *range(i * per_node, end))
        for node in self.nodes[1:]:
            node.call("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
        wait_until(lambda: all(int(n.cluster_info()["cluster_known_nodes"]) == total for n in self.nodes),
                   timeout=READY_SECONDS, what="every node to know every other")
        for replica, master in zip(self.nodes[self.n_masters:], masters):
            replica.call("CLUSTER", "REPLICATE", master.node_id)
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = READY_SECONDS) -> None:
        """Until every running node reports cluster_state:ok, every running replica's link is up, and every
        running node's slot map (``CLUSTER SLOTS``: what a cluster client reads at start) covers all 16384
        slots with the same masters and lists every running replica. cluster_state:ok alone came back while a
        node's map still lacked the slots of a master just replaced, and a client started from that node
        refused to start; a node that had not yet heard of a replica made ``min_replicas_acked = "auto"``
        read 0 replicas from it."""
        def slot_map(node: Node) -> tuple[frozenset[tuple[int, int, int]], frozenset[int]]:
            """(first slot, last slot, master port) of each range, and the replica ports listed."""
            ranges = node.call("CLUSTER", "SLOTS")
            return (frozenset((int(start), int(end), int(master[1])) for start, end, master, *_ in ranges),
                    frozenset(int(replica[1]) for _, _, _, *replicas in ranges for replica in replicas))

        def healthy() -> bool:
            maps, listed, replicas = set(), [], set()
            for node in self.running():
                if node.cluster_info()["cluster_state"] != "ok":
                    return False
                info = node.info("replication")
                if info["role"] == "slave":
                    if info.get("master_link_status") != "up":
                        return False
                    replicas.add(node.port)
                masters, known = slot_map(node)
                maps.add(masters)
                listed.append(known)
            return (len(maps) == 1 and sum(end - start + 1 for start, end, _ in maps.pop()) == 16384
                    and all(replicas <= known for known in listed))

        wait_until(healthy, timeout=timeout, what="cluster_state:ok on every node and replica links up")

    def running(self) -> list[Node]:
        """Nodes whose process runs and is not stopped (SIGSTOP)."""
        return [n for n in self.nodes if n.service.running and n.index not in self.stopped]

    def close(self) -> None:
        for node in self.nodes:
            if node.service.running:
                try:
                    os.kill(node.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
                except ProcessLookupError:
                    pass
            node.service.stop()

    # --- clients and topology ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        """redis:// URL of one running master (cluster clients discover the rest)."""
        return f"redis://{self.masters()[0].address}"

    def client(self, **opts: Any) -> RedisCluster:
        node = self.masters()[0]
        return RedisCluster(host="127.0.0.1", port=node.port, **opts)

    def masters(self) -> list[Node]:
        """Running nodes whose role is master (as they report it now)."""
        return [n for n in self.running() if n.is_master()]

    def master_of(self, key: str) -> Node:
        """The running master that owns ``key``'s slot (asked of the servers, not of a cached map)."""
        slot = key_slot(key.encode())
        for node in self.masters():
            for start, end, owner, *_replicas in node.call("CLUSTER", "SLOTS"):
                if start <= slot <= end and int(owner[1]) == node.port:
                    return node
        raise AssertionError(f"no running master owns slot {slot}")

    def replica_of(self, master: Node) -> Node:
        """The running replica that replicates ``master``."""
        for node in self.running():
            info = node.info("replication")
            if info["role"] == "slave" and int(info["master_port"]) == master.port:
                return node
        raise AssertionError(f"master {master.address} has no running replica")

    # --- faults ------------------------------------------------------------------------------------
    def kill(self, node: Node) -> None:
        """SIGKILL ``node`` (a crash: whatever it had not replicated is gone)."""
        try:
            os.kill(node.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.stopped.discard(node.index)
        node.service.kill()

    @contextmanager
    def paused(self, node: Node) -> Iterator[Node]:
        """SIGSTOP ``node`` for the block (it neither replicates nor acknowledges), SIGCONT after."""
        self.stop_node(node)
        try:
            yield node
        finally:
            if node.service.running:
                self.continue_node(node)

    def stop_node(self, node: Node) -> None:
        """SIGSTOP: the process is frozen (no replication, no acknowledgements, no cluster gossip)."""
        os.kill(node.pid, signal.SIGSTOP)
        self.stopped.add(node.index)

    def cut_off_replica(self, replica: Node, master: Node) -> None:
        """Freeze ``replica`` (SIGSTOP) and close its replication link on ``master`` (``CLIENT KILL TYPE
        replica``): from now on nothing the master acknowledges reaches it, not even bytes already queued in
        the kernel's socket buffers (a SIGSTOP alone would leave those to be delivered on SIGCONT). Returns
        once the master counts no connected replica."""
        self.stop_node(replica)
        master.call("CLIENT", "KILL", "TYPE", "replica")
        wait_until(lambda: int(master.info("replication")["connected_slaves"]) == 0, timeout=READY_SECONDS,
                   what=f"master {master.address} to drop its replica link")

    def continue_node(self, node: Node) -> None:
        os.kill(node.pid, signal.SIGCONT)
        self.stopped.discard(node.index)

    def promote(self, replica: Node, *, force: bool = False, timeout: float = READY_SECONDS) -> None:
        """Wait until ``replica`` is a master serving its slots with cluster_state:ok. With ``force`` it is
        told ``CLUSTER FAILOVER TAKEOVER`` at once (no agreement of its failed master needed); otherwise
        the cluster's own failure detection and election promote it."""
        if force:
            replica.call("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_until(lambda: replica.is_master() and replica.cluster_info()["cluster_state"] == "ok",
                   timeout=timeout, what=f"replica {replica.address} to be promoted")
        wait_until(lambda: all(n.cluster_info()["cluster_state"] == "ok" for n in self.running()),
                   timeout=timeout, what="cluster_state:ok on every running node after the failover")

    def restart(self, node: Node, timeout: float = READY_SECONDS) -> None:
        """Start a killed node again on its port; it rejoins (as a replica of the master that took its
        slots) and resynchronises. Returns once the cluster is healthy again."""
        node.service.start()
        self.wait_healthy(timeout)


@contextmanager
def local_cluster(workdir: Path, *, masters: int = 3, replicas: int = 0,
                  extra_args: tuple[str, ...] = ()) -> Iterator[LocalCluster]:
    """A started :class:`LocalCluster`, stopped (every process, even paused ones) on exit; ``extra_args`` go
    to every redis-server after the defaults (a later setting wins)."""
    cluster = LocalCluster(workdir, masters=masters, replicas=replicas, extra_args=extra_args)
    try:
        yield cluster.start()
    finally:
        cluster.close()
