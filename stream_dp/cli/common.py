"""What several subcommands share: the ``--config`` option, loading it with a readable error, and the
workers' Redis preflight."""

from __future__ import annotations

import argparse
import logging
import sys

from stream_dp import redact
from stream_dp.config import Config, ConfigError, load_config
from stream_dp.connections import UnsafeRedis, preflight_redis

log = logging.getLogger(__name__)


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` (default: config/stream-dp.toml; STREAM_DP_* environment overrides apply)."""
    parser.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")


def load_config_or_report(path: str | None) -> Config | None:
    """The validated config, or None after printing ``config error: …`` (naming the setting) to stderr."""
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        print(f"config error: {redact.redact_text(str(exc))}", file=sys.stderr)
        return None
    redact.install(cfg)  # from now on every log line masks this config's secrets
    return cfg


def redis_preflight_or_report(cfg: Config) -> bool:
    """Whether a worker may start on ``cfg.redis`` (:func:`~stream_dp.connections.preflight_redis`); logs
    why not (naming the setting) when it may not."""
    try:
        preflight_redis(cfg.redis)
    except (UnsafeRedis, ValueError) as exc:
        log.error("%s", exc)
        return False
    return True


def schedule_or_report(cfg: Config) -> bool:
    """Record (first start) or check the deployment's public release schedule (:mod:`stream_dp.schedule`);
    logs why not (naming ``windows.start`` / ``windows.size_seconds``) when the config disagrees with it."""
    from stream_dp.connections import redis_client
    from stream_dp.keys import Keys
    from stream_dp.schedule import ScheduleMismatch, establish

    import redis

    client = redis_client(cfg.redis)
    try:
        sched = establish(client, Keys(cfg.redis.key_prefix), cfg.windows)
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
