"""The dashboard's web app (Starlette): the page, the JSON API and the live stream.

- ``GET /`` -- the page (``static/index.html``; script, styles and SVG drawing served from ``/static``);
- ``GET /api/releases?type=&since=&limit=`` -- checked, de-duplicated records, newest first. ``type`` is
  a release type of the schema, ``since`` the first window start to include (epoch seconds or an ISO 8601
  date / time, UTC if no offset), ``limit`` 1..1000 (default 100). A bad parameter is a 400 naming it;
- ``GET /api/trending?windows=`` -- the latest ranking(s) with rank changes, each key's rank in each of the
  last ``windows`` windows (1..100, default 12) and the rising keys (:meth:`ReleaseBoard.trending`);
- ``GET /api/budget`` -- spent / remaining per budget period and the burn-down (:meth:`ReleaseBoard.budget`);
- ``GET /api/timeline`` -- windows and the status of each release type;
- ``GET /healthz`` -- 200 while the subscriber reads the topic, 503 while it cannot;
- ``GET /api/stream`` -- Server-Sent Events: ``release`` (a new record, JSON), ``reload`` (the page fell
  behind: fetch everything again), a comment every few seconds to keep proxies from closing the stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from stream_dp.client import release_types
from stream_dp.dashboard.board import ReleaseBoard
from stream_dp.dashboard.feed import Feed
from stream_dp.dashboard.trends import DEFAULT_HISTORY_WINDOWS
from stream_dp.errors import StreamDPError

STATIC = Path(__file__).resolve().parent / "static"
MAX_LIMIT = 1000
MAX_HISTORY_WINDOWS = 100
KEEPALIVE_SECONDS = 10.0
NO_STORE = {"Cache-Control": "no-store"}


class BadParameter(ValueError, StreamDPError):
    """A query parameter out of its allowed values (answered with 400 and this message)."""


def parse_since(raw: str | None) -> int | None:
    """``since`` as epoch seconds: an integer, or an ISO 8601 date / date-time (UTC when no offset).

    >>> parse_since("1793577600"), parse_since("2026-11-02"), parse_since("2026-11-02T01:00:00+01:00")
    (1793577600, 1793577600, 1793577600)
    """
    if raw is None or raw == "":
        return None
    if raw.lstrip("-").isdigit():
        value = int(raw)
    else:
        try:
            when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise BadParameter(f"since must be epoch seconds or an ISO 8601 date/time, got {raw!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        value = int(when.timestamp())
    if value < 0:
        raise BadParameter(f"since must be >= 0, got {raw!r}")
    return value


def parse_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return 100
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise BadParameter(f"limit must be an integer in [1, {MAX_LIMIT}], got {raw!r}")
    return int(raw)


def parse_windows(raw: str | None) -> int:
    """``windows`` of ``/api/trending``: how many windows each key's rank history covers."""
    if raw is None or raw == "":
        return DEFAULT_HISTORY_WINDOWS
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_HISTORY_WINDOWS:
        raise BadParameter(f"windows must be an integer in [1, {MAX_HISTORY_WINDOWS}], got {raw!r}")
    return int(raw)


def parse_type(raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    known = release_types()
    if raw not in known:
        raise BadParameter(f"type must be one of {', '.join(known)}, got {raw!r}")
    return raw


def create_app(board: ReleaseBoard, feed: Feed | None = None, *, topic: str = "releases") -> Starlette:
    """The app over ``board`` (filled by ``feed``, whose listeners get the live stream)."""
    listeners = feed.listeners if feed is not None else None

    async def index(_: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=NO_STORE)

    async def releases(request: Request) -> Response:
        q = request.query_params
        try:
            kind, since, limit = parse_type(q.get("type")), parse_since(q.get("since")), parse_limit(q.get("limit"))
        except BadParameter as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        records = board.releases(type=kind, since=since, limit=limit)
        return JSONResponse({"count": len(records), "releases": records}, headers=NO_STORE)

    async def trending(request: Request) -> Response:
        try:
            windows = parse_windows(request.query_params.get("windows"))
        except BadParameter as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(board.trending(windows), headers=NO_STORE)

    async def budget(_: Request) -> Response:
        return JSONResponse(board.budget(), headers=NO_STORE)

    async def timeline(request: Request) -> Response:
        try:
            limit = parse_limit(request.query_params.get("limit") or "48")
        except BadParameter as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"windows": board.timeline(limit)}, headers=NO_STORE)

    async def healthz(_: Request) -> Response:
        ok = feed is None or (feed.alive and feed.connected)
        body: dict[str, Any] = {
            "status": "ok" if ok else ("starting" if feed is not None and feed.alive and not feed.error
                                       else "unavailable"),
            "topic": topic, "records": len(board), "rejected": board.rejected,
            "last_rejection": board.last_rejection,
            "last_record_at": (datetime.fromtimestamp(feed.last_record_at, timezone.utc).isoformat()
                               if feed is not None and feed.last_record_at else None),
            "error": feed.error if feed is not None else None,
            "live_pages": len(listeners) if listeners is not None else 0,
        }
        return JSONResponse(body, status_code=200 if ok else 503, headers=NO_STORE)

    async def stream(request: Request) -> Response:
        if listeners is None:
            return JSONResponse({"error": "no live feed in this app"}, status_code=404)
        queue = listeners.attach()

        async def events() -> AsyncIterator[str]:
            try:
                yield f"event: hello\ndata: {json.dumps({'records': len(board), 'at': time.time()})}\n\n"
                while True:
                    try:
                        record = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
                    except asyncio.TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if record is None:
                        yield "event: reload\ndata: {}\n\n"
                    else:
                        yield f"event: release\nid: {record['release_id']}\ndata: {json.dumps(record)}\n\n"
            finally:
                listeners.detach(queue)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return Starlette(routes=[
        Route("/", index),
        Route("/api/releases", releases),
        Route("/api/trending", trending),
        Route("/api/budget", budget),
        Route("/api/timeline", timeline),
        Route("/api/stream", stream),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ])
