"""Small things an operator meets first: a metrics port clash names ``metrics.port``; kafka-python's
"blocking the event loop" flood is dropped at its logger and nothing else is."""

from __future__ import annotations

import logging
import socket

import pytest
from prometheus_client import CollectorRegistry

from stream_dp.config import MetricsConfig
from stream_dp.metrics_http import MetricsPortError, serve_metrics


def test_a_taken_metrics_port_is_an_error_naming_the_setting():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortError) as info:
            serve_metrics(MetricsConfig(port=port, host="127.0.0.1"), CollectorRegistry(), role="release")
    msg = str(info.value)
    assert f"metrics.port {port}" in msg and "already in use" in msg and "STREAM_DP_METRICS__PORT" in msg
    assert "release worker" in msg


def test_metrics_port_zero_serves_nothing():
    assert serve_metrics(MetricsConfig(port=0), CollectorRegistry(), role="ingest") is False


def test_kafka_slow_task_warnings_are_dropped_other_kafka_warnings_kept(caplog):
    import stream_dp.connections  # noqa: F401 - installs the filter

    selector = logging.getLogger("kafka.net.selector")
    with caplog.at_level(logging.WARNING, logger="kafka"):
        selector.warning("Task %r ran for %.3fs (>%.3fs threshold). It is blocking the event loop -- likely a "
                         "tight sync loop inside a coroutine." % ("<Task x>", 0.25, 0.1))
        selector.warning("connection to node 1 lost")
    assert [r.getMessage() for r in caplog.records if r.name == "kafka.net.selector"] == ["connection to node 1 lost"]
