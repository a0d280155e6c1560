"""``python -m stream_dp.ingest.applier_process FD PARENT_PID LOG_LEVEL``: the ingest applier process.

Started by :class:`stream_dp.ingest.runners.ProcessRunner` with one end of a socket pair as ``FD``; not
meant to be run by hand. It reads the config, then applies batch requests until the socket closes.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection

from stream_dp import redact
from stream_dp.ingest.applier import BatchApplier
from stream_dp.ingest.runners import RESUME, InOrder, containers_in_flight
from stream_dp.processes import collect_garbage_per_batches, die_with_parent

#: GIL switch interval of the applier process (CPython's default is 5 ms): the Redis thread, once its
#: reply is in, would wait up to that long for the decoding thread to hand over the GIL.
SWITCH_INTERVAL_SECONDS = 0.001


def serve(conn: Connection, parent_pid: int) -> None:  # pragma: no cover - runs in the applier process
    """The applier process: read the config, then apply requests until the socket closes."""
    _kill_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    from stream_dp.connections import redis_client

    try:
        cfg, crashpoints = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return
    from stream_dp.redact import register_config_secrets

    register_config_secrets(cfg)  # this process's log lines mask them too
    applier = BatchApplier(cfg, redis_client(cfg.redis), crashpoints=crashpoints)
    in_order = InOrder(applier)
    collect_garbage_per_batches(containers_in_flight(cfg))  # start-up done: young collections per batches, not per records
    try:
        while True:
            try:
                raw = conn.recv_bytes()
            except (EOFError, OSError):
                return
            message = pickle.loads(raw)
            if isinstance(message, str) and message == RESUME:
                in_order.resume()
                continue
            out = in_order.outcome(message)
            try:
                conn.send_bytes(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
            except OSError:
                return
    finally:
        applier.close()


def _kill_with_parent(parent_pid: int) -> None:  # pragma: no cover - runs in the applier process
    """SIGKILL this process when its parent dies (nothing to finish: every chunk is atomic in Redis)."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the prctl
        os._exit(1)


def main(argv: list[str]) -> int:
    fd, parent_pid, level = int(argv[0]), int(argv[1]), int(argv[2])
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s[applier]: %(message)s")
    redact.install()  # URL credentials masked; serve() registers the config's secrets once it has it
    serve(Connection(fd), parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
