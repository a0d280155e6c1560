"""kafka-python's sockets are closed on the three paths where kafka-python 3.0 left them to the garbage
collector (:mod:`stream_dp.kafka_sockets`): each path is driven for real -- a refused connection, a client
closed while its connection attempt waits on the kernel, a TLS handshake with a listener that does not speak
TLS, a transport closed with a request still buffered -- and a collection afterwards must finalise no
unclosed socket. Without the wrappers each of these tests fails (tried: one ResourceWarning per attempt).

No broker is needed: what a client meets at its socket is the point (a refused connect is exactly what it
meets during a broker outage). tests/conftest.py installs the wrappers, as the service's modules do."""

from __future__ import annotations

import gc
import logging
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from kafka import KafkaConsumer

from stream_dp import kafka_sockets
from stream_dp.processes import free_port
from tests.integration.waiting import wait_for

#: a client that needs no ApiVersions round trip to start, and retries quickly
FAST_RETRIES = {"api_version": (2, 5), "reconnect_backoff_ms": 10, "reconnect_backoff_max_ms": 20}

_SYN_SENT = "02"  # /proc/net/tcp's state of a connect() the peer has not answered


@contextmanager
def unclosed_sockets() -> Iterator[list[str]]:
    """The ``unclosed <socket…>`` ResourceWarnings of sockets finalised in the block or by the garbage
    collection at its end (collected here rather than failing the test from inside a finalizer)."""
    found: list[str] = []
    previous = sys.unraisablehook

    def hook(unraisable: "sys.UnraisableHookArgs") -> None:
        if isinstance(unraisable.exc_value, ResourceWarning) and "socket" in str(unraisable.exc_value):
            found.append(str(unraisable.exc_value))
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            yield found
            gc.collect()
    finally:
        sys.unraisablehook = previous


@contextmanager
def kafka_messages() -> Iterator[list[str]]:
    """kafka-python's log lines in the block, as text only. (pytest's log capture keeps each record, whose
    arguments include the exception of a failed connection, whose traceback holds the socket: a leaked
    socket would then be finalised after the test, not in it.)"""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    kafka = logging.getLogger("kafka")
    handler, propagate = Collect(), kafka.propagate
    kafka.addHandler(handler)
    kafka.propagate = False
    try:
        yield messages
    finally:
        kafka.propagate = propagate
        kafka.removeHandler(handler)


def _poll_then_close(consumer: KafkaConsumer, until: Callable[[], bool], what: str) -> None:
    """Poll ``consumer`` (nothing arrives) until ``until()``, then close it; it is dropped on return, so the
    collection at the end of :func:`unclosed_sockets` reaches whatever it left."""
    try:
        wait_for(lambda: consumer.poll(timeout_ms=50) == {} and until(), timeout=30, what=what)
    finally:
        consumer.close()


def _connects_waiting(port: int) -> int:
    """Connections to loopback ``port`` whose SYN is unanswered (Linux ``/proc/net/tcp``)."""
    with open("/proc/net/tcp") as fh:
        next(fh)
        return sum(1 for line in fh
                   if line.split()[3] == _SYN_SENT and int(line.split()[2].rsplit(":", 1)[1], 16) == port)


def test_the_wrappers_apply_to_the_installed_kafka_python_or_it_no_longer_leaks():
    """Installed on kafka-python 3.0.x; on any other version nothing is wrapped (and the tests below say
    whether that version still needs it)."""
    from kafka.version import __version__

    assert kafka_sockets.install() is __version__.startswith(kafka_sockets.PATCHED_SERIES)
    assert kafka_sockets.install() is kafka_sockets.install()  # idempotent


def test_refused_connection_attempts_close_their_sockets():
    """A broker outage: every reconnect attempt is refused (without the wrapper: one unclosed socket each)."""
    with kafka_messages() as messages, unclosed_sockets() as leaked:
        _poll_then_close(KafkaConsumer(bootstrap_servers=f"127.0.0.1:{free_port()}", **FAST_RETRIES),
                         lambda: sum("Connection failed" in m and "ECONNREFUSED" in m for m in messages) >= 3,
                         "three refused connection attempts")
    assert leaked == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the connection's state in /proc/net/tcp")
def test_a_client_closed_while_it_connects_closes_the_socket():
    """The race a short-lived client ran: closed while its connect() still waited on the kernel. A listener
    whose accept queue is full (backlog 0, one connection queued) leaves the next SYN unanswered, so the
    client's attempt waits until the client is closed."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        # the connection below fills the accept queue
        with socket.create_connection(("127.0.0.1", port)), kafka_messages(), unclosed_sockets() as leaked:
            _poll_then_close(KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", **FAST_RETRIES),
                             lambda: _connects_waiting(port) >= 1, "the client's connect() waiting")
    assert leaked == []


def test_failed_tls_handshakes_close_their_sockets():
    """``security_protocol = "SSL"`` against a listener that answers in plain text: each handshake fails."""
    handshakes = []
    done = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.05)  # so the server sees ``done``

        def answer_in_plain_text() -> None:
            while not done.is_set():
                try:
                    conn, _addr = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                handshakes.append(1)

        server = threading.Thread(target=answer_in_plain_text, daemon=True)
        server.start()
        try:
            with kafka_messages(), unclosed_sockets() as leaked:
                _poll_then_close(KafkaConsumer(bootstrap_servers=f"127.0.0.1:{listener.getsockname()[1]}",
                                               security_protocol="SSL", **FAST_RETRIES),
                                 lambda: len(handshakes) >= 2, "two failed TLS handshakes")
        finally:
            done.set()
            server.join(timeout=10)
    assert leaked == []


def test_a_transport_closed_with_a_request_buffered_closes_its_socket_when_its_loop_closes():
    """``close()`` leaves the socket to the write task while a request is buffered; closing the client's
    event loop cancels that task. Here the peer reads nothing, so the request stays buffered."""
    from kafka.net.selector import NetworkSelector
    from kafka.net.transport import KafkaTCPTransport

    ours, peer = socket.socketpair()
    with peer:
        ours.setblocking(False)
        try:
            while True:
                ours.send(b"x" * 65536)  # the kernel's buffer fills: the transport's request stays buffered
        except BlockingIOError:
            pass
        net = NetworkSelector()
        transport = KafkaTCPTransport(net, ours)
        transport.write(b"a request")
        net.drain()  # the write task runs and waits until the socket takes more
        transport.close()
        net.close()
        assert ours.fileno() == -1
