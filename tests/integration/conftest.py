"""Fixtures of the integration tests beyond the session's broker and Redis (tests/conftest.py)."""

from __future__ import annotations

from browser import chromium  # noqa: F401 -- the headless Chromium fixture of the dashboard's browser tests
