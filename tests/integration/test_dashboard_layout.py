"""The dashboard's layout on three screen sizes, measured in a real browser (headless Chromium).

A month of real release records (``data/dashboard_month.jsonl.gz``: 27 daily windows of the generated
MovieLens-style stream, each with topk, alerts, sample and histogram, as the release worker published them
-- see :func:`month_records`) is put on a releases topic of the real broker and ``stream-dp dashboard``
serves it. One key is renamed to the longest key ingest accepts (``events.max_key_bytes`` = 256), as a
catalogue's product names can be. At 1280×800, 1920×1080 and 2560×1440 the page is loaded and every visible
element of every card is measured against its card (``layout_probe.js``): nothing may reach outside its
card, nothing may be cut off by a chart's edge, and the page must not scroll sideways. From 1920 px on the
page is in wall mode (large type, no explanatory paragraphs); ``?wall=1`` / ``?wall=0`` choose it at any
size. Long keys are truncated with the full name on hover.

The figures are printed (``-s``); with ``STREAM_DP_DASHBOARD_SHOTS=DIR/PREFIX`` the viewport screenshots are
also written to ``DIR/PREFIX-<width>x<height>.png`` (how docs/dashboard/ was made). Skips without Chromium.

The fixture was recorded from a real run (the README's "Run it yourself", all four release types):
``STREAM_DP_RELEASES__HISTOGRAM__ENABLED=true``, ``replay --generate --days 28``, then
``stream-dp tail --json --idle-timeout 60 | gzip -9``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from browser import HeadlessChromium
from dashboard_helpers import DashboardProcess
from ingest_helpers import write_toml
from release_records import produce
from stream_dp.budget_text import delta_text, epsilon_text

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "data" / "dashboard_month.jsonl.gz"
PROBE = (HERE / "layout_probe.js").read_text()
SIZES = ((1280, 800), (1920, 1080), (2560, 1440))
WALL_FROM = 1920
RENAMED = "Kingdom of the Broken Forest (1975)"
LONG_KEY = ("Kingdom of the Broken Forest (1975) — the restored director's cut with the lost forest sequence, "
            "two commentaries, the 1975 radio play, a making-of documentary, the original trailer, "
            "a booklet and a poster, in a limited numbered edition for collectors only"
            ).encode()[:256].decode(errors="ignore")


def busiest_window(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One more day, as full as the page gets: the month's latest records copied to the next window with
    every list longer than a card shows -- 30 histogram keys (the month's keys, the long one first, in an
    order that makes keys climb) over a public domain partly learned from earlier releases (a ``domain``
    block; each key tagged tracked or discovered, the long one discovered), all watched keys above the
    threshold, 20 sampled keys. Layout input only: schema-valid records, not a release any worker made."""
    latest = {r["type"]: r for r in records}
    keys = list(dict.fromkeys([LONG_KEY] + [i["key"] for r in records for i in r["items"] if "key" in i]))[:30]
    out = []
    for rtype, rec in latest.items():
        new = json.loads(json.dumps(rec))
        start, end = rec["window"]["end"], 2 * rec["window"]["end"] - rec["window"]["start"]
        new["window"] = {"start": start, "end": end}
        new["release_id"] = f"{start}-{end}.{rtype}"
        new["created_at"] = datetime.fromtimestamp(end, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if rtype == "histogram":
            new["items"] = [{"key": k, "rank": n + 1, "count": 2000 - 60 * n, "ci_low": 1978 - 60 * n,
                             "ci_high": 2022 - 60 * n, "source": "discovered" if n % 3 == 0 else "domain"}
                            for n, k in enumerate(keys)]
            day = end - start
            new["domain"] = {"size": 1412, "static": 12, "from_released": {
                "types": ["histogram", "topk"], "memory_windows": 4, "windows": [start - 4 * day, start - day],
                "order": "recent", "max_keys": 1000, "candidates": 1431, "keys": 1000, "digest": "0" * 32}}
        elif rtype == "topk":
            new["items"] = [{"key": k, "rank": n + 1} for n, k in enumerate(keys[:10])]
            new["hit_bottom"] = False
        elif rtype == "alerts":
            new["items"] = [{"key": k, "above": True, "estimate": 1900 - 90 * n, "lower_bound": 1800 - 90 * n,
                             "gap": 1800 - 90 * n, "branch": "top"} for n, k in enumerate(keys[:12])]
        elif rtype == "sample":
            new["items"] = [{"key": k, "token": 10.0, "estimate": 900.0 - 30 * n} for n, k in enumerate(keys[:20])]
        out.append(new)
    return out


def catalogue_window(busy: list[dict[str, Any]]) -> dict[str, Any]:
    """The busiest window's histogram one day later over a configured catalogue alone, as the demo releases
    it: every key tracked (``source = "domain"``), the ``domain`` block ``{"size": 3000, "static": 3000}``."""
    rec = json.loads(json.dumps(next(r for r in busy if r["type"] == "histogram")))
    start, end = rec["window"]["end"], 2 * rec["window"]["end"] - rec["window"]["start"]
    rec["window"], rec["release_id"] = {"start": start, "end": end}, f"{start}-{end}.histogram"
    rec["created_at"] = datetime.fromtimestamp(end, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rec["items"] = [{**item, "source": "domain"} for item in rec["items"]]
    rec["domain"] = {"size": 3000, "static": 3000}
    return rec


def month_records() -> list[dict[str, Any]]:
    """The recorded month, with :data:`RENAMED` renamed to :data:`LONG_KEY` in every item."""
    records = [json.loads(line) for line in gzip.open(FIXTURE, "rt")]
    for record in records:
        for item in record["items"]:
            if item.get("key") == RENAMED:
                item["key"] = LONG_KEY
    return records


@pytest.fixture(params=["all types", "histogram only"])
def dashboard(request, tmp_path, bootstrap_servers, topic_name):
    """The month on a topic of its own: every type, or only the histogram as the defaults release it (the
    alerts and sample cards are then left out and the others close the gap)."""
    records = [r for r in month_records() if request.param == "all types" or r["type"] == "histogram"]
    topic = topic_name("releases")
    produce(bootstrap_servers, topic, records)
    config = write_toml(tmp_path / "stream-dp.toml", {"kafka": {"bootstrap_servers": bootstrap_servers,
                                                                "releases_topic": topic}})
    process = DashboardProcess(config, tmp_path / "dashboard.log")
    try:
        yield process, records, lambda more: produce(bootstrap_servers, topic, more)
    finally:
        assert process.stop() == 0, "\n".join(process.lines)


def load(chromium: HeadlessChromium, url: str, size: tuple[int, int], records: int) -> None:
    chromium.set_viewport(*size)
    chromium.navigate(url)
    chromium.wait_for(f"document.readyState === 'complete' && Number(document.body.dataset.records) === {records}"
                      " && !!document.querySelector('#ranking tr.ranked')", 60, "the page to show every record")
    chromium.wait_for("document.getElementById('status').classList.contains('live')"
                      " && document.getElementById('status').textContent.includes('live')", 30, "the live stream")
    chromium.wait_for("document.fonts.ready.then(() => true)", 10, "the fonts")


def measure(chromium: HeadlessChromium, url: str, records: int, shots: Path | None, tmp_path: Path
            ) -> dict[tuple[int, int], dict[str, Any]]:
    """The probe's figures at each size (and the viewport screenshots)."""
    figures: dict[tuple[int, int], dict[str, Any]] = {}
    for size in SIZES:
        load(chromium, url, size, records)
        probe = chromium.evaluate(PROBE)
        probe["wall"] = chromium.evaluate("document.body.classList.contains('wall')")
        probe["key_font_px"] = chromium.evaluate(
            "parseFloat(getComputedStyle(document.querySelector('#ranking tr.ranked td.key')).fontSize)")
        probe["tags"] = chromium.evaluate(
            "[...document.querySelectorAll('#ranking td.source .tag')].filter(e => e.offsetParent !== null)"
            ".map(e => e.textContent).sort().filter((t, i, all) => all.indexOf(t) === i)")
        probe["domain_line"] = chromium.evaluate(
            "(() => { const p = document.getElementById('domain-line');"
            " return p && p.offsetParent !== null ? p.textContent : null; })()")
        probe["explanations_shown"] = chromium.evaluate(
            "[...document.querySelectorAll('.explain')].filter(e => e.offsetParent !== null).length")
        probe["long_key"] = chromium.evaluate(
            "(() => { const td = [...document.querySelectorAll('#ranking td.key')]"
            f".find(td => (td.title || td.textContent) === {json.dumps(LONG_KEY)});"
            " return td ? {title: td.title, truncated: td.scrollWidth > td.clientWidth} : null; })()")
        figures[size] = probe
        shot = chromium.screenshot_viewport(tmp_path / f"dashboard-{records}-{size[0]}x{size[1]}.png")
        if shots:
            target = Path(f"{shots}-{size[0]}x{size[1]}.png")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, target)
    return figures


def report(title: str, figures: dict[tuple[int, int], dict[str, Any]]) -> None:
    print(f"\n{title}\nsize        wall  key font  outside (max px)  clipped (max px)  h-scroll  v-scroll")
    for (w, h), f in figures.items():
        print(f"{w}x{h:<6} {'yes' if f['wall'] else 'no':>4}  {f['key_font_px']:>6.1f}px  "
              f"{len(f['outside']):>6} ({max([o['px'] for o in f['outside']], default=0):>4})  "
              f"{len(f['clipped']):>7} ({max([o['px'] for o in f['clipped']], default=0):>4})  "
              f"{f['horizontal_scroll_px']:>6}px  {f['vertical_scroll_px']:>6}px")
        for o in sorted(f["outside"] + f["clipped"], key=lambda o: -o["px"])[:12]:
            print(f"    {o['card']}: {o['element']} by {o['px']} px")


def check(label: str, figures: dict[tuple[int, int], dict[str, Any]], *, tagged: bool = False) -> None:
    for (w, h), f in figures.items():
        where = f"{label}, {w}x{h}"
        if tagged:  # a release over a public domain: every shown key tagged, the domain's line shown (wall too)
            assert f["tags"] == ["discovered", "tracked"], (where, f["tags"])
            assert f["domain_line"] and f["domain_line"].startswith("domain 1,412 keys"), (where, f["domain_line"])
        else:
            assert f["tags"] == [] and f["domain_line"] is None, (where, f["tags"], f["domain_line"])
        assert not f["outside"], f"{where}: elements outside their card: {f['outside'][:10]}"
        assert not f["clipped"], f"{where}: elements cut off by their chart: {f['clipped'][:10]}"
        assert f["horizontal_scroll_px"] == 0, f"{where}: the page scrolls sideways"
        assert f["wall"] == (w >= WALL_FROM), f"{where}: wall mode {'off' if f['wall'] else 'on'}"
        # readable at a distance: key names at least 1.2 % of the screen's width in wall mode
        assert f["key_font_px"] >= (0.012 * w if f["wall"] else 14), (where, f["key_font_px"])
        if f["wall"]:
            assert f["explanations_shown"] == 0, f"{where}: explanatory paragraphs in wall mode"
            assert f["vertical_scroll_px"] == 0, f"{where}: a wall screen does not scroll"
        else:
            assert f["explanations_shown"] > 0
        assert f["long_key"] == {"title": LONG_KEY, "truncated": True}, (where, f["long_key"])


def test_no_element_leaves_its_card_at_three_screen_sizes(tmp_path, dashboard, chromium):
    process, records, publish = dashboard
    url = process.url + "/"
    every_type = len({r["type"] for r in records}) > 1
    shots = os.environ.get("STREAM_DP_DASHBOARD_SHOTS") if every_type else None
    month = measure(chromium, url, len(records), Path(shots) if shots else None, tmp_path)
    report("the recorded month (its latest window)", month)
    busy = busiest_window(records)
    publish(busy)
    busiest = measure(chromium, url, len(records) + len(busy), None, tmp_path)
    report("a window as full as the page gets", busiest)
    check("month", month)
    check("busiest", busiest, tagged=True)
    cards = chromium.evaluate("[...document.querySelectorAll('.card')].filter(c => c.offsetParent !== null)"
                              ".map(c => c.id)")
    assert set(cards) == ({"trending-card", "rising-card", "budget-card", "timeline-card"}
                          | ({"alerts-card", "estimates-card"} if every_type else set())), cards

    # a catalogue's ranking, every key tracked: no column of identical tags, the domain's line says so
    publish([catalogue_window(busy)])
    total = len(records) + len(busy) + 1
    load(chromium, url, (1920, 1080), total)
    probe = chromium.evaluate(PROBE)
    assert not probe["outside"] and not probe["clipped"] and probe["vertical_scroll_px"] == 0, probe
    assert chromium.evaluate("document.querySelectorAll('#ranking td.source').length") == 0
    assert chromium.evaluate("document.getElementById('domain-line').textContent") == (
        "domain 3,000 keys · from the config · every key shown tracked")

    # the page writes ε and δ as tail, the demo and `budget show` do (stream_dp.budget_text)
    values = [0, 0.004, 0.643, 3.1689222080528, 10, None, 2e-07, 9.800000000000001e-06, 1e-05]
    page = chromium.evaluate(f"{json.dumps(values)}.map(x => [fmtEps(x), fmtDelta(x)])")
    assert page == [[epsilon_text(x), delta_text(x)] for x in values]

    # the URL parameter chooses the mode at any size
    load(chromium, url + "?wall=1", (1280, 800), total)
    assert chromium.evaluate("document.body.classList.contains('wall')")
    load(chromium, url + "?wall=0", (2560, 1440), total)
    assert not chromium.evaluate("document.body.classList.contains('wall')")
