"""``python -m stream_dp.ingest.applier_process FD PARENT_PID LOG_LEVEL``: the ingest applier process.

Started by :class:`stream_dp.ingest.applier.ProcessRunner` with one end of a socket pair as ``FD``; not
meant to be run by hand. It reads the config, then applies batch requests until the socket closes.
"""

from __future__ import annotations

import logging
import sys
from multiprocessing.connection import Connection

from stream_dp import redact
from stream_dp.ingest.applier import serve


def main(argv: list[str]) -> int:
    fd, parent_pid, level = int(argv[0]), int(argv[1]), int(argv[2])
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s[applier]: %(message)s")
    redact.install()  # URL credentials masked; serve() registers the config's secrets once it has it
    serve(Connection(fd), parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
