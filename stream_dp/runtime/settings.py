"""A process's config from the command line: ``--config``, loaded or refused in one line naming the setting,
a running dev stack's addresses when none are configured, and the release worker's flag overrides."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from stream_dp import redact
from stream_dp.config import Config, ConfigError, load_config

log = logging.getLogger(__name__)


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` (default: config/stream-dp.toml; STREAM_DP_* environment overrides apply)."""
    parser.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")


def load_config_or_report(path: str | None) -> Config | None:
    """The validated config, or None after printing ``config error: …`` (naming the setting) to stderr.

    Empty broker / Redis addresses are taken from a running ``stream-dp devstack`` (:func:`with_devstack`).
    From now on every log line masks this config's secrets."""
    try:
        cfg = with_devstack(load_config(path))
    except ConfigError as exc:
        print(f"config error: {redact.redact_text(str(exc))}", file=sys.stderr)
        return None
    redact.install(cfg)
    return cfg


def with_devstack(cfg: Config) -> Config:
    """``cfg`` with ``kafka.bootstrap_servers`` / ``redis.url`` filled in from a running ``stream-dp devstack``
    when they are empty (logged, so nobody wonders where a worker connected). Unchanged otherwise.

    A configured deployment (both addresses set) never loads :mod:`stream_dp.dev.detached`; otherwise only its
    state file is read, nothing is started."""
    if cfg.kafka.bootstrap_servers and cfg.redis.url:
        return cfg
    from stream_dp.dev.detached import running_addresses, state_path

    found = running_addresses()
    if found is None:
        return cfg
    kafka, redis_cfg = cfg.kafka, cfg.redis
    used = []
    if not kafka.bootstrap_servers and found["bootstrap_servers"]:
        kafka = dataclasses.replace(kafka, bootstrap_servers=found["bootstrap_servers"])
        used.append(f"kafka.bootstrap_servers = {found['bootstrap_servers']}")
    if not redis_cfg.url and found["redis_url"]:
        redis_cfg = dataclasses.replace(redis_cfg, url=found["redis_url"])
        used.append(f"redis.url = {found['redis_url']}")
    if used:
        log.info("not configured, so using the running dev stack (stream-dp devstack up, %s): %s",
                 state_path(), "; ".join(used))
    return cfg.replace(kafka=kafka, redis=redis_cfg)


def with_release_flags(cfg: Config, *, poll_seconds: float | None, claim_ttl_seconds: float | None) -> Config:
    """``cfg`` with the command line's ``--poll-seconds`` / ``--claim-ttl-seconds`` over ``[release]``,
    validated like the file's values (an error names the setting)."""
    from stream_dp.config import with_settings

    changes = {name: value for name, value in (("poll_interval_seconds", poll_seconds),
                                               ("claim_ttl_seconds", claim_ttl_seconds)) if value is not None}
    if not changes:
        return cfg
    return with_settings(cfg, "release", **changes)
