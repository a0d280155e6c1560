"""``python -m workers.release --config FILE``: the release worker process (same as ``stream-dp release``).

A thin entry point over :func:`stream_dp.runtime.run_release_worker` and :mod:`stream_dp.runtime`
(logging, start checks, signals: first graceful, second hard; exit codes in README.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stream_dp.cli import release_cmd
from stream_dp.runtime import process_main


def main(argv: Sequence[str] | None = None) -> int:
    return process_main(argv, prog="python -m workers.release", description=__doc__.splitlines()[0],
                        add_arguments=release_cmd.add_arguments, run=release_cmd.run)


if __name__ == "__main__":
    sys.exit(main())
