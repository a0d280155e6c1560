"""``stream-dp demo``: the whole service on one machine, with live releases on the terminal.

What it runs is the production path, not a toy:

1. the config is built by :func:`stream_dp.config.load_config` (default file, or ``--config``, plus any
   ``STREAM_DP_*`` overrides); without ``--config``, demo-sized defaults (:mod:`stream_dp.dev.demo_config`: one-day
   windows, the histogram calibrated for a period of one window, over the generated stream's public catalogue)
   are layered under the environment overrides;
2. Kafka and Redis: the configured ones, or -- when ``kafka.bootstrap_servers`` / ``redis.url`` are empty --
   the embedded dev stack (:class:`stream_dp.dev.devstack.DevStack`). With external services the demo uses topic
   names and a Redis key prefix of its own, so it never mixes with production data;
3. the final config is written to a TOML file and the **ingest and release workers are started as
   subprocesses** with ``python -m workers.ingest --config FILE`` / ``python -m workers.release --config FILE``,
   each serving /metrics on its own port;
4. a stream is replayed into the events topic (:mod:`stream_dp.replay`): the generated MovieLens-style
   ratings (:mod:`stream_dp.dev.demo_data`) or a user file, paced so a window of event time passes every few
   seconds;
5. releases are followed on the releases topic and printed (:mod:`stream_dp.tail`);
6. unless turned off, ``stream-dp dashboard`` runs as a process too (a subscriber of the releases topic)
   and its URL is printed (``dashboard.port``, 8050 by default, or a free port if that one is taken).

This module runs those steps in order and stops them in order; the worker processes are
:mod:`stream_dp.dev.demo_workers`', the stream and its replay :mod:`stream_dp.dev.demo_feed`'s, the printing of
releases :mod:`stream_dp.dev.demo_follow`'s, the options and the config :mod:`stream_dp.dev.demo_config`'s.

Ctrl-C stops it in order: replay, workers (SIGTERM: they finish their batch and commit), then the dev stack.
The workers and the dev stack run in process groups of their own, so the terminal's SIGINT reaches only the
demo, which stops them in that order; a second Ctrl-C kills everything at once. Bounded runs
(``--windows N``, ``--duration S``) end by themselves, for tests and the quickstart.
"""

from __future__ import annotations

import logging
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from stream_dp.config import Config
from stream_dp.dev.demo_config import DemoOptions, catalogue_domain, config_to_toml, demo_config
from stream_dp.dev.demo_feed import ReplayFeed, load_events, speedup_for
from stream_dp.dev.demo_follow import ReleaseFollower
from stream_dp.dev.demo_workers import WORKERS, WorkerProcess, pick_port
from stream_dp.dev.devstack import DevStack
from stream_dp.redact import redact_url
from stream_dp.schedule import window_start
from stream_dp.tables import counted

__all__ = ["Demo", "DemoOptions", "install_sigint"]

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0


