"""Ingest refuses to count on when Redis lost the window state its committed offsets stand for.

Ingest commits a batch's Kafka offsets only after its counts are in Redis, so committed offsets say "these
events are counted". When Redis then loses its data (restarted without its AOF, ``FLUSHALL``, a failover to
an empty replica), the consumer group would carry on from those offsets and the windows not yet released
would silently lose every event counted before the loss. So ingest keeps an epoch marker in Redis
(``Keys.ingest_epoch``, :mod:`stream_dp.state_epochs`):

- **at start** (:func:`check`): the marker present → start. Missing, and the consumer group has no committed
  offset on the events topic → a new deployment (or group): write it. Missing with committed offsets → if
  ingest's watermarks are in Redis, the state is there (a deployment older than the marker): write it;
  otherwise refuse (:class:`~stream_dp.state_epochs.StateLost`, exit code 2) naming the recovery, unless the
  operator started ingest with ``--accept-state-loss``;
- **while running**: every watermark advance checks the marker in the same script
  (``store/lua/advance_watermark.lua``), so a ``FLUSHALL`` under a running worker stops it before the
  batch's offsets are committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from kafka.errors import KafkaError

from stream_dp.backoff import Backoff
from stream_dp.config import Config
from stream_dp.store.keys import Keys
from stream_dp.refusals import refusal_of
from stream_dp.replication import ReplicationPolicy
from stream_dp.state_epochs import Epoch, EpochMarker, StateLost

log = logging.getLogger(__name__)

ACCEPT = "--accept-state-loss"
LOST_MARK = "INGEST_STATE_LOST"  # how the advance script's refusal starts
CAUSES = "Redis restarted without its AOF, a FLUSHALL, or a failover to a replica that did not have it"


def recovery(cfg: Config) -> str:
    return (f"run `stream-dp budget rebuild --from-topic` (the release side), then start ingest once with "
            f"`{ACCEPT}`: it records a new epoch and continues from the committed offsets, and the windows not yet "
            "released keep only the events counted from then on (to count the lost events again instead, reset "
            f"the consumer group {cfg.kafka.ingest_group_id} to earlier offsets first; docs/privacy.md §4d)")


def lost(cfg: Config, what: str) -> StateLost:
    return StateLost(f"Redis lost ingest's window state: {what} ({CAUSES}). Counting on would silently drop the "
                     f"events already counted into windows not yet released. To recover, {recovery(cfg)}",
                     recovery=ACCEPT)


def committed_offsets(cfg: Config) -> dict[int, int]:
    """The ingest group's committed offsets on the events topic (partition → offset)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(**cfg.kafka.client_options())
    try:
        offsets = admin.list_group_offsets(cfg.kafka.ingest_group_id).get(cfg.kafka.ingest_group_id, {})
    finally:
        admin.close()
    return {tp.partition: int(meta.offset) for tp, meta in offsets.items()
            if tp.topic == cfg.kafka.events_topic and meta.offset is not None and meta.offset >= 0}


def check(cfg: Config, client: Any, *, accept_loss: bool = False, committed: dict[int, int] | None = None) -> Epoch:
    """The ingest epoch this worker counts under, by the rule of the module docstring (``committed``: the
    group's committed offsets, read from the broker when not given)."""
    keys = Keys(cfg.redis.key_prefix, cfg.windows.shards, cfg.windows.layout)
    # the marker is confirmed on redis.min_replicas_acked replicas before ingest counts under it: window writes
    # are (each batch WAITs before its offsets are committed), and a failover must not take the marker back
    # alone -- its absence would then read as a loss of the state it guards
    marker = EpochMarker(client, keys.ingest_epoch(), ReplicationPolicy.from_config(cfg.redis, client))
    epoch = marker.read()
    if epoch is not None:
        marker.confirm()
        return epoch
    committed = committed_offsets(cfg) if committed is None else committed
    group = cfg.kafka.ingest_group_id
    if not committed:
        return marker.create(f"first start: consumer group {group} has no committed offsets")
    if client.exists(keys.watermarks()):
        return marker.create("adopted: Redis holds ingest's watermarks")
    where = ", ".join(f"{p}@{o}" for p, o in sorted(committed.items()))
    if accept_loss:
        log.warning("continuing after Redis lost ingest's state (%s): consumer group %s resumes from its committed "
                    "offsets (%s); the events counted before the loss into windows not yet released are gone",
                    ACCEPT, group, where)
        return marker.create(f"state loss accepted ({ACCEPT}): resumed from the committed offsets {where}")
    raise lost(cfg, f"the consumer group {group} has committed offsets on {cfg.kafka.events_topic} ({where}), but "
                    f"Redis holds neither ingest's epoch ({keys.ingest_epoch()}) nor its watermarks")


def lost_while_running(cfg: Config, message: str) -> StateLost | None:
    """The refusal for an applier failure that says the marker vanished under the running worker, else None."""
    if LOST_MARK not in message:
        return None
    return lost(cfg, f"the ingest epoch marker vanished while this worker ran ({message.split(LOST_MARK, 1)[1].strip()})")


def until_done(step: Callable[[], object], cfg: Config, backoff: Backoff, stop: threading.Event) -> bool:
    """Run the worker's start ``step`` until it succeeds (True) or ``stop`` is set (False): Redis or the broker
    not answering is retried with ``backoff``; a failure retrying cannot heal (wrong credentials, lost state:
    :func:`~stream_dp.refusals.refusal_of`) is raised as its :class:`~stream_dp.refusals.Refusal`."""
    while not stop.is_set():
        try:
            step()
        except (redis.RedisError, KafkaError, OSError) as exc:
            refusal = refusal_of(exc, redis_url=cfg.redis.url, bootstrap=cfg.kafka.bootstrap_servers)
            if refusal is not None:
                raise refusal from None
            delay = backoff.next_delay()
            log.warning("ingest start check failed (%s: %s): Redis or the broker unavailable; retrying in %.2fs "
                        "(attempt %d)", type(exc).__name__, exc, delay, backoff.failures + 1)
            stop.wait(delay)
            continue
        backoff.reset()
        return True
    return False
