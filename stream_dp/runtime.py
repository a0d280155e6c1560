"""One way to run a stream-dp process: logging, config loading, start checks, /metrics, signals, exit codes.

Every long-running entry point (``python -m workers.ingest`` / ``workers.release``, ``stream-dp ingest`` /
``release`` / ``demo``) goes through these helpers, so they agree on:

- **logging**, configured once per process (:func:`configure_logging`), every line masked by
  :mod:`stream_dp.redact`;
- **the config**, loaded with a readable error naming the setting (and the environment variable that set
  it) or refused with :data:`ExitCode.CONFIG` (:func:`load_config_or_report`);
- **start checks** a worker must pass before it touches data (:func:`worker_preflight`): the budget plan,
  the Redis eviction policy, the public release schedule and the topic contract (:mod:`stream_dp.topics`);
- **the signal policy** (:class:`SignalPolicy`): the first SIGTERM/SIGINT asks for a graceful stop (the
  current batch or window finishes), the second exits at once with :data:`ExitCode.SECOND_SIGNAL`;
- **exit codes** (:class:`ExitCode`, tabled in README.md).

:func:`run_ingest_worker` and :func:`run_release_worker` put these together around the workers that
:mod:`stream_dp.ingest.service` and :mod:`stream_dp.release.service` assemble (those never import this
module: the runtime sits above the library, below the entry points).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import faulthandler
import io
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from stream_dp import redact
from stream_dp.config import Config, ConfigError, load_config

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVEL_VARIABLE = "STREAM_DP_LOG_LEVEL"  # a tool variable (config.TOOL_VARIABLES), not a setting


class ExitCode(enum.IntEnum):
    """How a stream-dp process ends (README.md, "Exit codes")."""

    OK = 0  #: clean stop (end of a bounded run, or after the first SIGTERM/SIGINT)
    FAILURE = 1  #: an unexpected error (its traceback is logged) or a check that found a problem
    CONFIG = 2  #: refused to start: bad config or command line, failed start check, metrics port taken
    SECOND_SIGNAL = 130  #: a second SIGTERM/SIGINT: stopped at once (uncommitted work is replayed)


# --------------------------------------------------------------------------------------------------
# Logging
# --------------------------------------------------------------------------------------------------


def configure_logging(level: str | None = None) -> None:
    """Configure the root logger once for this process (later calls only change the level).

    ``level`` defaults to ``$STREAM_DP_LOG_LEVEL`` or INFO. kafka-python narrates every connection at INFO,
    so its logger is held at WARNING or above. A fatal signal on a Python thread dumps every thread's stack
    to stderr (:mod:`faulthandler`). URL credentials are masked from here on;
    a loaded config's secrets once :func:`load_config_or_report` registers them."""
    name = (level or os.environ.get(LOG_LEVEL_VARIABLE) or "INFO").upper()
    root = logging.getLogger()
    if not getattr(root, "_stream_dp_configured", False):
        logging.basicConfig(format=LOG_FORMAT)
        root._stream_dp_configured = True  # type: ignore[attr-defined]
        # a fatal signal on a Python thread (a crash in a C extension) prints every thread's Python stack to
        # stderr -- the log -- instead of the process vanishing without a line (not where stderr is no file:
        # a test capturing it in-process)
        try:
            faulthandler.enable()
        except (io.UnsupportedOperation, AttributeError, ValueError):
            pass
    root.setLevel(name)
    logging.getLogger("kafka").setLevel(max(logging.WARNING, root.level))
    redact.install()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    """A ``--log-level`` value, any case; argparse turns the ValueError into one line naming the option."""
    name = text.upper()
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(LOG_LEVELS)}")
    return name


def add_log_level_option(parser: argparse.ArgumentParser, *, default: object = None) -> None:
    """``--log-level`` (default ``$STREAM_DP_LOG_LEVEL`` or INFO). A subcommand's parser gets it with
    ``default=argparse.SUPPRESS``, so ``stream-dp tail --log-level DEBUG`` works as ``stream-dp --log-level
    DEBUG tail`` does, and leaving it out after the subcommand keeps the one given before."""
    parser.add_argument("--log-level", default=default, type=log_level, metavar="LEVEL",
                        help=f"{', '.join(LOG_LEVELS)} (default: ${LOG_LEVEL_VARIABLE} or INFO)")


