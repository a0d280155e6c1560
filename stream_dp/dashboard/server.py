"""Serving the dashboard: bind the configured address, start the feed, run the app under uvicorn.

uvicorn handles SIGINT/SIGTERM (it stops accepting, closes the live streams after a short grace period);
then the feed thread stops and the subscriber closes.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator

import uvicorn

from stream_dp.config import Config
from stream_dp.dashboard.app import create_app
from stream_dp.dashboard.board import ReleaseBoard
from stream_dp.dashboard.feed import Feed
from stream_dp.errors import StreamDPError

log = logging.getLogger(__name__)
GRACEFUL_SHUTDOWN_SECONDS = 2


class _Server(uvicorn.Server):
    """uvicorn's server, except that a stop by SIGINT/SIGTERM ends with exit code 0 like the workers' (uvicorn
    re-raises the signal after its graceful shutdown, which makes the process look killed), and that the
    signals are taken over by :meth:`stopping_on_signals` from before the start, not from inside ``run``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # stopping_on_signals holds them for the whole of serve()

    @contextlib.contextmanager
    def stopping_on_signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM stop the server from here on -- also one that comes while it starts: uvicorn took the
        signals over only inside ``run``, after the ready line, and a Ctrl-C before that met asyncio's own
        handler, which cancelled the start-up task while the server went on (a dashboard that ignored the
        stop)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class PortTaken(OSError, StreamDPError):
    """The configured dashboard address cannot be bound."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (``port`` 0: any free port). Raises :class:`PortTaken`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortTaken(f"cannot serve the dashboard on {host}:{port} (dashboard.host / dashboard.port): "
                        f"{exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else (f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}/"


def serve(cfg: Config, *, topic: str | None = None, sock: socket.socket | None = None,
          on_ready: Callable[[str], None] | None = None) -> int:
    """Serve until SIGINT/SIGTERM. ``sock`` defaults to :func:`bind` of ``dashboard.host:port``."""
    topic = topic or cfg.kafka.releases_topic
    sock = sock or bind(cfg.dashboard.host, cfg.dashboard.port)
    board = ReleaseBoard(delta_prime=cfg.budget.delta_prime)
    feed = Feed(cfg.kafka, topic, board)
    app = create_app(board, feed, topic=topic)
    server = _Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                           timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS))
    with server.stopping_on_signals():
        feed.start()
        try:
            if on_ready is not None:
                on_ready(url_of(sock))
            server.run(sockets=[sock])  # returns at once if a signal came already (should_exit)
        finally:
            feed.stop()
            sock.close()
    return 0
