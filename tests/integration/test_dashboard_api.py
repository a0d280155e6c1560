"""`stream-dp dashboard` against the real broker, fed by the real ingest and release workers.

The dashboard and a live-stream reader start first; then events flow through both workers. The API must
show exactly the records on the releases topic (checked, once each, newest first), the latest ranking
with rank changes against the window before, the budget as the records' budget blocks say, and every new
record on the Server-Sent Events stream.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dashboard_helpers import (HOT, SIZE, T0, TYPES, WINDOWS, DashboardProcess, EventStream, Pipeline,
                               pipeline_config, wait_for)
from release_processes import by_release_id, read_topic
from release_records import produce, record
from stream_dp.release.records import validate_record

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_api_serves_what_the_release_worker_published(tmp_path, bootstrap_servers, redis_url, topic_name):
    config, events_topic, releases_topic = pipeline_config(tmp_path, bootstrap_servers, redis_url, topic_name, "dash")
    dashboard = DashboardProcess(config, tmp_path / "dashboard.log")
    pipeline = Pipeline(config, events_topic, tmp_path)
    stream = None
    try:
        assert dashboard.get("/healthz")[0] in (200, 503)
        stream = EventStream(dashboard.url + "/api/stream")
        assert stream.content_type.startswith("text/event-stream")
        wait_for(lambda: any(e == "hello" for e, _ in stream.events), timeout=10, what="the stream's hello")
        pipeline.start(bootstrap_servers)
        expected = WINDOWS * len(TYPES)
        wait_for(lambda: dashboard.get("/healthz")[1]["records"] >= expected, timeout=120,
                   what=f"{expected} releases on the dashboard")
        pipeline.stop()
        pipeline.assert_counted_exactly()
        published = {rid: json.loads(v[0]) for rid, v in by_release_id(
            read_topic(bootstrap_servers, releases_topic, expect_at_least=expected)).items()}

        # /healthz
        status, health = dashboard.get("/healthz")
        assert status == 200 and health["status"] == "ok" and health["rejected"] == 0
        assert health["records"] == len(published) and health["topic"] == releases_topic

        # /api/releases: every published record once, checked, newest first
        status, body = dashboard.get("/api/releases?limit=1000")
        assert status == 200 and body["count"] == len(published)
        got = body["releases"]
        assert {r["release_id"]: r for r in got} == published
        for rec in got:
            validate_record(rec)
        starts = [r["window"]["start"] for r in got]
        assert starts == sorted(starts, reverse=True)
        ours = [T0 + w * SIZE for w in range(WINDOWS)]
        assert set(ours) <= set(starts)
        # filters and validation
        _, topk = dashboard.get("/api/releases?type=topk")
        assert topk["releases"] and {r["type"] for r in topk["releases"]} == {"topk"}
        _, since = dashboard.get(f"/api/releases?since={ours[-1]}")
        assert since["releases"] and min(r["window"]["start"] for r in since["releases"]) >= ours[-1]
        assert dashboard.get("/api/releases?limit=2")[1]["count"] == 2
        for bad, name in (("type=nope", "type"), ("since=yesterday", "since"), ("limit=0", "limit"),
                          ("limit=abc", "limit")):
            status, err = dashboard.get(f"/api/releases?{bad}")
            assert status == 400 and err["error"].startswith(f"{name} must be"), (bad, err)

        # a republished release and a record of an unknown schema version: neither shows up; the latter is counted
        some = next(iter(published.values()))
        produce(bootstrap_servers, releases_topic, [some, record(900, schema_version=2)])
        wait_for(lambda: dashboard.get("/healthz")[1]["rejected"] == 1, timeout=30, what="the newer record to be refused")
        status, health = dashboard.get("/healthz")
        assert status == 200 and "schema_version 2" in health["last_rejection"]
        assert dashboard.get("/api/releases?limit=1000")[1]["count"] == len(published)

        # /api/trending: the latest top-k with rank changes against the window before
        _, trending = dashboard.get("/api/trending")
        topk_records = sorted((r for r in published.values() if r["type"] == "topk"), key=lambda r: r["window"]["start"])
        latest, before = topk_records[-1], [r for r in topk_records[:-1] if r["status"] == "released"]
        (ranking,) = trending["rankings"]
        assert ranking["type"] == "topk" and ranking["release_id"] == latest["release_id"]
        assert trending["window"] == latest["window"]
        assert [i["key"] for i in ranking["items"]] == [i["key"] for i in latest["items"]]
        assert ranking["hit_bottom"] == latest["hit_bottom"]
        previous = {i["key"]: i["rank"] for i in before[-1]["items"]}
        ever = {i["key"] for r in before for i in r["items"]}
        for item in ranking["items"]:
            prev = previous.get(item["key"])
            assert item["previous_rank"] == prev
            assert item["change"] == (None if prev is None else prev - item["rank"])
            assert item["new"] == (item["key"] not in ever)
        if latest["window"]["start"] == T0 + (WINDOWS - 1) * SIZE:  # the stream's own last window
            # the hot keys of the last window were released, most popular first, then ⊥
            assert [i["key"] for i in ranking["items"]][:1] == [max(HOT[-1], key=HOT[-1].get)]
            assert ranking["hit_bottom"] is True

        # /api/budget: the period's state is its latest budget block; one point per record
        _, budget = dashboard.get("/api/budget")
        scopes = {r["budget"]["scope"] for r in published.values()}
        assert {p["scope"] for p in budget["periods"]} == scopes
        for period in budget["periods"]:
            mine = [r for r in published.values() if r["budget"]["scope"] == period["scope"]]
            assert period["releases"] == len(mine) == len(period["points"])
            assert period["epsilon_spent"] == max(r["budget"]["epsilon_spent"] for r in mine)
            assert period["epsilon_cap"] == pytest.approx(20.0)
            remaining = [p["epsilon_remaining"] for p in period["points"]]
            assert remaining == sorted(remaining, reverse=True)  # a burn-down
            assert period["budget_exhausted"] == sum(r["status"] == "budget_exhausted" for r in mine)

        # /api/timeline: every window with each type's status
        _, timeline = dashboard.get("/api/timeline")
        windows = {w["start"]: w for w in timeline["windows"]}
        for start in ours:
            assert set(windows[start]["types"]) == set(TYPES)

        # /api/stream: each record arrived live, once
        wait_for(lambda: len([e for e in stream.events if e[0] == "release"]) >= len(published), timeout=10,
                   what="every release on the live stream")
        live = [json.loads(d)["release_id"] for e, d in stream.events if e == "release"]
        assert sorted(live) == sorted(published)
    finally:
        if stream is not None:
            stream.close()
        pipeline.stop()
        assert dashboard.stop() == 0, "\n".join(dashboard.lines)


def test_a_stop_signal_right_at_the_ready_line_is_a_clean_stop(bootstrap_servers, topic_name, tmp_path):
    """A real dashboard process SIGINTs itself the moment it reports ready -- a Ctrl-C racing the start-up:
    it stops with exit code 0, no traceback. (uvicorn took the signals over only inside ``run``; a signal
    before that met the default or asyncio's handler: a KeyboardInterrupt traceback, or a cancelled start-up
    while the server went on serving.)"""
    script = (
        "import os, signal, sys\n"
        "from stream_dp.config import config_from_mapping\n"
        "from stream_dp.dashboard.server import serve\n"
        f"cfg = config_from_mapping({{'kafka': {{'bootstrap_servers': {bootstrap_servers!r}}}, "
        "'dashboard': {'port': 0}}, environ={})\n"
        f"sys.exit(serve(cfg, topic={topic_name('releases')!r}, "
        "on_ready=lambda url: os.kill(os.getpid(), signal.SIGINT)))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
