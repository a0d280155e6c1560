"""A worker process's life: parse, log, check, serve /metrics, run until a signal, and end with an exit code.

:class:`SignalPolicy`: the first SIGTERM/SIGINT asks for a graceful stop (the current batch or window
finishes), the second exits at once with :data:`ExitCode.SECOND_SIGNAL` (uncommitted work is replayed by
the next start). :func:`run_worker` runs the start checks (:mod:`stream_dp.runtime.start_checks`) and a
worker that ``build`` assembles; a :class:`~stream_dp.refusals.Refusal` ends it with :data:`ExitCode.CONFIG`.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import logging
import os
import signal
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from stream_dp import redact
from stream_dp.config import Config
from stream_dp.runtime.logs import add_log_level_option, configure_logging
from stream_dp.runtime.start_checks import serve_metrics_or_report, worker_preflight

log = logging.getLogger(__name__)


class ExitCode(enum.IntEnum):
    """How a stream-dp process ends (README.md, "Exit codes")."""

    OK = 0  #: clean stop (end of a bounded run, or after the first SIGTERM/SIGINT)
    FAILURE = 1  #: an unexpected error (its traceback is logged) or a check that found a problem
    CONFIG = 2  #: refused to start: bad config or command line, failed start check, metrics port taken
    SECOND_SIGNAL = 130  #: a second SIGTERM/SIGINT: stopped at once (uncommitted work is replayed)


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


def run_ingest_worker(cfg: Config, *, accept_state_loss: bool = False, crashpoints: object = None) -> int:
    """The ingest worker until a signal: the first one finishes the batch, commits and closes.
    ``accept_state_loss``: continue although Redis lost the window state of the committed offsets
    (:mod:`stream_dp.ingest.state_check`); ``crashpoints``: None in production, crash tests inject one
    (:mod:`stream_dp.ingest.crashpoints`)."""
    from stream_dp.ingest.runners import containers_in_flight
    from stream_dp.ingest.service import build_worker
    from stream_dp.processes import collect_garbage_per_batches

    from stream_dp.ingest.topic_identity import TopicRecreated

    def build(registry: object) -> Running:
        extra: dict[str, Any] = {} if crashpoints is None else {"crashpoints": crashpoints}
        worker = build_worker(cfg, registry, accept_state_loss=accept_state_loss, **extra)  # type: ignore[arg-type]
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
