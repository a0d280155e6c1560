"""`stream-dp dashboard` through a broker outage: ``/healthz`` must say so, and recover by itself.

kafka-python's polls return nothing while no broker answers, exactly as when nothing is published; the
dashboard used to report ``ok`` for as long as the broker was gone.
"""

from __future__ import annotations

import pytest

from dashboard_helpers import DashboardProcess, pipeline_config, wait_for
from stream_dp.broker_reach import NO_BROKER

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_healthz_reports_a_stopped_broker_then_recovers(tmp_path, own_stack, topic_name):
    config, _, releases_topic = pipeline_config(tmp_path, own_stack.bootstrap_servers, own_stack.redis_url,
                                                topic_name, "dash")
    dashboard = DashboardProcess(config, tmp_path / "dashboard.log")
    try:
        wait_for(lambda: dashboard.get("/healthz")[0] == 200, timeout=30, what="the dashboard connected")
        own_stack.broker.stop()
        wait_for(lambda: dashboard.get("/healthz")[0] == 503, timeout=30, interval=0.2,
                 what="/healthz reporting the outage")
        status, health = dashboard.get("/healthz")
        assert health["status"] == "unavailable" and health["error"] == NO_BROKER
        assert health["topic"] == releases_topic
        own_stack.broker.start()
        wait_for(lambda: dashboard.get("/healthz")[0] == 200, timeout=60, interval=0.2,
                 what="/healthz ok again once the broker is back")
        status, health = dashboard.get("/healthz")
        assert health["status"] == "ok" and health["error"] is None
    finally:
        code = dashboard.stop()
    assert code == 0