class Demo:
    """Runs the stack, the workers, the replay and the release printer (see the module docstring)."""

    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        self.opts = options
        self.out = out if out is not None else sys.stdout
        self.stop_requested = threading.Event()
        self.stack: DevStack | None = None
        self.workers: list[WorkerProcess] = []
        self.feed: ReplayFeed | None = None
        self.follower: ReleaseFollower | None = None
        self.dashboard: Any = None  # stream_dp.dashboard.launch.DashboardChild while it runs
        self._own_workdir = options.workdir is None
        self.workdir = Path(options.workdir or tempfile.mkdtemp(prefix="stream-dp-demo-"))
        self.workdir.mkdir(parents=True, exist_ok=True)

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    # ---- setup ------------------------------------------------------------------------------------
    def prepare_config(self) -> Config:
        cfg = demo_config(self.opts.config_path)
        self.say("stream-dp demo: differentially private heavy hitters from a live stream (Ctrl-C stops)")
        need_kafka, need_redis = not cfg.kafka.bootstrap_servers, not cfg.redis.url
        run_id = uuid.uuid4().hex[:8]
        kafka, redis_cfg = cfg.kafka, cfg.redis
        if need_kafka or need_redis:
            self.stack = DevStack(kafka=need_kafka, redis=need_redis, workdir=self.workdir / "devstack",
                                  own_process_group=True)
            self.stack.start()
            if need_kafka:
                kafka = _replace(kafka, bootstrap_servers=self.stack.bootstrap_servers)
                self.say(f"broker     {self.stack.bootstrap_servers}  (embedded Tansu, memory only, "
                         f"pid {self.stack.broker.pid})")  # type: ignore[union-attr]
            if need_redis:
                redis_cfg = _replace(redis_cfg, url=self.stack.redis_url)
                self.say(f"redis      {self.stack.redis_url}  (embedded redis-server, "
                         f"pid {self.stack.redis.pid})")  # type: ignore[union-attr]
        if not need_kafka:  # an external broker: topics of the demo's own
            kafka = _replace(kafka, events_topic=f"{kafka.events_topic}-demo-{run_id}",
                             releases_topic=f"{kafka.releases_topic}-demo-{run_id}",
                             dead_letter_topic=f"{kafka.dead_letter_topic}-demo-{run_id}",
                             ingest_group_id=f"{kafka.ingest_group_id}-demo-{run_id}")
            self.say(f"broker     {kafka.bootstrap_servers}  (configured; demo topics *-demo-{run_id})")
        if not need_redis:
            redis_cfg = _replace(redis_cfg, key_prefix=f"{redis_cfg.key_prefix}-demo-{run_id}")
            self.say(f"redis      {redact_url(redis_cfg.url)}  (configured; key prefix {redis_cfg.key_prefix})")
        metrics = _replace(cfg.metrics, host="127.0.0.1")
        return cfg.replace(kafka=kafka, redis=redis_cfg, metrics=metrics)

    def start_workers(self, cfg: Config) -> Path:
        from stream_dp import topics

        path = self.workdir / "stream-dp.demo.toml"
        path.write_text(config_to_toml(cfg, header="Written by `stream-dp demo`: the config both workers run with."))
        topics.create(cfg.kafka)  # the topic contract (events: kafka.events_partitions partitions)
        taken: set[int] = set()
        for i, name in enumerate(WORKERS):
            port = pick_port(self.opts.metrics_port + i if self.opts.metrics_port else 0, taken)
            taken.add(port)
            worker = WorkerProcess(name, path, port, self.workdir / f"{name}.log")
            worker.start()
            self.workers.append(worker)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        for worker in self.workers:
            worker.wait_ready(deadline)
            self.say(f"{worker.name + ' worker':<10} pid {worker.proc.pid}, metrics "  # type: ignore[union-attr]
                     f"http://127.0.0.1:{worker.metrics_port}/metrics, log {worker.log_path}")
        self.say(f"config     {path}")
        return path

    def start_dashboard(self, cfg: Config, config_path: Path) -> None:
        """Serve the dashboard on the configured port, or a free one if that is taken (and say so)."""
        from stream_dp.dashboard.launch import DashboardChild

        wanted = self.opts.dashboard_port if self.opts.dashboard_port is not None else cfg.dashboard.port
        taken = {w.metrics_port for w in self.workers}
        port = pick_port(wanted, taken)
        for attempt in range(3):  # another process may take a free port between our check and the child's bind
            self.dashboard = DashboardChild(config_path, port, self.workdir / "dashboard.log")
            self.dashboard.start()
            try:
                self.dashboard.wait_ready(time.monotonic() + READY_TIMEOUT_SECONDS)
                break
            except RuntimeError:
                if attempt == 2 or "cannot serve the dashboard" not in self.dashboard.log_tail():
                    raise
                taken.add(port)
                port = pick_port(0, taken)
        note = f"; port {wanted} is taken, so it uses a free port" if wanted and port != wanted else ""
        self.say(f"dashboard  {self.dashboard.url}  (pid {self.dashboard.proc.pid}{note}; "
                 f"log {self.dashboard.log_path})")

    def schedule_from(self, cfg: Config, events: list[Any]) -> Config:
        """The release schedule starts at the replayed stream's first window, unless the config names a
        start: the demo replays history, which a schedule starting at the wall clock would not cover. The
        operator (here: the demo) makes that start public by putting it in the config."""
        from stream_dp.config import FIRST_START

        if cfg.windows.start != FIRST_START:
            return cfg
        times = [e.ts for e in events if e.ts is not None]
        if not times:
            return cfg
        size = cfg.windows.size_seconds
        first = window_start(min(times), size)
        self.say(f"schedule   every {size:,} s window from {datetime.fromtimestamp(first, timezone.utc):%Y-%m-%d %H:%M} "
                 f"UTC (windows.start = \"{first}\", the stream's first window), empty or not")
        return cfg.replace(windows=_replace(cfg.windows, start=str(first)))

    def catalogue_from(self, cfg: Config) -> Config:
        """The generated stream's catalogue as the histogram's public domain (:func:`catalogue_domain`)."""
        o = self.opts
        if o.config_path is not None or o.input_path is not None:  # your config, or your data: no catalogue
            return cfg
        cfg, said = catalogue_domain(cfg, self.workdir / "catalogue.txt", movies=o.movies, seed=o.seed)
        if said:
            self.say(said)
        return cfg

    def start_replay(self, cfg: Config, events: list[Any], what: str) -> None:
        speedup = speedup_for(self.opts, cfg)
        pace = "as fast as possible" if speedup is None else f"event time x{speedup:,.0f}"
        self.say(f"replaying  {what}; {pace}")
        self.feed = ReplayFeed(cfg, events, speedup=speedup, should_stop=self.stop_requested.is_set)
        self.feed.start()

    # ---- printing releases -----------------------------------------------------------------------
    def follow(self, cfg: Config) -> int:
        self.follower = ReleaseFollower(cfg, self.opts, self.say, stop_requested=self.stop_requested,
                                        feed=self.feed, workers=self.workers)
        return self.follower.run()

    # ---- shutdown ---------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the replay, then the workers (SIGTERM, SIGKILL after a timeout), then the dev stack."""
        self.stop_requested.set()
        if self.feed is not None:
            self.feed.join(timeout=10)
        if self.dashboard is not None:
            self.dashboard.stop(STOP_TIMEOUT_SECONDS)
        for worker in self.workers:
            worker.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for worker in self.workers:
            if not worker.wait(deadline - time.monotonic()):
                self.say(f"the {worker.name} worker did not stop within {STOP_TIMEOUT_SECONDS:.0f}s; killing it")
                worker.kill()
        if self.stack is not None:
            self.stack.stop()

    def kill_everything(self) -> None:
        """The second Ctrl-C: no more waiting."""
        for worker in self.workers:
            worker.kill()
        if self.dashboard is not None and self.dashboard.alive:
            self.dashboard.proc.kill()
        if self.stack is not None:
            for svc in (self.stack.broker, self.stack.redis):
                if svc is not None:
                    svc.kill()

    def summary(self) -> str:
        stats = self.feed.stats if self.feed is not None else None
        sent = f"{stats.sent:,} events replayed" if stats else "replay interrupted"
        done, printed = (len(self.follower.windows_done), self.follower.releases_printed) if self.follower else (0, 0)
        windows, printed_text = counted(done, "window"), counted(printed, "release")
        return f"{sent}; {windows} released; {printed_text} printed"

    def run(self) -> int:
        """Run until a bound is reached, a worker dies, or :meth:`request_stop`; always clean up."""
        code = 1
        try:
            cfg = self.prepare_config()
            events, what = load_events(self.opts, cfg)
            cfg = self.schedule_from(cfg, events)
            cfg = self.catalogue_from(cfg)
            config_path = self.start_workers(cfg)
            if self.opts.dashboard:
                self.start_dashboard(cfg, config_path)
            self.start_replay(cfg, events, what)
            code = self.follow(cfg)
        finally:
            self.say("\nstopping: replay, workers, then the broker and Redis …")
            self.shutdown()
            self.say(f"stopped. {self.summary()}")
            if self._own_workdir and code == 0:
                import shutil

                shutil.rmtree(self.workdir, ignore_errors=True)
            elif not self._own_workdir or code != 0:
                self.say(f"logs and config kept in {self.workdir}")
        return code

    def request_stop(self) -> None:
        self.stop_requested.set()


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def install_sigint(demo: Demo) -> Callable[[], None]:
    """First SIGINT/SIGTERM: orderly stop; second: kill everything and exit 130 (the workers' signal
    policy, :class:`stream_dp.runtime.SignalPolicy`). Returns an uninstaller."""
    from stream_dp.runtime import SignalPolicy

    def first() -> None:
        print("\n(stopping — Ctrl-C again to kill everything now)", file=sys.stderr, flush=True)
        demo.request_stop()

    return SignalPolicy(first, on_second=demo.kill_everything, first_message="stopping the demo in order").install()
