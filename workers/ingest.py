"""``python -m workers.ingest --config FILE``: the ingest worker process (same as ``stream-dp ingest``).

A thin entry point: :func:`stream_dp.runtime.run_ingest_worker` runs the worker that
:mod:`stream_dp.ingest.service` assembles, under the process conventions of :mod:`stream_dp.runtime`
(logging, start checks, signals: first graceful, second hard; exit codes in README.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stream_dp.cli import ingest_cmd
from stream_dp.runtime import process_main


def main(argv: Sequence[str] | None = None) -> int:
    return process_main(argv, prog="python -m workers.ingest", description=__doc__.splitlines()[0],
                        add_arguments=ingest_cmd.add_arguments, run=ingest_cmd.run)


if __name__ == "__main__":
    sys.exit(main())
