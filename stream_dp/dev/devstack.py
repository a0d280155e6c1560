"""The embedded dev stack: a local Kafka-protocol broker and a local redis-server on free ports.

For development, tests and the demo on machines with nothing installed; production runs Apache Kafka and
Redis (docker-compose.yml), and no other code depends on Tansu. This module composes the stack: which
components (Tansu, or Apache Kafka with one or more KRaft nodes; redis-server), started in which order,
stopped together. Each component's binary and arguments are :mod:`stream_dp.dev.components`'; one child
process on its port is a :class:`~stream_dp.dev.service.Service`; a stack that outlives the command
(``stream-dp devstack up``) is :mod:`stream_dp.dev.detached`'s.

Use it as a context manager::

    with DevStack() as stack:
        print(stack.bootstrap_servers, stack.redis_url)

Children started in the foreground are tied to this process (Linux parent-death signal plus an
``atexit`` hook), so an interrupted test run leaves no orphans.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from stream_dp.dev.components import (
    REDIS_DATABASES,
    find_redis_server,
    find_tansu,
    kafka_services,
    redis_service,
    tansu_service,
    wait_kafka_ready,
)
from stream_dp.dev.service import READY_TIMEOUT_SECONDS, DevStackError, PortTaken, Service
from stream_dp.processes import free_port

__all__ = [  # the stack, and what tests, benchmarks and tools import from here (the components and a service)
    "BROKERS",
    "READY_TIMEOUT_SECONDS",
    "REDIS_DATABASES",
    "DevStack",
    "DevStackError",
    "PortTaken",
    "Service",
    "find_redis_server",
    "find_tansu",
    "free_port",
]

log = logging.getLogger(__name__)

BROKERS = ("tansu", "kafka")  # the embedded Tansu binary, or Apache Kafka fetched with Maven (kafka_broker.py)


class DevStack:
    """A broker (Tansu, or ``broker="kafka"``: Apache Kafka with ``kafka_nodes`` KRaft nodes) and a
    redis-server on free loopback ports, with logs in a temp dir.

    ``kafka=False`` or ``redis=False`` skips a component. ``redis_persistence=True`` makes redis-server keep
    an append-only file in the stack's directory, so a restart of Redis keeps its data (outage tests).
    ``own_process_group=True`` puts each child in a process group of its own, so a Ctrl-C at the terminal
    reaches only the owner, which can then stop its workers before the broker and Redis (``stream-dp demo``).
    """

    def __init__(self, *, kafka: bool = True, redis: bool = True, workdir: str | os.PathLike[str] | None = None,
                 redis_persistence: bool = False, detached: bool = False, own_process_group: bool = False,
                 broker: str = "tansu", kafka_nodes: int = 1) -> None:
        if broker not in BROKERS:
            raise DevStackError(f"unknown broker {broker!r}: choose one of {', '.join(BROKERS)}")
        self._own_dir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="stream-dp-devstack-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.detached = detached
        self.broker_kind = broker if kafka else None
        self.brokers: list[Service] = []  # Apache Kafka: one per KRaft node; Tansu: the one broker
        self.redis: Service | None = None
        self.ready_seconds: dict[str, float] = {}
        if kafka and broker == "kafka":
            self.brokers = kafka_services(self.workdir, kafka_nodes, detached=detached,
                                          own_process_group=own_process_group)
        elif kafka:
            self.brokers = [tansu_service(self.workdir, detached=detached, own_process_group=own_process_group)]
        if redis:
            self.redis = redis_service(self.workdir, persistence=redis_persistence, detached=detached,
                                       own_process_group=own_process_group)

    @property
    def broker(self) -> Service | None:
        """The broker (the first node of an Apache Kafka cluster)."""
        return self.brokers[0] if self.brokers else None

    @property
    def bootstrap_servers(self) -> str:
        if not self.brokers:
            raise DevStackError("this dev stack has no broker")
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    @property
    def services(self) -> list[Service]:
        return [*self.brokers, *([self.redis] if self.redis is not None else [])]

    @property
    def redis_url(self) -> str:
        if self.redis is None:
            raise DevStackError("this dev stack has no redis-server")
        return f"redis://127.0.0.1:{self.redis.port}/0"

    def start(self) -> "DevStack":
        """Start every component and wait until each accepts connections."""
        if not self.detached:
            atexit.register(self.stop)
        try:
            if self.broker_kind == "kafka":  # launched together: a KRaft node listens once a quorum runs
                for svc in self.brokers:
                    svc.launch()
                for svc in self.brokers:
                    self.ready_seconds[svc.name] = svc.wait_listening()
                wait_kafka_ready(self.brokers)
            for svc in self.services:
                if svc.name not in self.ready_seconds:
                    self.ready_seconds[svc.name] = svc.start()
        except BaseException:
            self.stop()
            raise
        log.info("dev stack ready: broker %s, redis %s, logs in %s",
                 self.broker and self.bootstrap_servers, self.redis and self.redis_url, self.workdir)
        return self

    def stop(self) -> None:
        """Stop every component and reap it. Safe to call twice."""
        for svc in self.services:
            svc.stop()
        if not self.detached:
            atexit.unregister(self.stop)

    def cleanup(self) -> None:
        """Stop, then remove the temp dir if this stack created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "DevStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def describe(self) -> dict[str, Any]:
        return {
            "workdir": str(self.workdir),
            "broker": self.broker_kind,
            "bootstrap_servers": self.bootstrap_servers if self.brokers else None,
            "redis_url": self.redis_url if self.redis else None,
            "pids": {s.name: s.pid for s in self.services},
            "ready_seconds": self.ready_seconds,
        }
