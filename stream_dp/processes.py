"""Small process utilities shared by production and development code (no dev-stack dependency)."""

from __future__ import annotations

import ctypes
import signal
import socket


def die_with_parent(sig: int = signal.SIGTERM) -> None:  # pragma: no cover - runs in the child
    """Ask Linux to send ``sig`` to this process when its parent dies (prctl PR_SET_PDEATHSIG).

    Pass as ``preexec_fn`` to ``subprocess.Popen`` so a child never outlives the process that started it
    (the demo's workers, tests' worker subprocesses: an interrupted run leaves no orphans); a child can
    also call it itself (the ingest applier, with SIGKILL). Elsewhere than Linux it does nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, sig)
    except OSError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
