"""The crash points object the crashing workers inject (``crashing_release.py``, ``crashing_ingest.py``), and
their shared entry point. A module of its own, imported by this name: the ingest worker's object travels
pickled to its applier process (:class:`stream_dp.ingest.runners.ProcessRunner`), which imports it from here
(the test puts this directory on the child's PYTHONPATH)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from stream_dp.runtime import process_main

CRASHED = "crash point reached, SIGKILL:"


class KillAt:
    """SIGKILL this process the ``nth`` time (1-based) ``point`` of ``points`` is reached (``spec`` is
    ``POINT[@N]``); with ``parent``, its parent first (the ingest worker whose applier process reached it:
    the whole worker dies at that step, as with a machine failure)."""

    def __init__(self, spec: str, points: Sequence[str], *, parent: bool = False) -> None:
        point, _, nth = spec.partition("@")
        if point not in points:
            raise ValueError(f"--crash-at {spec!r}: unknown crash point; known: {', '.join(points)}")
        self.point, self.nth, self.hits, self.parent = point, int(nth or 1), 0, parent

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.hits += 1
        if self.hits == self.nth:
            print(f"{CRASHED} {point}@{self.nth}", file=sys.stderr, flush=True)  # the tests count these
            if self.parent:
                os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


def crashing_main(argv: Sequence[str] | None, *, prog: str, description: str, command: object,
                  points: Sequence[str], parent: bool = False) -> int:
    """A worker's command (``stream_dp.cli.<x>_cmd``: ``add_arguments``, ``run(args, crashpoints=)``) with
    ``--crash-at POINT[@N]`` added, run with a :class:`KillAt` injected."""
    add: Callable[[argparse.ArgumentParser], None] = command.add_arguments  # type: ignore[attr-defined]

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add(parser)
        parser.add_argument("--crash-at", required=True, help=f"POINT[@N], POINT one of {', '.join(points)}")

    return process_main(argv, prog=prog, description=description, add_arguments=add_arguments,
                        run=lambda args: command.run(args,  # type: ignore[attr-defined]
                                                     crashpoints=KillAt(args.crash_at, points, parent=parent)))
