"""`stream-dp demo` end to end: real broker, Redis and worker processes; bounded runs and Ctrl-C."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

try:
    from demo_helpers import DemoProcess, assert_nothing_left, wait_for
except ImportError:  # tests/ became a package
    from .demo_helpers import DemoProcess, assert_nothing_left, wait_for  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_bounded_demo_prints_releases_and_stops_cleanly(tmp_path):
    demo = DemoProcess(["--windows", "2", "--duration", "240", "--days", "4", "--metrics-port", "0",
                        "--dashboard-port", "0"],
                       tmp_path / "work")
    try:
        code = demo.wait(timeout=300)
    finally:
        if demo.proc.poll() is None:
            demo.kill_all()
    out = demo.output
    assert code == 0, out[-4000:]
    assert demo.windows_printed() >= 2
    # the defaults: the release-choice table's histogram, over the generated catalogue -- a full list with counts
    assert "· histogram · released" in out and "· topk ·" not in out, "the histogram only"
    assert re.search(r"^domain     the generated catalogue's 3,000 movie titles", out, flags=re.M)
    assert re.search(r"1,000 keys with a noisy count, all domain keys \(capped at max_keys\); intervals ±\d+ at 95%",
                     out), "a full list"
    assert re.search(r"^\s+rank  key\s+count  ci_low  ci_high$", out, flags=re.M), "counts next to the keys"
    assert re.search(r"cost ε \d+\.\d\d δ \S+ · budget \[█*░*\] 2026-11-0\d: ε \d+\.\d\d spent of \d+\.\d\d, "
                     r"\d+\.\d\d left", out), "cost and budget lines, as budget_text writes them"
    assert "/metrics" in out and "stream-dp.demo.toml" in out
    assert re.search(r"stopped\. .*; \d+ windows? released; \d+ releases? printed", out)
    assert_nothing_left(demo)
    logs = {name: (tmp_path / "work" / f"{name}.log").read_text() for name in ("ingest", "release")}
    assert "stop requested" in logs["ingest"] and "stop requested" in logs["release"], "graceful worker stops"


def test_ctrl_c_stops_everything_in_order(tmp_path):
    demo = DemoProcess(["--metrics-port", "0", "--dashboard-port", "0", "--days", "28"], tmp_path / "work")
    try:
        demo.wait_for(lambda out: "· histogram ·" in out, timeout=180, what="a first release")
        check_dashboard(demo.output)
        demo.ctrl_c()
        code = demo.wait(timeout=90)
    finally:
        if demo.proc.poll() is None:
            demo.kill_all()
    out = demo.output
    assert code == 0, out[-4000:]
    assert "stopping: replay, workers, then the broker and Redis" in out and "stopped." in out
    assert_nothing_left(demo)
    logs = {name: (tmp_path / "work" / f"{name}.log").read_text() for name in ("ingest", "release")}
    # SIGTERM from the demo, not SIGKILL: both workers logged their orderly stop
    assert "stop requested" in logs["ingest"] and "stop requested" in logs["release"]


def check_dashboard(output: str) -> None:
    """The demo serves the dashboard and prints its URL; the page and API show the releases printed."""
    match = re.search(r"^dashboard  (http://127\.0\.0\.1:\d+/)  \(pid \d+", output, flags=re.M)
    assert match, output[:3000]
    url = match.group(1)
    def trending() -> dict:
        with urllib.request.urlopen(url + "api/trending", timeout=10) as resp:
            body = json.loads(resp.read())
        return body if body["rankings"] else {}

    ranking = wait_for(trending, timeout=30, interval=0.2, what="the dashboard's first ranking")["rankings"][0]
    assert ranking["type"] == "histogram" and ranking["items"][0]["value"] is not None  # counts next to the keys
    with urllib.request.urlopen(url + "healthz", timeout=10) as resp:
        assert resp.status == 200 and json.loads(resp.read())["status"] == "ok"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert "Trending now" in resp.read().decode()
