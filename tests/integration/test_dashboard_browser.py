"""The dashboard in a real browser: headless Chromium loads the page, then the workers release windows.

The page must update by itself (Server-Sent Events) until the ranking shows the released keys; then the ⊥
marker, an alert's error bar (estimate and lower confidence bound), each key's rank line, the rising keys,
the age of the newest window and the budget headline and burn-down must be in the DOM (the layout at three
screen sizes: test_dashboard_layout.py). A screenshot of the whole page is saved under the test's tmp dir. Skips without a Chromium.
"""

from __future__ import annotations

import json

import pytest

from dashboard_helpers import HOT, DashboardProcess, Pipeline, pipeline_config, wait_for
from stream_dp.budget_text import epsilon_text

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_page_shows_releases_as_they_arrive(tmp_path, bootstrap_servers, redis_url, topic_name, chromium):
    config, events_topic, _ = pipeline_config(tmp_path, bootstrap_servers, redis_url, topic_name, "browser")
    dashboard = DashboardProcess(config, tmp_path / "dashboard.log")
    pipeline = Pipeline(config, events_topic, tmp_path)
    try:
        chromium.navigate(dashboard.url + "/")
        chromium.wait_for("document.getElementById('status')?.classList.contains('live')", 60,
                          "the page's live stream to connect")
        assert chromium.evaluate("document.querySelectorAll('#ranking tr.ranked').length") == 0
        pipeline.start(bootstrap_servers)  # releases arrive while the page is open

        last_hot = sorted(HOT[-1], key=HOT[-1].get, reverse=True)
        shown = chromium.wait_for(
            "(() => { const keys = [...document.querySelectorAll('#ranking tr.ranked td.key')].map(td => td.textContent);"
            f" return {json.dumps(last_hot[:1])}.every(k => keys.includes(k)) ? keys : null; }})()",
            120, "the ranking to show the last window's top key")
        assert set(shown) <= set(k for w in HOT for k in w), shown  # only keys the stream made popular
        wait_for(lambda: dashboard.get("/healthz")[1]["records"] >= 9, timeout=30, what="all releases on the dashboard")
        pipeline.assert_counted_exactly()
        chromium.wait_for("Number(document.body.dataset.records) >= 9", 60, "the page to show all releases")

        # ⊥: the last window's top-k stopped after its hot keys; the marker and its explanation are shown
        bottom = chromium.evaluate("document.querySelector('#ranking tr.bottom-marker')?.textContent")
        assert bottom and "⊥" in bottom and "stopped early" in bottom
        assert "not clearly above the rest" in chromium.evaluate("document.getElementById('trending-card').innerText")
        # rank-change markers next to the keys
        markers = chromium.evaluate("[...document.querySelectorAll('#ranking .change')].map(e => e.className)")
        assert markers and all(m.split()[1] in {"up", "down", "same", "new", "back"} for m in markers)
        # alerts: an error bar from the lower confidence bound to the estimate for each watched key the latest
        # alerts release reports above the threshold (the outcome is random: it may report none, which the page says)
        _, alerts = dashboard.get("/api/releases?type=alerts&limit=1")
        above = [i for i in alerts["releases"][0]["items"] if i.get("above") and i.get("estimate") is not None]
        # polled: the alerts card renders on its own after the records arrive, later on a loaded machine
        chromium.wait_for(f"document.getElementById('alerts').innerText.includes('{len(above)} of ')", 60,
                          "the alerts card to show the latest alerts release")
        if above:
            bar = chromium.evaluate(
                "(() => { const g = document.querySelector('#alerts-chart .error-bar'); if (!g) return null;"
                " const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right}; };"
                " const r = box(g.querySelector('.range'));"
                " return {key: g.dataset.key, left: r.left, right: r.right, dot: box(g.querySelector('.dot')),"
                " cap: !!g.querySelector('.cap'), threshold: !!g.querySelector('.threshold')}; })()")
            assert bar and bar["cap"] and bar["threshold"], bar
            # the bar runs from the lower bound to the estimate: left of it, or on it when the published bound is
            # the estimate itself (svt_bounds caps a bound at its gap: a rare answer every smaller count makes
            # unlikely -- then the range has no width)
            top = max(above, key=lambda i: i["estimate"])
            assert top.get("lower_bound") is not None, top  # every answer above the threshold has its bound
            width = top["estimate"] - max(0.0, top["lower_bound"])
            assert width >= 0, top
            if width == 0:
                assert bar["left"] == bar["right"], (bar, top)
            elif width > 0.01 * top["estimate"]:  # clearly wider than the page's 0.01 % resolution
                assert bar["left"] < bar["right"], (bar, top)
            assert bar["dot"]["left"] <= bar["right"] <= bar["dot"]["right"], bar  # the dot sits on the estimate
            assert bar["key"] == max(above, key=lambda i: i["estimate"])["key"], (bar, above)  # largest first
            assert chromium.evaluate("document.querySelectorAll('#alerts-chart .error-bar').length") == min(len(above), 10)
        else:
            assert not chromium.evaluate("!!document.querySelector('#alerts-chart')")
        # the budget at a glance: the current period's ε left, in the precision tail and `budget show` use
        _, budget = dashboard.get("/api/budget")
        current = budget["periods"][0]
        assert chromium.evaluate("document.getElementById('epsilon-left').textContent") == \
            epsilon_text(current["epsilon_remaining"])
        assert chromium.evaluate("document.querySelectorAll('#budget-chart line.charge').length") == \
            len(current["points"]) >= 9
        assert chromium.evaluate("!!document.querySelector('#budget-chart path.burn')")
        assert chromium.evaluate("document.querySelectorAll('#timeline-chart .cell.released, #timeline-chart .cell.empty,"
                                 " #timeline-chart .cell.budget_exhausted').length") >= 9
        # trend over time: a rank line per ranked key; rising keys; how old the newest window is
        assert chromium.evaluate("[...document.querySelectorAll('#ranking tr.ranked')]"
                                 ".every(tr => !!tr.querySelector('td.history svg.spark'))")
        _, trending = dashboard.get("/api/trending")
        rising = [x["key"] for x in trending["rankings"][0]["rising"]]
        shown_rising = chromium.evaluate("[...document.querySelectorAll('#rising .key')].map(e => e.dataset.key)")
        assert shown_rising == rising, (shown_rising, rising)
        assert "post-processing" in chromium.evaluate("document.getElementById('rising-card').innerText")
        fresh = chromium.evaluate("document.getElementById('fresh').innerText")  # the stream's time is ahead of now
        assert "newest window" in fresh and ("closed" in fresh or "ends in" in fresh), fresh
        # the latest sample's estimates (the sample itself is random: it may hold no key, which the page says)
        _, latest = dashboard.get("/api/releases?type=sample&limit=1")
        sampled = len(latest["releases"][0]["items"])
        bars = chromium.evaluate("document.querySelectorAll('#estimates-chart .estimate-bar').length")
        if sampled:
            assert bars == min(sampled, 10), (bars, sampled)
        else:
            assert "no keys in this release" in chromium.evaluate("document.getElementById('estimates').innerText")

        shot = chromium.screenshot(tmp_path / "dashboard.png")
        assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print(f"screenshot: {shot}")
    finally:
        pipeline.stop()
        assert dashboard.stop() == 0, "\n".join(dashboard.lines)
