"""Apache Kafka nodes as dev-stack services (:class:`~stream_dp.devstack.Service`): fetched, formatted, ready.

The mechanics of fetching and configuring a node live in :mod:`stream_dp.kafka_broker`; this module only
turns its nodes into the dev stack's restartable child processes.
"""

from __future__ import annotations

import time
from pathlib import Path

from stream_dp.devstack import DevStackError, Service
from stream_dp.kafka_broker import (READY_TIMEOUT_SECONDS, KafkaUnavailable, ensure_libs, format_storage,
                                    plan_cluster, wait_ready)


def kafka_services(workdir: Path, nodes: int, *, detached: bool = False, own_process_group: bool = False,
                   overrides: dict[str, str] | None = None) -> list[Service]:
    """One :class:`Service` per KRaft node of a new local cluster (jars fetched and storage formatted first).
    The first is named ``broker`` (the dev stack's one broker); the others ``broker-<id>``."""
    try:
        libs = ensure_libs()
        planned = plan_cluster(workdir / "kafka", nodes)
        format_storage(planned, libs, overrides)
    except KafkaUnavailable as exc:
        raise DevStackError(str(exc)) from None
    return [Service("broker" if n.node_id == 1 else f"broker-{n.node_id}", n.argv(libs), n.port, n.log_path,
                    detached=detached, own_process_group=own_process_group, ready_timeout=READY_TIMEOUT_SECONDS)
            for n in planned]


def wait_cluster_ready(brokers: list[Service]) -> None:
    """Wait until every node is registered with the cluster (metadata lists them all), with a deadline."""
    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
    try:
        wait_ready(bootstrap, len(brokers), deadline=time.monotonic() + READY_TIMEOUT_SECONDS,
                   alive=lambda: all(b.running for b in brokers), describe="Apache Kafka")
    except KafkaUnavailable as exc:
        tails = "; ".join(f"log {b.log_path}" for b in brokers)
        raise DevStackError(f"{exc} ({tails})") from None
