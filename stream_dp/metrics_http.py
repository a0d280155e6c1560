"""Serve a worker's /metrics on ``metrics.port``, with an error that names the setting when it cannot.

Two workers on one host with one config (``stream-dp ingest`` and ``stream-dp release``) both want
``metrics.port``; the second one gets a :class:`MetricsPortError` saying which setting to change instead of
a raw ``OSError`` traceback.
"""

from __future__ import annotations

import errno
import logging

from prometheus_client import CollectorRegistry, start_http_server

from stream_dp.config import MetricsConfig
from stream_dp.errors import StreamDPError

log = logging.getLogger(__name__)


class MetricsPortError(RuntimeError, StreamDPError):
    """``metrics.port`` cannot be bound (in use, or not allowed)."""


def serve_metrics(cfg: MetricsConfig, registry: CollectorRegistry, *, role: str) -> bool:
    """Serve ``registry`` on ``cfg.host:cfg.port`` (no-op when the port is 0); True when serving."""
    if not cfg.port:
        return False
    try:
        start_http_server(cfg.port, addr=cfg.host, registry=registry)
    except OSError as exc:
        why = "is already in use (another stream-dp worker on this host?)" if exc.errno == errno.EADDRINUSE \
            else f"cannot be bound ({exc.strerror or exc})"
        raise MetricsPortError(
            f"metrics.port {cfg.port} on {cfg.host} {why}: give the {role} worker its own port "
            f"(metrics.port in its config, or STREAM_DP_METRICS__PORT=<port>), or 0 to turn /metrics off") from None
    log.info("%s metrics on http://%s:%d/metrics", role, cfg.host, cfg.port)
    return True
