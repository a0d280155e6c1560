"""Clients for the real components, built from the config: Redis, Kafka producer/consumer/admin.

Workers and tools build every client here so that security settings (SASL/TLS, Redis auth/TLS) apply
everywhere the same way.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from kafka import KafkaConsumer, KafkaProducer

from stream_dp import kafka_sockets
from stream_dp.config import KafkaConfig, RedisConfig
from stream_dp.errors import StreamDPError
from stream_dp.kafka_options import NO_AUTO_CREATE, forbid_auto_create

log = logging.getLogger(__name__)

kafka_sockets.install()  # every client built here closes its sockets on kafka-python 3.0's leaking paths


class _DropSlowTaskWarnings(logging.Filter):
    """kafka-python 3 warns "Task … blocking the event loop" from its IO thread whenever one step of its
    internal loop took > 0.1 s — routine when the process is busy (a replay producing flat out, the ingest
    loop decoding); floods of them bury the lines an operator needs and say nothing actionable. Dropped
    at that logger only; every other kafka-python warning still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "blocking the event loop" not in str(record.msg)


_SLOW_TASK_FILTER = _DropSlowTaskWarnings()
logging.getLogger("kafka.net.selector").addFilter(_SLOW_TASK_FILTER)


def redis_client(cfg: RedisConfig, **overrides: Any) -> redis.Redis:
    """A redis-py client for ``cfg.url`` with the configured auth, TLS and timeouts.

    With ``redis.cluster = true`` it is redis-py's :class:`~redis.cluster.RedisCluster` (``cfg.url`` names any
    node; the others are discovered), with the same options. Every key the service writes carries a hash
    tag (:mod:`stream_dp.store.keys`), so each Lua script and each transaction stays in one slot.
    """
    if not cfg.url:
        raise ValueError("redis.url is empty: configure it, or start the embedded dev stack first")
    opts: dict[str, Any] = {"socket_timeout": cfg.socket_timeout_seconds,
                            "socket_connect_timeout": cfg.socket_timeout_seconds}
    if cfg.username:
        opts["username"] = cfg.username
    if cfg.password:
        opts["password"] = cfg.password.get_secret_value()
    if cfg.ssl_ca_certs:
        opts["ssl_ca_certs"] = cfg.ssl_ca_certs
    opts.update(overrides)
    if cfg.cluster:
        return redis.RedisCluster.from_url(cfg.url, **opts)  # type: ignore[return-value]
    return redis.Redis.from_url(cfg.url, **opts)


def _masters(client: Any) -> list[tuple[str, Any]]:
    """``(name, client)`` of every master: the cluster's primaries, or the one server."""
    if isinstance(client, redis.RedisCluster):
        return [(node.name, client.get_redis_connection(node)) for node in client.get_primaries()]
    return [("", client)]


class UnsafeRedis(RuntimeError, StreamDPError):
    """The Redis server may evict keys, and ``redis.allow_eviction`` is false."""


def require_noeviction(client: redis.Redis, cfg: RedisConfig) -> str:
    """Refuse a Redis that may evict keys; returns the policy seen (``""`` when it could not be read).

    Under ``maxmemory`` with any policy but ``noeviction``, Redis drops keys when memory runs short: a
    window's bounding log (users could then contribute beyond Δ keys), its counts, the ledger's charges
    (budget spent would be forgotten) or a stored release (it could be recomputed with fresh noise). None
    of that would be visible. With ``noeviction`` a full Redis refuses writes instead, which the workers
    treat as an outage. Raises :class:`UnsafeRedis` unless ``cfg.allow_eviction`` (then it only warns).

    On a cluster every master is checked (each holds its own slots' bounding logs and charges); the first
    policy that is not ``noeviction`` decides, and the error names that master.
    """
    try:
        masters = _masters(client)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("Redis unreachable at startup (%s: %s); its maxmemory-policy was not checked",
                    type(exc).__name__, exc)
        return ""
    seen = ""
    for name, node in masters:
        policy = _eviction_policy(node)
        if policy in ("", "noeviction"):
            seen = seen or policy
            continue
        return _refuse_eviction(cfg, policy, name)
    return seen


