"""Sockets kafka-python 3.0 leaves open on three connection paths, closed (:func:`install`).

kafka-python 3.0 runs each client's connections as tasks of the client's own event loop (``kafka.net``). On
three paths a socket outlives its use without being closed. Its finalizer closes it later, whenever the
garbage collector reaches the client's reference cycles -- seconds or minutes on, in unrelated code -- with
a ``ResourceWarning: unclosed <socket.socket …>``, and until then the process holds the descriptor:

1. **A connection attempt that does not complete.** ``KafkaNetSocket.connect`` makes the socket and awaits
   ``sock_connect``; when that raises (refused, timed out) or is cancelled (the client was closed while it
   connected: closing the client's loop closes the waiting task), nothing closes the socket. During a broker
   outage every reconnect attempt left one behind.
2. **A TLS handshake that fails** (a wrong CA, a listener that does not speak TLS) or is cancelled:
   ``KafkaSSLTransport.handshake`` raises and the wrapped socket is left as it is, once per attempt.
3. **A connection closed while a request is still buffered.** The transport's ``close()`` leaves the socket
   to its write task, to close once the buffer is flushed; closing the client right after (its loop cancels
   the pending tasks) cancels that task, and the socket is never closed.

Paths 1 and 3 race a client's ``close()`` against its own connection setup: a client closed soon after it
was made (a short-lived admin client or consumer, a worker stopping) hit them now and then. Under the test
suite's ``filterwarnings = error`` the late ResourceWarning failed whichever test the worker ran next.

:func:`install` wraps the three coroutines so that each closes the socket on those paths (and only there;
a completed step is unchanged). The modules that build kafka-python clients call it when imported
(:mod:`stream_dp.connections`, :mod:`stream_dp.client`; the test suite's conftest for the tests' own
clients). It applies only to the 3.0 series, whose internals it was written against; on another version it
changes nothing, and tests/unit/test_kafka_sockets.py (each path against real sockets) says whether that
version still leaks.
The three paths are also in kafka-python's development branch (3.1, checked at its commit a3b3836f).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

#: kafka-python releases whose ``kafka.net`` internals :func:`install` was written against.
PATCHED_SERIES = "3.0."

_MARK = "_stream_dp_closes_its_socket"

_installed = False


def _closing_on_failure(sock_connect: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Path 1: ``sock_connect(self, net, sock, sockaddr, timeout_at=None)`` closes ``sock`` when it does not
    return it connected."""

    @functools.wraps(sock_connect)
    async def connect(self: Any, net: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await sock_connect(self, net, sock, *args, **kwargs)
        except BaseException:  # refused, timed out, or cancelled (GeneratorExit): the socket is nobody's
            sock.close()
            raise

    setattr(connect, _MARK, True)
    return connect


def _closing_on_failed_handshake(handshake: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Path 2: a transport's ``handshake()`` closes its socket when it fails or is cancelled (the transport is
    not handed to a connection then, so nothing else would)."""

    @functools.wraps(handshake)
    async def handshake_or_close(self: Any) -> Any:
        try:
            return await handshake(self)
        except BaseException:
            self._close()
            raise

    setattr(handshake_or_close, _MARK, True)
    return handshake_or_close


def _closing_when_cancelled(write_to_sock: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """Path 3: a transport's write task, cancelled after ``close()`` had left the socket to it, closes the
    socket (what it does itself once the buffer is flushed)."""

    @functools.wraps(write_to_sock)
    async def write(self: Any) -> Any:
        try:
            return await write_to_sock(self)
        except GeneratorExit:
            if self._closed:
                self._write_task = None  # this task, being cancelled: ``_close`` must not cancel it again
                self._close()
            raise

    setattr(write, _MARK, True)
    return write


def install() -> bool:
    """Wrap the three coroutines (module docstring) once; True when kafka-python's are wrapped."""
    global _installed
    if _installed:
        return True
    try:
        from kafka.net.inet import KafkaNetSocket
        from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport
        from kafka.version import __version__
    except ImportError:  # another layout (kafka-python 3.1 moved kafka.net's modules)
        return False
    if not __version__.startswith(PATCHED_SERIES):
        log.debug("kafka-python %s: its connection sockets are left as they are (wrapped for %sx only)",
                  __version__, PATCHED_SERIES)
        return False
    targets = ((KafkaNetSocket, "sock_connect", _closing_on_failure),
               (KafkaSSLTransport, "handshake", _closing_on_failed_handshake),
               (KafkaTCPTransport, "_write_to_sock", _closing_when_cancelled))
    if not all(name in vars(cls) for cls, name, _wrap in targets):
        log.debug("kafka-python %s: not the connection code its sockets are closed for; left as it is", __version__)
        return False
    for cls, name, wrap in targets:
        original = vars(cls)[name]
        if not getattr(original, _MARK, False):
            setattr(cls, name, wrap(original))
    _installed = True
    return True