def process_main(argv: Sequence[str] | None, *, prog: str, description: str,
                 add_arguments: Callable[[argparse.ArgumentParser], object],
                 run: Callable[[argparse.Namespace], int]) -> int:
    """A process entry point (``python -m workers.…``): parse ``argv`` with the command's options plus
    ``--log-level``, configure logging once, then ``run(args)``; returns its :class:`ExitCode`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_arguments(parser)
    add_log_level_option(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return run(args)


# --------------------------------------------------------------------------------------------------
# Config and start checks
# --------------------------------------------------------------------------------------------------


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` (default: config/stream-dp.toml; STREAM_DP_* environment overrides apply)."""
    parser.add_argument("--config", help="TOML file (default: config/stream-dp.toml)")


def load_config_or_report(path: str | None) -> Config | None:
    """The validated config, or None after printing ``config error: …`` (naming the setting) to stderr.

    Empty broker / Redis addresses are taken from a running ``stream-dp devstack`` (:func:`with_devstack`).
    From now on every log line masks this config's secrets."""
    try:
        cfg = with_devstack(load_config(path))
    except ConfigError as exc:
        print(f"config error: {redact.redact_text(str(exc))}", file=sys.stderr)
        return None
    redact.install(cfg)
    return cfg


def with_devstack(cfg: Config) -> Config:
    """``cfg`` with ``kafka.bootstrap_servers`` / ``redis.url`` filled in from a running ``stream-dp devstack``
    when they are empty (logged, so nobody wonders where a worker connected). Unchanged otherwise.

    A configured deployment (both addresses set) never loads :mod:`stream_dp.dev.detached`; otherwise only its
    state file is read, nothing is started."""
    if cfg.kafka.bootstrap_servers and cfg.redis.url:
        return cfg
    from stream_dp.dev.detached import running_addresses, state_path

    found = running_addresses()
    if found is None:
        return cfg
    kafka, redis_cfg = cfg.kafka, cfg.redis
    used = []
    if not kafka.bootstrap_servers and found["bootstrap_servers"]:
        kafka = dataclasses.replace(kafka, bootstrap_servers=found["bootstrap_servers"])
        used.append(f"kafka.bootstrap_servers = {found['bootstrap_servers']}")
    if not redis_cfg.url and found["redis_url"]:
        redis_cfg = dataclasses.replace(redis_cfg, url=found["redis_url"])
        used.append(f"redis.url = {found['redis_url']}")
    if used:
        log.info("not configured, so using the running dev stack (stream-dp devstack up, %s): %s",
                 state_path(), "; ".join(used))
    return cfg.replace(kafka=kafka, redis=redis_cfg)


def redis_credentials_or_report(cfg: Config) -> bool:
    """False (after one line naming ``redis.password`` / ``redis.username``) when Redis refuses this process's
    credentials: retrying cannot heal that. A Redis that does not answer yet is no reason to refuse: the
    workers retry it with backoff."""
    import redis

    from stream_dp.connections import redis_client

    try:
        client = redis_client(cfg.redis)
    except ValueError:  # no redis.url: redis_preflight_or_report says so
        return True
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:  # a cluster client reads its slots here
        return _credentials_accepted(cfg, exc)
    try:
        client.ping()
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        return _credentials_accepted(cfg, exc)
    finally:
        client.close()
    return True


def _credentials_accepted(cfg: Config, exc: Exception) -> bool:
    from stream_dp.refusals import redis_refusal

    refusal = redis_refusal(exc)
    if refusal is not None:
        log.error("%s", refusal)
        return False
    log.warning("Redis at %s does not answer yet (%s); the worker retries until it does", cfg.redis.url,
                type(exc).__name__)
    return True


def redis_preflight_or_report(cfg: Config) -> bool:
    """Whether a worker may start on ``cfg.redis`` (:func:`~stream_dp.connections.preflight_redis`); logs
    why not (naming the setting) when it may not."""
    from stream_dp.connections import UnsafeRedis, preflight_redis

    try:
        preflight_redis(cfg.redis)
    except (UnsafeRedis, ValueError) as exc:
        log.error("%s", exc)
        return False
    return True


