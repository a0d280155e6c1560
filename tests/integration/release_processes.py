"""Helpers for the release worker's process-level tests: config files, worker processes, topic reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from stream_dp.processes import die_with_parent
from waiting import wait_for  # the tests' one wait, re-exported for the release tests

REPO = Path(__file__).resolve().parents[2]
CRASHING_RELEASE = Path(__file__).resolve().parent / "crashing_release.py"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``stream-dp ARGS`` as a process, in an environment without the caller's STREAM_DP_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "stream_dp.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def write_config(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    """A TOML config file from ``{"section" or "a.b": {key: value}}``."""
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in values.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def releases_topic_of(config: Path) -> None:
    """Make the releases topic of ``config`` as ``stream-dp topics create`` does (the worker checks it at start
    and no longer makes it), unless it exists."""
    from stream_dp import topics
    from stream_dp.config import load_config

    kafka = load_config(config, environ={}).kafka
    if kafka.bootstrap_servers:
        topics.create(kafka, ("releases",))


def start_worker(config: Path, *, worker_id: str, log_path: Path, crash_at: str | None = None,
                 extra_env: dict[str, str] | None = None, claim_ttl: float = 2.0) -> subprocess.Popen[bytes]:
    releases_topic_of(config)
    # STREAM_DP_* variables are config overrides: pass none of the test runner's on to the worker
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAM_DP_", "STREAMDP_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra_env or {})
    # a crash is injected through the test-owned entry point (production's worker has no crash switch)
    entry = ["-m", "workers.release"] if not crash_at else [str(CRASHING_RELEASE), "--crash-at", crash_at]
    log = open(log_path, "ab")
    try:
        return subprocess.Popen([sys.executable, *entry, "--config", str(config),
                                 "--worker-id", worker_id, "--poll-seconds", "0.05",
                                 "--claim-ttl-seconds", str(claim_ttl)],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
    finally:
        log.close()


def wait_started(log_path: Path, timeout: float = 30.0) -> None:
    """Wait until the worker logged that its loop started (its signal handlers are installed by then)."""
    wait_for(lambda: log_path.exists() and b"started (types:" in log_path.read_bytes(), timeout=timeout,
             what=f"worker start ({log_path.name})")


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=timeout)


def read_topic(bootstrap: str, topic: str, *, expect_at_least: int = 0, timeout: float = 20.0) -> list[tuple[str, bytes]]:
    """Every (key, value) on partition 0 of ``topic``, from the beginning, up to the high-water mark."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=300).values():
                out.extend((r.key.decode(), r.value) for r in recs)
            hw = consumer.highwater(tp)
            if hw is not None and consumer.position(tp) >= hw and len(out) >= expect_at_least:
                break
        return out
    finally:
        consumer.close()


def by_release_id(messages: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    groups: dict[str, list[bytes]] = defaultdict(list)
    for key, value in messages:
        groups[key].append(value)
    return dict(groups)
