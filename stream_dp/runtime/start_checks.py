"""The start checks a worker passes before it touches data, each logging one line naming the setting when it
refuses: the budget plan, Redis credentials and eviction policy, the public release schedule, the topic
contract of the worker's topics, and the /metrics port."""

from __future__ import annotations

import logging

from stream_dp.config import Config, ConfigError

log = logging.getLogger(__name__)


def redis_credentials_or_report(cfg: Config) -> bool:
    """False (after one line naming ``redis.password`` / ``redis.username``) when Redis refuses this process's
    credentials: retrying cannot heal that. A Redis that does not answer yet is no reason to refuse: the
    workers retry it with backoff."""
    import redis

    from stream_dp.connections import redis_client

    try:
        client = redis_client(cfg.redis)
    except ValueError:  # no redis.url: redis_preflight_or_report says so
        return True
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:  # a cluster client reads its slots here
        return _credentials_accepted(cfg, exc)
    try:
        client.ping()
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        return _credentials_accepted(cfg, exc)
    finally:
        client.close()
    return True


def _credentials_accepted(cfg: Config, exc: Exception) -> bool:
    from stream_dp.refusals import redis_refusal

    refusal = redis_refusal(exc)
    if refusal is not None:
        log.error("%s", refusal)
        return False
    log.warning("Redis at %s does not answer yet (%s); the worker retries until it does", cfg.redis.url,
                type(exc).__name__)
    return True


def redis_preflight_or_report(cfg: Config) -> bool:
    """Whether a worker may start on ``cfg.redis`` (:func:`~stream_dp.connections.preflight_redis`); logs
    why not (naming the setting) when it may not."""
    from stream_dp.connections import UnsafeRedis, preflight_redis

    try:
        preflight_redis(cfg.redis)
    except (UnsafeRedis, ValueError) as exc:
        log.error("%s", exc)
        return False
    return True


def schedule_or_report(cfg: Config) -> bool:
    """Record (first start) or check the deployment's public release schedule (:mod:`stream_dp.schedule`);
    logs why not (naming ``windows.start`` / ``windows.size_seconds``) when the config disagrees with it."""
    import redis

    from stream_dp.connections import redis_client
    from stream_dp.store.keys import Keys
    from stream_dp.schedule import ScheduleMismatch, establish

    client = redis_client(cfg.redis)
    try:
        sched = establish(client, Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout), cfg.windows)
    except ScheduleMismatch as exc:
        log.error("config error: %s", exc)
        return False
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("release schedule not checked yet (Redis unreachable: %s); checked once Redis answers", exc)
        return True
    finally:
        client.close()
    log.info("release schedule: every %d s window from %d (windows.start), empty or not", sched.size, sched.start)
    return True


def budget_plan_or_report(cfg: Config) -> bool:
    """Whether a worker may start under ``cfg``'s budget: every worst-case window of a period fits the cap,
    or ``budget.allow_partial_period`` accepts that it does not (:mod:`stream_dp.release.budget_plan`);
    logs why not (naming the settings) when it may not."""
    from stream_dp.release.budget_plan import require_full_period

    try:
        require_full_period(cfg)
    except ConfigError as exc:
        log.error("%s", exc)
        return False
    return True


def topics_preflight_or_report(cfg: Config, roles: tuple[str, ...]) -> bool:
    """Whether the topics of ``roles`` keep the topic contract (:func:`stream_dp.topics.preflight`); logs the
    one line naming the topic, the config and the fix when one does not."""
    from stream_dp.topics import TopicContractError, preflight

    try:
        preflight(cfg.kafka, roles)
    except (TopicContractError, ValueError) as exc:
        log.error("%s", exc)
        return False
    return True


#: The topics each worker reads or writes, checked against the topic contract before it starts.
WORKER_TOPICS = {"ingest": ("events", "dead-letter"), "release": ("releases",)}


def worker_preflight(cfg: Config, role: str | None = None) -> bool:
    """The start checks every worker passes before it touches data: budget plan, Redis credentials, Redis,
    release schedule (with the window layout it records: ``windows.layout``), and the topic contract of the
    topics ``role`` uses (:data:`WORKER_TOPICS`)."""
    return (budget_plan_or_report(cfg) and redis_credentials_or_report(cfg)
            and redis_preflight_or_report(cfg) and schedule_or_report(cfg)
            and (role not in WORKER_TOPICS or topics_preflight_or_report(cfg, WORKER_TOPICS[role])))


def serve_metrics_or_report(cfg: Config, registry: object, *, role: str) -> bool:
    """Serve /metrics on ``metrics.port`` (0 = off); False after logging why when the port is taken."""
    from stream_dp.metrics_http import MetricsPortError, serve_metrics

    try:
        serve_metrics(cfg.metrics, registry, role=role)  # type: ignore[arg-type]
    except MetricsPortError as exc:
        log.error("%s", exc)
        return False
    return True