def schedule_or_report(cfg: Config) -> bool:
    """Record (first start) or check the deployment's public release schedule (:mod:`stream_dp.schedule`);
    logs why not (naming ``windows.start`` / ``windows.size_seconds``) when the config disagrees with it."""
    import redis

    from stream_dp.connections import redis_client
    from stream_dp.store.keys import Keys
    from stream_dp.schedule import ScheduleMismatch, establish

    client = redis_client(cfg.redis)
    try:
        sched = establish(client, Keys(cfg.redis.key_prefix, cfg.windows.shards), cfg.windows)
    except ScheduleMismatch as exc:
        log.error("config error: %s", exc)
        return False
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("release schedule not checked yet (Redis unreachable: %s); checked once Redis answers", exc)
        return True
    finally:
        client.close()
    log.info("release schedule: every %d s window from %d (windows.start), empty or not", sched.size, sched.start)
    return True


def budget_plan_or_report(cfg: Config) -> bool:
    """Whether a worker may start under ``cfg``'s budget: every worst-case window of a period fits the cap,
    or ``budget.allow_partial_period`` accepts that it does not (:mod:`stream_dp.release.budget_plan`);
    logs why not (naming the settings) when it may not."""
    from stream_dp.release.budget_plan import require_full_period

    try:
        require_full_period(cfg)
    except ConfigError as exc:
        log.error("%s", exc)
        return False
    return True


def topics_preflight_or_report(cfg: Config, roles: tuple[str, ...]) -> bool:
    """Whether the topics of ``roles`` keep the topic contract (:func:`stream_dp.topics.preflight`); logs the
    one line naming the topic, the config and the fix when one does not."""
    from stream_dp.topics import TopicContractError, preflight

    try:
        preflight(cfg.kafka, roles)
    except (TopicContractError, ValueError) as exc:
        log.error("%s", exc)
        return False
    return True


#: The topics each worker reads or writes, checked against the topic contract before it starts.
WORKER_TOPICS = {"ingest": ("events", "dead-letter"), "release": ("releases",)}


def worker_preflight(cfg: Config, role: str | None = None) -> bool:
    """The start checks every worker passes before it touches data: budget plan, Redis credentials, Redis,
    release schedule, and the topic contract of the topics ``role`` uses (:data:`WORKER_TOPICS`)."""
    return (budget_plan_or_report(cfg) and redis_credentials_or_report(cfg) and redis_preflight_or_report(cfg)
            and schedule_or_report(cfg)
            and (role not in WORKER_TOPICS or topics_preflight_or_report(cfg, WORKER_TOPICS[role])))


def serve_metrics_or_report(cfg: Config, registry: object, *, role: str) -> bool:
    """Serve /metrics on ``metrics.port`` (0 = off); False after logging why when the port is taken."""
    from stream_dp.metrics_http import MetricsPortError, serve_metrics

    try:
        serve_metrics(cfg.metrics, registry, role=role)  # type: ignore[arg-type]
    except MetricsPortError as exc:
        log.error("%s", exc)
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Signals
# --------------------------------------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalPolicy:
    """First SIGTERM/SIGINT: ``on_first()`` (a graceful stop: finish the batch or window, commit, close).
    Second: ``on_second()`` (e.g. kill child processes), then ``hard_exit(ExitCode.SECOND_SIGNAL)`` at once;
    uncommitted work is replayed by the next start. ``hard_exit`` is injectable for tests."""

    def __init__(self, on_first: Callable[[], object], *, on_second: Callable[[], object] | None = None,
                 first_message: str = "finishing the current work, then stopping",
                 hard_exit: Callable[[int], object] = os._exit) -> None:
        self.on_first, self.on_second = on_first, on_second
        self.first_message = first_message
        self.hard_exit = hard_exit
        self.received = 0

    def __call__(self, signum: int, _frame: FrameType | None = None) -> None:
        name = signal.Signals(signum).name
        self.received += 1
        if self.received == 1:
            log.info("%s received: %s (send it again to stop at once)", name, self.first_message)
            self.on_first()
            return
        log.warning("second %s: exiting immediately (exit code %d); uncommitted work will be replayed",
                    name, ExitCode.SECOND_SIGNAL)
        if self.on_second is not None:
            self.on_second()
        logging.shutdown()
        self.hard_exit(ExitCode.SECOND_SIGNAL)

    def install(self) -> Callable[[], None]:
        """Handle SIGTERM and SIGINT with this policy (main thread only); returns a function that restores
        the previous handlers."""
        previous = {sig: signal.signal(sig, self) for sig in STOP_SIGNALS}

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore


