"""Whether a redis-server that accepts connections also serves: after a restart with an AOF it first
replays the file and answers every command with ``LOADING`` (redis-py's ``BusyLoadingError``) meanwhile.

``stream-dp devstack up`` (and every dev-stack restart) returns only once Redis answers ``PING`` with ``PONG``:
a caller that connects right after a restart with persistence would otherwise meet ``BusyLoadingError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis


def wait_loaded(host: str, port: int, deadline: float, *, alive: Callable[[], bool] = lambda: True,
                interval: float = 0.02) -> bool:
    """Poll ``PING`` until Redis answers ``PONG`` (True), or until ``deadline`` (``time.monotonic``) passes or
    ``alive()`` says the server exited (False). ``LOADING`` and a refused connection are waited out."""
    client = redis.Redis(host=host, port=port, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        while alive() and time.monotonic() <= deadline:
            try:
                if client.ping():
                    return True
            except (redis.BusyLoadingError, redis.ConnectionError, redis.TimeoutError):
                pass
            time.sleep(interval)
        return False
    finally:
        client.close()
