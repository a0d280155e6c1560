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

Ctrl-C stops it in order: replay, workers (SIGTERM: they finish their batch and commit), then the dev stack.
The workers and the dev stack run in process groups of their own, so the terminal's SIGINT reaches only the
demo, which stops them in that order; a second Ctrl-C kills everything at once. Bounded runs
(``--windows N``, ``--duration S``) end by themselves, for tests and the quickstart.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from stream_dp.config import Config
from stream_dp.dev.demo_config import catalogue_domain, config_to_toml, demo_config
from stream_dp.dev.devstack import DevStack
from stream_dp.processes import die_with_parent, free_port
from stream_dp.redact import redact_url
from stream_dp.schedule import window_start
from stream_dp.tables import counted

log = logging.getLogger(__name__)

WORKERS = ("ingest", "release")
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0


# --------------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    """One worker started as ``python -m workers.<name> --config FILE`` in a process group of its own."""

    name: str
    config_path: Path
    metrics_port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}  # the file is final
        env["STREAM_DP_METRICS__PORT"] = str(self.metrics_port)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"workers.{self.name}", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                process_group=0, preexec_fn=die_with_parent)

    def wait_ready(self, deadline: float) -> None:
        """Poll /metrics until it answers; fail with the log's tail if the process exits first."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the {self.name} worker exited while starting; its log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} worker did not serve {url} in time; its log:\n{self.log_tail()}")
            time.sleep(0.1)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            self.proc.send_signal(sig)  # type: ignore[union-attr]

    def wait(self, timeout: float) -> bool:
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=max(timeout, 0))
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()  # type: ignore[union-attr]
            self.proc.wait()  # type: ignore[union-attr]

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def _port(preferred: int, taken: set[int]) -> int:
    """``preferred`` if it is free (and not already handed out), else any free port."""
    import socket

    if preferred and preferred not in taken:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server does
            try:
                sock.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    port = free_port()
    while port in taken:
        port = free_port()
    return port


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


@dataclass
class DemoOptions:
    config_path: str | None = None
    input_path: str | None = None  # None: the generated stream
    input_format: str | None = None
    user_column: str | None = None
    key_column: str | None = None
    time_column: str | None = None
    time_unit: str = "s"
    seed: int = 7
    days: int = 28
    users: int = 6000
    movies: int = 3000
    seconds_per_window: float = 3.0  # pacing: one window of event time per this many seconds
    speedup: float | None = None  # explicit event-time speed-up (overrides seconds_per_window)
    fast: bool = False  # no pacing at all
    windows: int | None = None  # stop after this many windows were released
    duration: float | None = None  # stop after this many seconds
    metrics_port: int = 9108  # ingest gets this port, release the next one (or free ports if taken)
    workdir: str | None = None  # keep the generated config and logs here
    color: bool = False
    dashboard: bool = True  # also serve `stream-dp dashboard` (a subscriber of the releases topic)
    dashboard_port: int | None = None  # None: dashboard.port of the config (8050); a free port if taken


class Demo:
    """Runs the stack, the workers, the replay and the release printer (see the module docstring)."""

    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        self.opts = options
        self.out = out if out is not None else sys.stdout
        self.stop_requested = threading.Event()
        self.stack: DevStack | None = None
        self.workers: list[WorkerProcess] = []
        self.replay_stats: Any = None
        self._replay_thread: threading.Thread | None = None
        self._replay_error: BaseException | None = None
        self.windows_done: list[int] = []
        self.releases_printed = 0
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
            port = _port(self.opts.metrics_port + i if self.opts.metrics_port else 0, taken)
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
        port = _port(wanted, taken)
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
                port = _port(0, taken)
        note = f"; port {wanted} is taken, so it uses a free port" if wanted and port != wanted else ""
        self.say(f"dashboard  {self.dashboard.url}  (pid {self.dashboard.proc.pid}{note}; "
                 f"log {self.dashboard.log_path})")

    # ---- replay -----------------------------------------------------------------------------------
    def _events(self, cfg: Config) -> tuple[list[Any], str]:
        from stream_dp.dev import demo_data
        from stream_dp.replay import ColumnMapping, read_rows, sort_by_time

        o = self.opts
        if o.input_path is None:
            ratings = demo_data.generate_ratings(users=o.users, movies=o.movies, days=o.days, seed=o.seed)
            mapping = ColumnMapping(user="userId", key="title", time="timestamp")
            rows = demo_data.rows(ratings)
            what = (f"generated MovieLens-style ratings: {len(ratings):,} ratings by {o.users:,} users of "
                    f"{o.movies:,} movies over {o.days} days (seed {o.seed})")
        else:
            src = read_rows(o.input_path, fmt=o.input_format)
            mapping = ColumnMapping(user=o.user_column or cfg.events.user_field,
                                    key=o.key_column or cfg.events.key_field,
                                    time=o.time_column or cfg.events.time_field, time_unit=o.time_unit)
            mapping.check_columns(src.columns, o.input_path)
            # a file may be sorted by user (MovieLens is): replay it in event-time order
            ordered = sort_by_time(mapping.event(row) for row in src.rows)
            src.close()
            what = (f"{o.input_path} (user={mapping.user}, key={mapping.key}, time={mapping.time}; "
                    f"{len(ordered):,} rows, sorted by event time)")
            return list(ordered), what
        return [mapping.event(row) for row in rows], what

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
        from stream_dp import connections
        from stream_dp.replay import Pacer, replay

        o = self.opts
        speedup = None if o.fast else (o.speedup or cfg.windows.size_seconds / o.seconds_per_window)
        pace = "as fast as possible" if speedup is None else f"event time x{speedup:,.0f}"
        self.say(f"replaying  {what}; {pace}")
        producer = connections.kafka_producer(cfg.kafka)

        def run() -> None:
            try:
                self.replay_stats = replay(events, producer, cfg.kafka.events_topic, cfg.events,
                                           pacer=Pacer(speedup=speedup), should_stop=self.stop_requested.is_set)
            except BaseException as exc:  # noqa: BLE001 - reported by the main loop
                self._replay_error = exc
            finally:
                producer.close()

        self._replay_thread = threading.Thread(target=run, name="replay", daemon=True)
        self._replay_thread.start()

    # ---- printing releases -----------------------------------------------------------------------
    def follow(self, cfg: Config) -> int:
        from stream_dp.client import ReleaseSubscriber
        from stream_dp.tail import format_release

        window_types = set(cfg.releases.enabled())
        seen: dict[int, set[str]] = {}
        first_seen: dict[int, float] = {}
        follower = ReleaseSubscriber(cfg.kafka, cfg.kafka.releases_topic)
        t0 = time.monotonic()
        replay_reported = False
        try:
            while not self.stop_requested.is_set():
                for record in follower.poll(timeout_ms=300):
                    start = int((record.get("window") or {}).get("start", -1))
                    if start not in seen and self.opts.windows is not None and len(seen) >= self.opts.windows:
                        # windows are released in order: the N windows asked for are complete
                        self.windows_done = sorted(seen)
                        return 0
                    if start not in seen:
                        seen[start] = set()
                        first_seen[start] = time.monotonic()
                        self.say(f"\n{'━' * 100}")
                    seen[start].add(str(record.get("type")))
                    self.say(format_release(record, color=self.opts.color, delta_prime=cfg.budget.delta_prime))
                    self.releases_printed += 1
                self._mark_done(seen, first_seen, window_types)
                if self._replay_error is not None:
                    raise RuntimeError(f"replay failed: {self._replay_error}")
                if not replay_reported and self._replay_thread and not self._replay_thread.is_alive():
                    replay_reported = True
                    if self.replay_stats is not None:
                        self.say(f"\n· {self.replay_stats.summary()}")
                    if self.opts.windows is None and self.opts.duration is None:
                        self.say("· the last window closes when later events arrive; Ctrl-C stops the demo")
                for worker in self.workers:
                    if not worker.alive:
                        self.say(f"\nthe {worker.name} worker exited unexpectedly; its log:\n{worker.log_tail()}")
                        return 1
                if self.opts.windows is not None and len(self.windows_done) >= self.opts.windows:
                    return 0
                if self.opts.duration is not None and time.monotonic() - t0 >= self.opts.duration:
                    if self.opts.windows is not None:
                        self.say(f"\nonly {len(self.windows_done)} of {counted(self.opts.windows, 'window')} released "
                                 f"within {self.opts.duration:.0f}s")
                        return 1
                    return 0
            return 0
        finally:
            follower.close()

    def _mark_done(self, seen: dict[int, set[str]], first_seen: dict[int, float], types: set[str]) -> None:
        latest = max(seen, default=None)
        for start, kinds in seen.items():
            if start in self.windows_done:
                continue
            quiet = time.monotonic() - first_seen[start] > 5.0
            if types <= kinds or (latest is not None and start < latest) or quiet:
                self.windows_done.append(start)

    # ---- shutdown ---------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the replay, then the workers (SIGTERM, SIGKILL after a timeout), then the dev stack."""
        self.stop_requested.set()
        if self._replay_thread is not None:
            self._replay_thread.join(timeout=10)
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
        sent = f"{self.replay_stats.sent:,} events replayed" if self.replay_stats else "replay interrupted"
        windows, printed = counted(len(self.windows_done), "window"), counted(self.releases_printed, "release")
        return f"{sent}; {windows} released; {printed} printed"

    def run(self) -> int:
        """Run until a bound is reached, a worker dies, or :meth:`request_stop`; always clean up."""
        code = 1
        try:
            cfg = self.prepare_config()
            events, what = self._events(cfg)
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
