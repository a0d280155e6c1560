"""The dashboard's integration tests: a real pipeline (events → ingest worker → Redis → release worker →
releases topic) with a stream whose answer is clear, and `stream-dp dashboard` as a process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topic_helpers import contract_topics
from ingest_helpers import (config_mapping, create_topic, ground_truth, produce, stop_worker, window_store,
                            write_toml)
from ingest_helpers import start_worker as start_ingest
from release_processes import start_worker as start_release
from release_processes import stop
from waiting import wait_for
from stream_dp.config import load_config
from stream_dp.processes import die_with_parent

REPO = Path(__file__).resolve().parents[2]
SIZE = 60
from event_times import T0  # noqa: E402 - near the present (Kafka 4 refuses future times)
# per window: hot keys and their distinct users; the ranking changes between windows
HOT = [
    {"Crimson River": 70, "Mira's Winter": 55, "The Burning Empire": 45},
    {"Mira's Winter": 75, "Crimson River": 60, "The Hollow Station": 45},
    {"The Hollow Station": 80, "Mira's Winter": 60, "Crimson River": 50},
]
WINDOWS = len(HOT)
TYPES = ("topk", "alerts", "sample")
HOT_KEYS = sorted({k for w in HOT for k in w})


def events(seed: int = 11) -> list[dict[str, Any]]:
    """Each window: its hot keys, each from that many users, and a flat tail (200 keys, 1-2 users each),
    so top-k releases the hot keys and then stops at ⊥; one event after the last window closes it."""
    rnd = random.Random(seed)
    out = []
    for w, hot in enumerate(HOT):
        start = T0 + w * SIZE
        for key, users in hot.items():
            out += [{"user": f"w{w}-{key[:4]}-{i}", "key": key, "ts": start + rnd.uniform(1, SIZE - 5)}
                    for i in range(users)]
        out += [{"user": f"w{w}-tail-{i}", "key": f"tail-{rnd.randrange(200)}", "ts": start + rnd.uniform(1, SIZE - 5)}
                for i in range(250)]
    out.sort(key=lambda e: e["ts"])
    out.append({"user": "user-tick", "key": "tick", "ts": T0 + WINDOWS * SIZE + SIZE / 2})
    return out


def pipeline_config(tmp_path: Path, bootstrap: str, redis_url: str, topic_name, prefix: str) -> tuple[Path, str, str]:
    """A config for both workers and the dashboard; returns (path, events topic, releases topic)."""
    events_topic, releases_topic = topic_name("events"), topic_name("releases")
    create_topic(bootstrap, events_topic, 2)
    contract_topics(bootstrap, releases=releases_topic)
    data = config_mapping(bootstrap, redis_url, events_topic, group=topic_name("g"), size=SIZE, max_keys=3,
                          lateness=0, idle=1.0, prefix=prefix, budget={"epsilon": 20.0, "delta": 1e-4})
    data["kafka"]["releases_topic"] = releases_topic
    data["releases.topk"] = {"enabled": True, "k": 5, "k_bar": 20, "epsilon": 0.5, "delta": 1e-6}
    data["releases.alerts"] = {"enabled": True, "watchlist": ["Crimson River", "Mira's Winter"], "threshold": 20.0, "k": 10,
                               "epsilon": 1.0}
    data["releases.sample"] = {"enabled": True, "scheme": "pps", "tau": 0.05, "epsilon": 1.0, "delta": 1e-6}
    data["releases.histogram"] = {"enabled": False}  # the three types of TYPES
    return write_toml(tmp_path / "stream-dp.toml", data), events_topic, releases_topic


@dataclass
class Pipeline:
    """The ingest and release workers as processes, fed :func:`events`."""

    config: Path
    events_topic: str
    tmp_path: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, bootstrap: str) -> None:
        produce(bootstrap, self.events_topic, events())
        self.procs.append(start_ingest(self.config, self.tmp_path / "ingest.log"))
        self.procs.append(start_release(self.config, worker_id="r1", log_path=self.tmp_path / "release.log",
                                        claim_ttl=10.0))

    def assert_counted_exactly(self) -> None:
        """Every event of :func:`events` is in the closed windows' counts in Redis, exactly as the bounding
        oracle counts it (nothing lost to lateness or dead letters, which would make the hot keys' ranks
        a matter of chance)."""
        import redis

        cfg = load_config(self.config)
        client = redis.Redis.from_url(cfg.redis.url)
        try:
            store = window_store(client, cfg)
            truth = ground_truth(events(), size=SIZE, max_keys=cfg.contribution.max_keys_per_user)
            ours = [T0 + w * SIZE for w in range(WINDOWS)]
            assert {s: store.counts(s) for s in ours} == {s: truth[s] for s in ours}
        finally:
            client.close()

    def stop(self) -> None:
        if len(self.procs) == 2:
            assert stop(self.procs[1]) == 0, (self.tmp_path / "release.log").read_text()[-3000:]
            assert stop_worker(self.procs[0]) == 0, (self.tmp_path / "ingest.log").read_text()[-3000:]
        self.procs.clear()


class DashboardProcess:
    """``stream-dp dashboard --config FILE`` on a free port (dashboard.port = 0); its URL from its first line."""

    def __init__(self, config: Path, log_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
        env.update({"PYTHONPATH": str(REPO), "STREAM_DP_DASHBOARD__PORT": "0"})
        self.log_path = log_path
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-m", "stream_dp.cli", "dashboard", "--config", str(config)],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     preexec_fn=die_with_parent)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: self.url or self.proc.poll() is not None, timeout=30, what="the dashboard's URL")
        assert self.url, "\n".join(self.lines)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def url(self) -> str | None:
        for line in self.lines:
            if line.startswith("dashboard  http://"):
                return line.split()[1].rstrip("/")
        return None

    def get(self, path: str) -> tuple[int, Any]:
        """(status, JSON body) of GET ``path``."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> int:
        code = stop(self.proc)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


class EventStream:
    """A Server-Sent Events reader on a thread: every ``(event, data)`` received."""

    def __init__(self, url: str) -> None:
        self.events: list[tuple[str, str]] = []
        self._resp = urllib.request.urlopen(url, timeout=60)
        self.content_type = self._resp.headers.get("Content-Type", "")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        event, data = "message", []
        try:
            for raw in self._resp:
                line = raw.decode().rstrip("\n")
                if not line:
                    if data:
                        self.events.append((event, "\n".join(data)))
                    event, data = "message", []
                elif line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
        except (OSError, ValueError, AttributeError):  # closed by close() (http.client drops its fp)
            pass

    def close(self) -> None:
        self._resp.close()
        self._thread.join(5)


