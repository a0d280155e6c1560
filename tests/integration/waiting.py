"""The one way the tests wait: poll a condition until it holds, with a deadline (never a fixed sleep)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any


def wait_for(condition: Callable[[], Any], *, timeout: float, interval: float = 0.05,
             what: str = "condition", procs: Sequence[subprocess.Popen[bytes]] = ()) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail naming ``what`` after
    ``timeout`` seconds, or as soon as one of ``procs`` (processes that must keep running meanwhile) exits."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"process {proc.args!r} exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
