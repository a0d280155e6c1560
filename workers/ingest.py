"""``python -m workers.ingest --config FILE``: the ingest worker process (same as ``stream-dp ingest``).

A thin entry point: :func:`stream_dp.runtime.run_ingest_worker` runs the worker that
:mod:`stream_dp.ingest.service` assembles, under the process conventions of :mod:`stream_dp.runtime`
(logging, start checks, signals: first graceful, second hard; exit codes in README.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stream_dp.cli import ingest_cmd
from stream_dp.runtime import add_log_level_option, configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.ingest", description=__doc__.splitlines()[0])
    ingest_cmd.add_arguments(parser)
    add_log_level_option(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return ingest_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())
