"""The shared worker runtime: the [release] section and its command-line overrides, logging configured once."""

from __future__ import annotations

import logging

import pytest

from stream_dp.config import ConfigError, config_from_mapping
from stream_dp.runtime import configure_logging, with_release_flags


def test_the_release_section_has_defaults_and_env_overrides():
    cfg = config_from_mapping({}, environ={})
    assert (cfg.release.poll_interval_seconds, cfg.release.claim_ttl_seconds) == (0.5, 30.0)
    cfg = config_from_mapping({"release": {"claim_ttl_seconds": 12}},
                              environ={"STREAM_DP_RELEASE__POLL_INTERVAL_SECONDS": "2.5"})
    assert (cfg.release.poll_interval_seconds, cfg.release.claim_ttl_seconds) == (2.5, 12.0)
    with pytest.raises(ConfigError, match=r"release.backoff_max_seconds must be >= release.backoff_initial"):
        config_from_mapping({"release": {"backoff_initial_seconds": 5, "backoff_max_seconds": 1}}, environ={})


def test_command_line_flags_override_the_release_section_and_are_validated():
    cfg = config_from_mapping({"release": {"poll_interval_seconds": 3.0, "claim_ttl_seconds": 40.0}}, environ={})
    assert with_release_flags(cfg, poll_seconds=None, claim_ttl_seconds=None) is cfg
    flagged = with_release_flags(cfg, poll_seconds=0.1, claim_ttl_seconds=None)
    assert (flagged.release.poll_interval_seconds, flagged.release.claim_ttl_seconds) == (0.1, 40.0)
    with pytest.raises(ConfigError, match="release.poll_interval_seconds must be > 0"):
        with_release_flags(cfg, poll_seconds=-1.0, claim_ttl_seconds=None)


def test_the_release_worker_takes_its_loop_settings_from_the_section():
    import redis

    from stream_dp.accounting.ledger import BudgetCap, Ledger
    from stream_dp.release.worker import ReleaseWorker

    client = redis.Redis(host="127.0.0.1", port=1)  # never contacted: the constructors only register scripts
    cfg = config_from_mapping({"release": {"poll_interval_seconds": 3.0, "claim_ttl_seconds": 40.0}}, environ={})
    ledger = Ledger(client, BudgetCap.from_config(cfg.budget))  # its caps feed the start check
    worker = ReleaseWorker(cfg, client, ledger, None, None, worker_id="w")  # type: ignore[arg-type]
    assert worker.poll_seconds == 3.0 and worker.claims.ttl_ms == 40_000
    worker = ReleaseWorker(cfg, client, ledger, None, None, worker_id="w", poll_seconds=0.2,  # type: ignore[arg-type]
                           claim_ttl_seconds=5.0)
    assert worker.poll_seconds == 0.2 and worker.claims.ttl_ms == 5_000


def test_logging_is_configured_once():
    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    try:
        configure_logging("DEBUG")
        handlers = list(root.handlers)
        configure_logging("WARNING")
        assert root.handlers == handlers and root.level == logging.WARNING
        assert logging.getLogger("kafka").level == logging.WARNING
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
        root.setLevel(level)
