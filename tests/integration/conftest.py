"""Fixtures of the integration tests beyond the session's broker and Redis (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from browser import chromium  # noqa: F401 -- the headless Chromium fixture of the dashboard's browser tests
from cluster_helpers import local_cluster


@pytest.fixture
def cluster(tmp_path) -> Iterator[RedisCluster]:
    """A client of a real 3-master Redis Cluster of this test's own (redis-server processes on free ports,
    stopped after the test). A test that needs other client options defines its own."""
    with local_cluster(tmp_path, masters=3) as nodes:
        client = nodes.client()
        try:
            yield client
        finally:
            client.close()
