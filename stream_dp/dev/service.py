"""One child process of the dev stack on a loopback port: started, waited for, stopped, restarted, killed.

A :class:`Service` is a broker node or a redis-server (:mod:`stream_dp.dev.components` says which binary
with which arguments); it starts only once it accepts connections on its port -- and the port is its own,
not another process's (:class:`PortTaken`) -- and, for redis-server, once it has loaded its data. A first
start whose port another process took meanwhile moves to a fresh free port. Children started in the
foreground die with their parent (Linux parent-death signal); detached ones start a session of their own.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stream_dp.errors import StreamDPError
from stream_dp.processes import die_with_parent, free_port, listens
from stream_dp.redis_ready import wait_loaded

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 20.0
PORT_ATTEMPTS = 5  # a first start whose port was taken meanwhile tries this many ports in all


class DevStackError(RuntimeError, StreamDPError):
    """A dev-stack component could not be found, started or reached."""


class PortTaken(DevStackError):
    """Another process holds the port a service was to listen on (taken after :func:`free_port` chose it)."""


def wait_tcp(host: str, port: int, deadline: float, proc: subprocess.Popen[bytes], name: str, log_path: Path,
              log_start: int = 0, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    """Until ``proc`` accepts connections on ``port``; :class:`PortTaken` when another process holds it
    (``log_start``: where in ``log_path`` this start's output begins)."""
    while True:
        if proc.poll() is not None:
            tail = log_path.read_bytes()[log_start:][-2000:].decode(errors="replace") if log_path.exists() else ""
            error = PortTaken if "already in use" in tail.lower() else DevStackError
            raise error(f"{name} exited with code {proc.returncode} while starting on {host}:{port}; log {log_path}:\n{tail}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                pass
            if listens(proc.pid, port) is False:  # the port answers, but not for our process
                raise PortTaken(f"{name}: another process listens on {host}:{port}")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise DevStackError(f"{name} did not listen on {host}:{port} within {timeout:g}s") from None
            time.sleep(0.02)


@dataclass
class Service:
    """One child process on a fixed loopback port; can be stopped and restarted on the same port."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    host: str = "127.0.0.1"
    detached: bool = False
    own_process_group: bool = False  # not signalled by a Ctrl-C at the terminal (the owner stops it in order)
    ready_timeout: float = READY_TIMEOUT_SECONDS
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: float = field(default=0.0, repr=False)  # time.monotonic() of the last launch
    _log_start: int = field(default=0, repr=False)
    # Another port and its argv (a free port chosen anew) for a first start whose port another process took
    # meanwhile; None once started, or for a fixed port (clients already have the address)
    rebind: Callable[[], tuple[int, list[str]]] | None = field(default=None, repr=False)

    def start(self) -> float:
        """Start and wait until it accepts connections; returns the start-to-ready time in seconds. A first
        start with ``rebind`` moves to another port when another process took this one (up to
        :data:`PORT_ATTEMPTS` ports); :class:`PortTaken` otherwise."""
        if self.running:
            return 0.0
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                seconds = self._start_once()
            except PortTaken:
                self.stop()
                if self.rebind is None or attempt == PORT_ATTEMPTS:
                    raise
                log.info("%s: port %d taken by another process, trying another", self.name, self.port)
                self.port, self.argv = self.rebind()
                continue
            self.rebind = None  # started: the port is the service's address from now on
            return seconds
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self) -> float:
        self.launch()
        return self.wait_listening()

    def launch(self) -> None:
        """Start the process without waiting (nodes of a cluster listen only once a quorum of them runs)."""
        self.started_at = time.monotonic()
        logf = open(self.log_path, "ab")
        self._log_start = logf.tell()  # the log of an earlier start (a restart, a taken port) comes before
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=self.detached,
                process_group=0 if self.own_process_group and not self.detached else None,
                preexec_fn=None if self.detached else die_with_parent,
            )
        finally:
            logf.close()

    def wait_listening(self) -> float:
        """Wait until the launched process accepts connections -- and, for redis-server, answers PING, not
        LOADING (with an AOF it replays it first: stream_dp.redis_ready) -- returns the seconds since :meth:`launch`."""
        assert self.proc is not None, "launch() first"
        deadline = self.started_at + self.ready_timeout
        wait_tcp(self.host, self.port, deadline, self.proc, self.name, self.log_path, self._log_start,
                  self.ready_timeout)
        if self.name == "redis" and not wait_loaded(self.host, self.port, deadline,
                                                     alive=lambda: self.proc is not None and self.proc.poll() is None):
            raise DevStackError(f"redis-server on {self.host}:{self.port} did not finish loading its data within "
                                f"{self.ready_timeout}s; log {self.log_path}")
        return time.monotonic() - self.started_at

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: a crash, for outage tests."""
        self.stop(signal.SIGKILL)


def on_free_port(argv_for: Callable[[int], list[str]]) -> tuple[int, list[str]]:
    """A free port and the argv that listens on it (a :class:`Service`'s ``rebind``)."""
    port = free_port()
    return port, argv_for(port)
