"""The release worker process: ``python -m workers.release --config FILE``.

Thin wiring over :mod:`stream_dp.release` (see :mod:`stream_dp.release.worker` for what it does). Stops
cleanly on SIGTERM/SIGINT; serves Prometheus metrics on ``metrics.port``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from stream_dp.cli import release_cmd


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.release", description=__doc__.splitlines()[0])
    release_cmd.add_arguments(parser)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return release_cmd.run(args)


if __name__ == "__main__":
    sys.exit(main())