def _eviction_policy(node: redis.Redis) -> str:
    """One server's maxmemory-policy ("" when it cannot be read; logged)."""
    try:
        reply = node.config_get("maxmemory-policy")
    except redis.ResponseError as exc:  # CONFIG disabled or renamed (common on managed services)
        log.warning("could not read Redis maxmemory-policy (%s); make sure it is noeviction", exc)
        return ""
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("Redis unreachable at startup (%s: %s); its maxmemory-policy was not checked",
                    type(exc).__name__, exc)
        return ""
    return str(reply.get("maxmemory-policy", ""))  # redis-py decodes CONFIG GET replies to str


def _refuse_eviction(cfg: RedisConfig, policy: str, master: str) -> str:
    where = f" on cluster master {master}" if master else ""
    msg = (f"Redis maxmemory-policy is {policy!r}{where}: when memory runs short Redis may evict bounding logs, "
           "counts, ledger charges or stored releases, which would silently break the privacy guarantee. "
           "Set maxmemory-policy noeviction, or redis.allow_eviction = true to run anyway")
    if cfg.allow_eviction:
        log.warning("%s (redis.allow_eviction is true)", msg)
        return policy
    raise UnsafeRedis(msg)


def preflight_redis(cfg: RedisConfig) -> None:
    """What a worker checks before it starts: a Redis URL is configured and the server does not evict
    keys (:func:`require_noeviction`). Raises ValueError or :class:`UnsafeRedis` naming the setting."""
    try:
        client = redis_client(cfg)
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException) as exc:
        # the cluster client reads the slot map when it is built; a plain client connects lazily
        log.warning("Redis unreachable at startup (%s: %s); its maxmemory-policy was not checked",
                    type(exc).__name__, exc)
        return
    try:
        require_noeviction(client, cfg)
    finally:
        client.close()


def _require_bootstrap(cfg: KafkaConfig) -> None:
    if not cfg.bootstrap_servers:
        raise ValueError("kafka.bootstrap_servers is empty: configure it, or start the embedded dev stack first")


def kafka_producer(cfg: KafkaConfig, **overrides: Any) -> KafkaProducer:
    """A producer with acks=all (and idempotence where the caller asks for it); it never auto-creates a topic."""
    _require_bootstrap(cfg)
    opts: dict[str, Any] = {**cfg.client_options(), **NO_AUTO_CREATE, "acks": "all", "linger_ms": 5}
    opts.update(overrides)
    return forbid_auto_create(KafkaProducer(**opts))


def confluent_client_settings(cfg: KafkaConfig) -> dict[str, Any]:
    """librdkafka settings for the bootstrap servers, client id and security (SASL / TLS) of ``cfg``: the
    same connection as :func:`kafka_producer` / :func:`kafka_consumer` make (the confluent-kafka clients:
    the ingest consumer, the release producer)."""
    _require_bootstrap(cfg)
    conf: dict[str, Any] = {"bootstrap.servers": cfg.bootstrap_servers, "client.id": cfg.client_id,
                            "security.protocol": cfg.security_protocol,
                            "allow.auto.create.topics": False}  # as NO_AUTO_CREATE (librdkafka producers: true)
    if cfg.sasl_mechanism:
        conf.update({"sasl.mechanism": cfg.sasl_mechanism, "sasl.username": cfg.sasl_username,
                     "sasl.password": cfg.sasl_password.get_secret_value()})
    for name, key in (("ssl_cafile", "ssl.ca.location"), ("ssl_certfile", "ssl.certificate.location"),
                      ("ssl_keyfile", "ssl.key.location")):
        if getattr(cfg, name):
            conf[key] = getattr(cfg, name)
    return conf


def kafka_consumer(cfg: KafkaConfig, *topics: str, consumer_class: type[KafkaConsumer] = KafkaConsumer,
                   **overrides: Any) -> KafkaConsumer:
    """A consumer (``consumer_class``: kafka-python's or a subclass) with manual commits and the group timings
    from the config; it never auto-creates a topic."""
    _require_bootstrap(cfg)
    opts: dict[str, Any] = {
        **cfg.client_options(),
        **NO_AUTO_CREATE,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": cfg.session_timeout_ms,
        "heartbeat_interval_ms": cfg.heartbeat_interval_ms,
        "max_poll_records": cfg.max_poll_records,
    }
    opts.update(overrides)
    return forbid_auto_create(consumer_class(*topics, **opts))
