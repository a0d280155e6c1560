"""The ledger on a real 3-master Redis Cluster: every script's keys share one slot, scopes spread over
nodes, and the lifetime scope (another slot) works through its hold/charge/settle steps."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from stream_dp.accounting.budget import BudgetCap
from stream_dp.accounting.composition import compose
from stream_dp.accounting.events import PureDpEvent, RangeBoundedEvent
from stream_dp.accounting.ledger import SCOPE_PARTS, Ledger
from stream_dp.devstack import Service, find_redis_server
from stream_dp.keys import Keys

pytestmark = pytest.mark.integration

NODES = 3
SLOTS = 16384
READY_SECONDS = 30


def _cluster_port() -> int:
    """A free port p <= 55535 whose cluster-bus port p + 10000 is free too (Redis needs both)."""
    import random
    import socket

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


@pytest.fixture
def cluster(tmp_path) -> Iterator[RedisCluster]:
    binary = str(find_redis_server())
    services = []
    try:
        for i in range(NODES):
            port = _cluster_port()
            workdir = tmp_path / f"node{i}"
            workdir.mkdir()
            argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                    "--cluster-enabled", "yes", "--cluster-node-timeout", "1000", "--cluster-config-file", str(workdir / "nodes.conf"),
                    "--appendonly", "no", "--save", ""]
            svc = Service(f"redis-cluster-{i}", argv, port, tmp_path / f"node{i}.log")
            svc.start()
            services.append(svc)
        clients = [redis.Redis(host="127.0.0.1", port=s.port) for s in services]
        per_node = SLOTS // NODES
        for i, c in enumerate(clients):
            end = SLOTS if i == NODES - 1 else (i + 1) * per_node
            c.execute_command("CLUSTER ADDSLOTS", *range(i * per_node, end))
        for c in clients[1:]:
            c.execute_command("CLUSTER MEET", "127.0.0.1", services[0].port)
        deadline = time.monotonic() + READY_SECONDS
        while not all(c.cluster("INFO")["cluster_state"] == "ok" and int(c.cluster("INFO")["cluster_known_nodes"])
                      == NODES for c in clients):
            assert time.monotonic() < deadline, "the cluster did not become ready"
            time.sleep(0.05)
        for c in clients:
            c.close()
        client = RedisCluster(host="127.0.0.1", port=services[0].port)
        try:
            yield client
        finally:
            client.close()
    finally:
        for svc in services:
            svc.stop()


def test_ledger_on_a_real_cluster(cluster):
    keys = Keys("sdp")
    scopes = ["2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"]
    for scope in scopes + ["lifetime"]:  # all parts of a scope in one slot
        assert len({cluster.keyslot(keys.ledger(scope, part)) for part in SCOPE_PARTS}) == 1
    nodes = {cluster.get_node_from_key(keys.ledger(s, "totals")).name for s in scopes + ["lifetime"]}
    assert len(nodes) >= 2  # the scopes really live on different masters

    ledger = Ledger(cluster, BudgetCap(1.0, 1e-5, 1e-7), keys=keys,
                    lifetime_cap=BudgetCap(2.55, 1e-5, 1e-7, name="budget.lifetime"))
    for scope in scopes:
        assert ledger.charge(scope, "w.topk", [PureDpEvent(0.4)], payload=f"T-{scope}").accepted
        assert ledger.charge(scope, "w.topk", [PureDpEvent(0.4)], payload="again").payload == f"T-{scope}"
        held = ledger.reserve(scope, "w2.topk", [RangeBoundedEvent(0.05, count=10, delta=1e-7)])
        if scope == scopes[-1]:  # 4 × 0.4 + 3 × 0.3 = 2.5 in lifetime: a 0.5 hold cannot fit 2.55
            assert not held.accepted and held.reason == "lifetime_epsilon_cap"
            continue
        assert held.accepted
        settled = ledger.settle(scope, "w2.topk", "w2.topk", [RangeBoundedEvent(0.05, count=6, delta=1e-7)],
                                payload="S")
        assert settled.accepted and ledger.unpublished(scope) == ["w.topk", "w2.topk"]
    life = ledger.remaining("lifetime")
    want = compose([PureDpEvent(0.4)] * 4 + [RangeBoundedEvent(0.05, count=6, delta=1e-7)] * 3)
    assert life.spent.rho == pytest.approx(want.rho) and life.spent.basic_epsilon == pytest.approx(2.5)
    assert ledger.open_reservations("lifetime") == 0  # the refused hold of the last scope was never made
    for scope in scopes + ["lifetime"]:
        report = ledger.verify(scope)
        assert report.ok, (scope, report.problems)
    assert ledger.scopes() == sorted(scopes + ["lifetime"])
    assert [h.type for h in ledger.history(scopes[0])] == ["charge", "reserve", "settle"]