# --------------------------------------------------------------------------------------------------
# Running a worker
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Running:
    """A built worker as the runtime drives it: ``run`` blocks until ``stop`` was called; ``close`` after."""

    run: Callable[[], object]
    stop: Callable[[], object]
    close: Callable[[], object] = lambda: None
    stopping_message: str = "finishing the current work, then stopping"


def run_worker(cfg: Config, *, role: str, build: Callable[[object], Running]) -> int:
    """Start checks, /metrics on ``metrics.port`` (0 = off), then ``build(registry)`` runs until SIGTERM/SIGINT
    under :class:`SignalPolicy`. :data:`ExitCode.OK` after a clean stop, :data:`ExitCode.CONFIG` when a start
    check or the metrics port refused."""
    from prometheus_client import CollectorRegistry

    from stream_dp.refusals import Refusal

    redact.install(cfg)  # every log line of this process masks the config's secrets and URL credentials
    if not worker_preflight(cfg, role):
        return ExitCode.CONFIG
    registry = CollectorRegistry()
    if not serve_metrics_or_report(cfg, registry, role=role):
        return ExitCode.CONFIG
    worker = build(registry)
    SignalPolicy(worker.stop, first_message=worker.stopping_message).install()
    try:
        outcome = worker.run()
    except Refusal as exc:  # waiting cannot heal it: one line naming the setting or the command, exit code 2
        log.error("%s stopped: %s", role, exc)
        return ExitCode.CONFIG
    finally:
        worker.close()
    return outcome if isinstance(outcome, ExitCode) else ExitCode.OK


def run_ingest_worker(cfg: Config, *, accept_state_loss: bool = False) -> int:
    """The ingest worker until a signal: the first one finishes the batch, commits and closes.
    ``accept_state_loss``: continue although Redis lost the window state of the committed offsets
    (:mod:`stream_dp.ingest.state_check`)."""
    from stream_dp.ingest.runners import containers_in_flight
    from stream_dp.ingest.service import build_worker
    from stream_dp.processes import collect_garbage_per_batches

    from stream_dp.ingest.topic_identity import TopicRecreated

    def build(registry: object) -> Running:
        worker = build_worker(cfg, registry, accept_state_loss=accept_state_loss)  # type: ignore[arg-type]
        collect_garbage_per_batches(containers_in_flight(cfg))  # start-up done: young collections per batches

        def run() -> ExitCode:
            try:
                worker.run()
            except TopicRecreated:  # logged by the worker in one line; the operator must adopt the new topic
                return ExitCode.CONFIG
            return ExitCode.OK

        return Running(run, worker.stop, stopping_message="finishing the current batch, then committing and closing")

    return run_worker(cfg, role="ingest", build=build)


def run_release_worker(cfg: Config, *, worker_id: str | None = None, crashpoints: object = None) -> int:
    """The release worker until a signal: the first one lets the current window finish, then stops.
    ``crashpoints``: None in production; crash tests inject one (:mod:`stream_dp.release.crashpoints`)."""
    import threading

    from stream_dp.processes import freeze_start_up_heap
    from stream_dp.release.service import build_worker

    def build(registry: object) -> Running:
        extra: dict[str, Any] = {} if crashpoints is None else {"crashpoints": crashpoints}
        service = build_worker(cfg, registry=registry, worker_id=worker_id,  # type: ignore[arg-type]
                               after_start=freeze_start_up_heap, **extra)
        stop = threading.Event()
        return Running(lambda: service.worker.run(stop), stop.set, service.close,
                       stopping_message="finishing the current window, then stopping")

    return run_worker(cfg, role="release", build=build)


def with_release_flags(cfg: Config, *, poll_seconds: float | None, claim_ttl_seconds: float | None) -> Config:
    """``cfg`` with the command line's ``--poll-seconds`` / ``--claim-ttl-seconds`` over ``[release]``,
    validated like the file's values (an error names the setting)."""
    from stream_dp.config import with_settings

    changes = {name: value for name, value in (("poll_interval_seconds", poll_seconds),
                                               ("claim_ttl_seconds", claim_ttl_seconds)) if value is not None}
    if not changes:
        return cfg
    return with_settings(cfg, "release", **changes)
