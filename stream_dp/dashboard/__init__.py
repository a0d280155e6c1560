"""``stream-dp dashboard``: a live trending page and a JSON API over the releases topic.

The dashboard is **only a subscriber**: it reads release records through :mod:`stream_dp.client`
(schema-checked, de-duplicated) and shows what they say -- it never connects to Redis and never sees a raw
count, so it can be exposed to anyone who may read the releases topic. No module of this package imports
a Redis client (``tests/unit/test_dashboard_imports.py`` checks the import graph).

- :mod:`~stream_dp.dashboard.board` -- the pure part: records in, the views out (ranking with rank changes,
  budget burn-down per period, the window timeline);
- :mod:`~stream_dp.dashboard.feed` -- the subscriber thread that fills the board and wakes the live streams;
- :mod:`~stream_dp.dashboard.app` -- the Starlette app: ``/``, ``/api/*``, Server-Sent Events;
- :mod:`~stream_dp.dashboard.server` -- binding the port and running it under uvicorn;
- ``static/`` -- the page: hand-written HTML, CSS, SVG drawn by a small vanilla script; no CDN, works offline.
"""
