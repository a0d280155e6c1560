"""The dashboard's subscriber: a thread reading the releases topic into the board and waking live pages.

It reads from the beginning of the topic without a consumer group (every dashboard shows the whole
history still on the topic and commits nothing). A message the client refuses -- malformed, or of a
schema version this release of stream-dp does not read -- is counted and shown (``/healthz``, a banner on
the page) and the feed goes on: a dashboard must not go dark because of one record, nor hide that it
skipped one. A client that fails is made anew after a capped backoff; while no broker answers (the
client reconnects by itself and its polls return nothing, :meth:`~stream_dp.client.ReleaseSubscriber.unreachable`)
the feed reports itself not connected, so ``/healthz`` says ``unavailable`` instead of ``ok``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stream_dp.backoff import Backoff
from stream_dp.broker_reach import BrokerUnreachable
from stream_dp.client import ReleaseRecordError, ReleaseSubscriber
from stream_dp.config import KafkaConfig
from stream_dp.dashboard.board import ReleaseBoard

log = logging.getLogger(__name__)
BACKOFF_INITIAL_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 5.0
LISTENER_QUEUE_SIZE = 1000


class Listeners:
    """Live pages (Server-Sent Events): each has an asyncio queue on the server's loop; the feed thread
    hands new records to all of them. A page that falls ``LISTENER_QUEUE_SIZE`` records behind gets a
    ``None`` (reload everything) instead of more records."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def attach(self) -> asyncio.Queue[dict[str, Any] | None]:
        """A queue for one page, on the running loop (call from a request handler)."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(LISTENER_QUEUE_SIZE)
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._queues.add(queue)
        return queue

    def detach(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        with self._lock:
            self._queues.discard(queue)

    def __len__(self) -> int:
        return len(self._queues)

    def publish(self, record: dict[str, Any]) -> None:
        """Hand ``record`` to every page (from any thread)."""
        with self._lock:
            loop, queues = self._loop, list(self._queues)
        if loop is None or loop.is_closed():
            return
        for queue in queues:
            try:
                loop.call_soon_threadsafe(_offer, queue, record)
            except RuntimeError:  # the loop closed meanwhile (server shutting down)
                return


def _offer(queue: asyncio.Queue[dict[str, Any] | None], record: dict[str, Any]) -> None:
    try:
        queue.put_nowait(record)
    except asyncio.QueueFull:  # too far behind: tell the page to reload instead
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(None)


@dataclass
class Feed:
    """Runs the subscriber thread; ``connected`` once the broker answered, ``error`` while it does not."""

    kafka: KafkaConfig
    topic: str
    board: ReleaseBoard
    listeners: Listeners = field(default_factory=Listeners)
    poll_timeout_ms: int = 500
    connected: bool = False
    error: str | None = None
    last_record_at: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    subscriber_factory: Callable[..., ReleaseSubscriber] = ReleaseSubscriber

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dashboard-feed", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _refused(self, error: ReleaseRecordError) -> None:
        log.warning("dashboard skipped a message on %s: %s", self.topic, error)
        self.board.reject(str(error))

    def _run(self) -> None:
        backoff = Backoff(BACKOFF_INITIAL_SECONDS, BACKOFF_MAX_SECONDS)
        while not self._stop.is_set():
            sub = None
            try:
                sub = self.subscriber_factory(self.kafka, self.topic, start="beginning", on_invalid=self._refused)
                while not self._stop.is_set():
                    records = sub.poll(timeout_ms=self.poll_timeout_ms)
                    outage = None if records else sub.unreachable()
                    if outage is not None:  # the client reconnects by itself: say so and poll on
                        if self.error != outage:
                            log.warning("dashboard feed: %s; the client keeps reconnecting", outage)
                        self.connected, self.error = False, outage
                        continue
                    self.connected, self.error = True, None
                    backoff.reset()
                    for record in records:
                        if self.board.add(record):
                            self.last_record_at = time.time()
                            self.listeners.publish(record)
            except Exception as exc:  # noqa: BLE001 - broker down, bad credentials ...: say so, retry
                self.connected = False
                # no broker at the start: the client's error names kafka.bootstrap_servers and the address
                self.error = str(exc) if isinstance(exc, BrokerUnreachable) else f"{type(exc).__name__}: {exc}"
                delay = backoff.next_delay()
                log.warning("dashboard feed: %s; retrying in %.1fs", self.error, delay)
                self._stop.wait(delay)
            finally:
                if sub is not None:
                    try:
                        sub.close()
                    except Exception:  # noqa: BLE001 - closing a broken connection
                        pass
