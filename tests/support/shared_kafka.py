"""One Apache Kafka broker for a whole test run, shared by its pytest-xdist workers.

A Kafka broker is a JVM: on the 2-core CI machine it takes ~3.5 CPU-seconds to start (plus ~1 to format its
storage) and ~1.5 CPU-seconds a minute while idle; a broker per xdist worker (six) spent ~150 CPU-seconds of a
~1,450 CPU-second run on starting and idling. Tests never share a topic or a consumer group (``topic_name``), so
one broker serves them all, as one cluster serves many services in production. (Tansu, the embedded broker,
costs nothing idle and starts in 0.1 s: it stays one per worker.)

Lifecycle: the controlling pytest process makes a directory for the run (:func:`open_run`) and hands it to
each worker; the first worker that needs the broker starts it detached (in a session of its own, so it
outlives that worker) under a file lock and records it there (:func:`broker`); the others read the record;
the controlling process stops it when the run ends (:func:`close_run`), whichever worker started it.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stream_dp.dev import detached

RECORD = "kafka.json"  # the devstack state file: pids, ports, work directory
LISTENING = "listening_at"  # time.monotonic() once `devstack up` returned


@dataclass(frozen=True)
class SharedBroker:
    """The run's broker: its address, and a moment by which it accepted connections (``time.monotonic()``, a
    system-wide clock on Linux, so comparable across the workers' processes)."""

    bootstrap_servers: str
    listening_at: float


def open_run() -> Path:
    """A fresh directory for this run's shared broker (called by the controlling process)."""
    return Path(tempfile.mkdtemp(prefix="stream-dp-test-kafka-"))


def broker(run_dir: Path) -> SharedBroker:
    """The run's broker, started now (``stream-dp devstack up --broker kafka``, which also starts a redis-server
    nobody uses) if no worker has started it yet. Started by a process of its own, which exits: a worker
    holding the broker's process handle would have it reported as a leak when the handle is collected."""
    with open(run_dir / "kafka.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        record = run_dir / RECORD
        if not (run_dir / LISTENING).exists():
            up = subprocess.run([sys.executable, "-m", "stream_dp.cli", "devstack", "up", "--broker", "kafka",
                                 "--state", str(record)], capture_output=True, text=True, timeout=300)
            if up.returncode != 0:
                raise RuntimeError(f"the run's Apache Kafka broker did not start: {up.stdout}{up.stderr}")
            # an upper bound of when it started listening (the record says how long it took, not when)
            (run_dir / LISTENING).write_text(repr(time.monotonic()))
        info = json.loads(record.read_text())
        listening_at = float((run_dir / LISTENING).read_text())
    return SharedBroker(bootstrap_servers=info["bootstrap_servers"], listening_at=listening_at)


def close_run(run_dir: Path) -> None:
    """Stop the run's broker if one was started (SIGTERM, then SIGKILL after 10 s) and remove the directory."""
    if (run_dir / RECORD).exists():
        detached.down(run_dir / RECORD)
    shutil.rmtree(run_dir, ignore_errors=True)
