"""The suite's recorded test durations (``tests/durations.json``), used to hand the longest tests out first.

Under pytest-xdist a long test that starts near the end of the run keeps one worker busy after the others
finished. ``tests/conftest.py`` orders the collected tests longest first by these records (within the runs of
tests that share a session-scoped broker, so that no broker is started twice; a file with a module-scoped
fixture moves as one block), and unknown tests keep their place after the known ones. Only the order changes:
every test still runs, and a stale record costs time, never a result.

Regenerate from a JUnit XML report of a full run (e.g. ``PYTEST_ADDOPTS=--junitxml=/tmp/run.xml bash .ci/run``):

    python -m tests.support.durations /tmp/run.xml > tests/durations.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Hashable, Sequence
from itertools import groupby
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "tests" / "durations.json"
MIN_SECONDS = 3.0  #: shorter tests are not recorded: their place in the order hardly matters


def nodeid(classname: str, name: str, root: Path = ROOT) -> str | None:
    """The pytest node id of a JUnit test case (``classname`` is the dotted module path, then any classes; a
    doctest's is its module, and its name the dotted name pytest uses), or None when no file under ``root``
    matches."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (root / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return None


def records_from_junit(report: Path, root: Path = ROOT, min_seconds: float = MIN_SECONDS) -> dict[str, float]:
    """node id → seconds (setup, call and teardown) of every test case of ``report`` that took ``min_seconds``."""
    out: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        seconds = float(case.get("time", 0))
        node = nodeid(case.get("classname", ""), case.get("name", ""), root)
        if node is not None and seconds >= min_seconds:
            out[node] = round(seconds, 1)
    return dict(sorted(out.items()))


def load(path: Path = RECORDS) -> dict[str, float]:
    """The recorded durations ({} when the file is missing or unreadable: the collection order stays)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def longest_first(items: Sequence[T], *, seconds: Callable[[T], float], block: Callable[[T], Hashable],
                  scope: Callable[[T], str]) -> list[T]:
    """``items`` reordered longest first within each maximal run of consecutive items of one ``block`` (the
    runs stay where they are, so a session-scoped resource set up for a run is never set up again later). In a
    run, the items of one ``scope`` stay together in their order and move as a unit weighing the sum of their
    ``seconds``; units of equal weight (e.g. unknown, 0) keep their order.

    >>> t = {"a": 1.0, "b": 5.0, "c": 2.0, "x": 9.0, "y": 0.0}
    >>> longest_first(list("abcxy"), seconds=t.get, block=lambda i: i in "xy", scope=str)
    ['b', 'c', 'a', 'x', 'y']
    """
    out: list[T] = []
    for _, run in groupby(items, key=block):
        units: dict[str, list[T]] = {}
        for item in run:
            units.setdefault(scope(item), []).append(item)
        for unit in sorted(units.values(), key=lambda unit: -sum(seconds(i) for i in unit)):
            out += unit
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.support.durations JUNIT_XML > tests/durations.json", file=sys.stderr)
        return 2
    print(json.dumps(records_from_junit(Path(args[0])), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
