"""Where a :class:`~stream_dp.ingest.applier.BatchApplier` runs: on a thread, or in a child process.

:class:`ThreadRunner` runs it on a thread of the calling process (tests, embedding with an injected Redis
client); :class:`ProcessRunner` runs it in a child process, ``python -m stream_dp.ingest.applier_process``
(what ``workers.ingest`` uses). Both take up to :data:`MAX_IN_FLIGHT` batches and apply them strictly one
after another, in order, so chunks of one partition reach Redis in offset order. After a failed batch,
the ones queued behind it are not applied (their outcome says so) until the loop has rewound and calls
``resume()``: a later batch must never move an offset record past events of a failed one.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import subprocess
import sys
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection

from stream_dp.config import Config
from stream_dp.errors import StreamDPError
from stream_dp.ingest.applier import BatchApplier, BatchOutcome, BatchRequest, Failure, redis_transient
from stream_dp.ingest.crashpoints import NO_CRASHES, CrashPoints

log = logging.getLogger(__name__)

#: Batches a runner accepts before the loop must collect an outcome: the loop hands over the next batch
#: while the applier still works on the previous one, so neither waits for the other.
MAX_IN_FLIGHT = 2


def containers_in_flight(cfg: Config) -> int:
    """How many GC-tracked containers the batches of one worker process hold at most, with margin: the
    batch just polled and :data:`MAX_IN_FLIGHT` more, at most ``kafka.max_poll_records`` records each,
    about one container per record (the threshold of
    :func:`stream_dp.processes.collect_garbage_per_batches` in the loop and the applier)."""
    return (MAX_IN_FLIGHT + 2) * cfg.kafka.max_poll_records


class InOrder:
    """Applies batches one after another; after a failed one, refuses the rest until :meth:`resume`.

    Both runners serve requests through one of these, so "queued behind a failed batch" means the same
    everywhere: not applied, with a failure outcome that names the original error.
    """

    def __init__(self, applier: BatchApplier) -> None:
        self.applier = applier
        self.failed: Failure | None = None

    def outcome(self, req: BatchRequest) -> BatchOutcome:
        """``applier.apply_one(req)``, with an error turned into the outcome's failure (errors never cross
        to the loop as exceptions)."""
        if self.failed is not None:
            return BatchOutcome(failure=Failure(
                "NotApplied", f"queued behind a batch that failed ({self.failed.error}); replayed after the rewind",
                self.failed.dependency))
        try:
            return self.applier.apply_one(req)
        except Exception as exc:  # noqa: BLE001 - carried to the loop as an outcome
            self.failed = Failure(type(exc).__name__, str(exc), "redis" if redis_transient(exc) else None)
            return BatchOutcome(failure=self.failed)

    def resume(self) -> None:
        """The loop has collected every outcome and rewound: apply again."""
        self.failed = None


class ThreadRunner:
    """Runs a :class:`BatchApplier` on one thread of this process (up to :data:`MAX_IN_FLIGHT` batches,
    applied in order)."""

    def __init__(self, applier: BatchApplier) -> None:
        self.applier = applier
        self._in_order = InOrder(applier)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-apply")
        self._futures: deque[Future] = deque()

    def submit(self, req: BatchRequest) -> None:
        if len(self._futures) >= MAX_IN_FLIGHT:
            raise RuntimeError(f"{MAX_IN_FLIGHT} batches are already in flight")
        self._futures.append(self._executor.submit(self._in_order.outcome, req))

    def result(self) -> BatchOutcome:
        """The outcome of the oldest batch in flight (waits for it)."""
        if not self._futures:
            raise RuntimeError("no batch in flight")
        return self._futures.popleft().result()

    def resume(self) -> None:
        """Apply again after a failure (call with no batch in flight)."""
        if self._futures:
            raise RuntimeError("resume() with batches in flight: collect their outcomes first")
        self._in_order.resume()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.applier.close()


#: The message that tells the applier process to apply again after a failure.
RESUME = "resume"


class ApplierDied(RuntimeError, StreamDPError):
    """The applier process ended while the loop was waiting for an outcome."""


class ProcessRunner:
    """Runs a :class:`BatchApplier` in a child process, ``python -m stream_dp.ingest.applier_process``
    (up to :data:`MAX_IN_FLIGHT` batches, applied in order; requests and outcomes are pickles over a
    socket pair; the child's side is :func:`stream_dp.ingest.applier_process.serve`).

    The child runs in its own session and ignores SIGINT/SIGTERM (the loop decides when to stop: it
    finishes the batch first); the kernel SIGKILLs it if the loop's process dies (PR_SET_PDEATHSIG), so it
    never outlives it. It ends when its socket is closed.
    """

    def __init__(self, cfg: Config, *, crashpoints: CrashPoints = NO_CRASHES) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "stream_dp.ingest.applier_process", str(theirs.fileno()), str(os.getpid()),
                 str(logging.getLogger().getEffectiveLevel())],
                pass_fds=[theirs.fileno()], start_new_session=True, env=_child_env())
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        # the config and the crash points (production's: a no-op; crash tests inject a picklable one)
        self._conn.send_bytes(pickle.dumps((cfg, crashpoints), protocol=pickle.HIGHEST_PROTOCOL))
        self._in_flight = 0

    @property
    def pid(self) -> int:
        return self._proc.pid

    def submit(self, req: BatchRequest) -> None:
        if self._in_flight >= MAX_IN_FLIGHT:
            raise RuntimeError(f"{MAX_IN_FLIGHT} batches are already in flight")
        self._send(req)
        self._in_flight += 1

    def resume(self) -> None:
        """Apply again after a failure (call with no batch in flight)."""
        if self._in_flight:
            raise RuntimeError("resume() with batches in flight: collect their outcomes first")
        self._send(RESUME)

    def _send(self, message: object) -> None:
        try:
            self._conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:
            raise ApplierDied(f"the applier process ended (exit code {self._proc.poll()})") from exc

    def result(self) -> BatchOutcome:
        """The outcome of the oldest batch in flight (waits for it)."""
        if not self._in_flight:
            raise RuntimeError("no batch in flight")
        self._in_flight -= 1
        try:
            return pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError) as exc:
            try:
                code = self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
            raise ApplierDied(f"the applier process ended (exit code {code})") from exc

    def close(self) -> None:
        self._conn.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("the applier process did not end within 10 s; killing it")
            self._proc.kill()
            self._proc.wait(timeout=5)


def _child_env() -> dict[str, str]:
    """This environment, with the directory holding ``stream_dp`` first on PYTHONPATH (the child must
    import the same code as the loop, installed or not, from whatever working directory)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else os.pathsep.join([root, path])}
