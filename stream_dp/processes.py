"""Small process utilities shared by production and development code (no dev-stack dependency)."""

from __future__ import annotations

import ctypes
import gc
import os
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
    """A TCP port that is free on ``host`` right now -- only now: another process may bind it before the
    caller's server does (:func:`listens` tells whose the listener is)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp


def listens(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` (any address); None where the
    kernel does not say (no Linux ``/proc``).

    A server started on a :func:`free_port` that another process took meanwhile cannot bind it, yet the
    port accepts connections -- the other process's: asking who listens tells the two apart."""
    inodes: set[str] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as fh:
                next(fh)  # the header
                for line in fh:
                    cols = line.split()
                    if cols[3] == _TCP_LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(cols[9])
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:  # no such process, or no /proc at all
        return None if not os.path.isdir("/proc/self/fd") else False
    except PermissionError:  # another user's process
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def freeze_start_up_heap() -> int:
    """Move every object allocated so far out of the cyclic garbage collector's view (``gc.freeze()``);
    returns how many objects are frozen. Call once a long-running process's start-up is done.

    The modules, clients, config and tables a worker builds at start-up live as long as the process and are
    never garbage, yet every full (oldest-generation) collection traverses all of them: in the release
    worker that was a 60-110 ms pause in the middle of a window's release every ~10 windows
    (bench/README.md), the slowest window of every run. Frozen, they are skipped; what is allocated later is
    collected as before."""
    gc.freeze()
    return gc.get_freeze_count()


#: Young-generation collections wait for at least this many more tracked containers than were freed
#: (CPython's default threshold is 700; see :func:`collect_garbage_per_batches`).
MIN_GC_THRESHOLD = 700


def collect_garbage_per_batches(records_in_flight: int) -> int:
    """Tune the cyclic garbage collector of a process that handles records in batches; returns the
    young-generation threshold set.

    A batch allocates one or more GC-tracked containers per record (confluent-kafka's messages, the
    decoder's dicts, the ``(offset, user, key)`` tuples) that reference counting frees when the batch is
    done, none of them in a cycle. CPython's default threshold starts a young collection every 700
    containers *more than were freed* -- every few hundred records here -- and each one traverses every
    record still in flight, then promotes them so older collections traverse them again: in the ingest
    loop that was ~0.9 CPU s per 10⁶ events, half its CPU (bench/README.md). With the threshold above
    ``records_in_flight`` containers, a collection runs once that many more containers are alive than
    the batches in flight account for: cyclic garbage is still collected, and memory that really grows is
    still examined, but a steady batch flow triggers none. ``gc.freeze()`` first moves everything
    allocated so far (modules, clients) out of the collector's view: call this once start-up is done.
    """
    threshold = max(MIN_GC_THRESHOLD, int(records_in_flight))
    freeze_start_up_heap()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold, older, oldest)
    return threshold
