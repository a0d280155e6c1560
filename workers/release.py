"""``python -m workers.release --config FILE``: the release worker process (same as ``stream-dp release``).

A thin entry point over :func:`stream_dp.runtime.run_release_worker` and :mod:`stream_dp.runtime`
holds the process conventions (logging, signals: first graceful, second hard; exit codes in README.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from stream_dp.cli import release_cmd
from stream_dp.runtime import add_log_level_option, configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.release", description=__doc__.splitlines()[0])
    release_cmd.add_arguments(parser)
    add_log_level_option(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return release_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())
