"""Reading an input file: CSV (with a header row, or columns by position) or JSON lines, plain or gzip.

Rows come out as mappings from column name to value, lazily; :class:`RowSource` also counts the bytes
consumed so a progress bar can show the share of the file done.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from stream_dp.replay.events import ReplayError


def detect_format(path: str | os.PathLike[str]) -> str:
    """``csv`` or ``jsonl`` from the file name (``.gz`` is looked through).

    >>> detect_format("ratings.csv.gz"), detect_format("events.ndjson")
    ('csv', 'jsonl')
    """
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith((".csv", ".tsv")):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise ReplayError(f"cannot tell the format of {os.fspath(path)!r} from its name; pass --format csv or jsonl")


class _CountingLines:
    """Iterate decoded lines of a binary stream, counting the bytes consumed (for progress)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.bytes_read = 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._fh:
            self.bytes_read += len(raw)
            yield raw.decode("utf-8")


@dataclass
class RowSource:
    """Rows of one input file plus what a progress bar needs (bytes read of ``size_bytes``)."""

    rows: Iterator[Mapping[str, Any]]
    columns: tuple[str, ...] | None
    size_bytes: int | None
    _lines: _CountingLines | None = field(default=None, repr=False)
    _fh: BinaryIO | None = field(default=None, repr=False)

    @property
    def bytes_read(self) -> int:
        return self._lines.bytes_read if self._lines is not None else 0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


def read_rows(path: str | os.PathLike[str], *, fmt: str | None = None, delimiter: str | None = None,
              header: bool = True) -> RowSource:
    """Open ``path`` (CSV, or one JSON object per line; ``.gz`` allowed).

    CSV rows are keyed by the header row's names; with ``header=False`` (files such as MovieLens 100K's
    tab-separated ``u.data``) by 1-based column position, ``"1"``, ``"2"``, …. The delimiter defaults to a
    tab for ``.tsv`` files and a comma otherwise."""
    fmt = fmt or detect_format(path)
    if fmt not in ("csv", "jsonl"):
        raise ReplayError(f"format must be csv or jsonl, got {fmt!r}")
    if delimiter is not None and len(delimiter) != 1:
        raise ReplayError(f"the delimiter must be one character, got {delimiter!r}")
    try:
        raw: BinaryIO = gzip.open(path, "rb") if os.fspath(path).endswith(".gz") else open(path, "rb")  # type: ignore[assignment]  # GzipFile: binary, not BinaryIO to typeshed
    except FileNotFoundError:
        raise ReplayError(f"input file {os.fspath(path)!r} does not exist") from None
    size = None if os.fspath(path).endswith(".gz") else os.path.getsize(path)
    lines = _CountingLines(raw)
    if fmt == "csv":
        if delimiter is None:
            delimiter = "\t" if os.fspath(path).removesuffix(".gz").endswith(".tsv") else ","
        if not header:
            columns, rows = _positional_rows(csv.reader(iter(lines), delimiter=delimiter))
            return RowSource(rows=rows, columns=columns, size_bytes=size, _lines=lines, _fh=raw)
        reader = csv.DictReader(iter(lines), delimiter=delimiter)
        columns = tuple(reader.fieldnames or ())
        return RowSource(rows=iter(reader), columns=columns, size_bytes=size, _lines=lines, _fh=raw)
    return RowSource(rows=_json_lines(lines, os.fspath(path)), columns=None, size_bytes=size, _lines=lines, _fh=raw)


def _positional_rows(reader: Iterator[list[str]]) -> tuple[tuple[str, ...], Iterator[Mapping[str, Any]]]:
    """Headerless CSV: the column names ``"1"`` … ``"n"`` (n from the first row) and the rows keyed so.

    >>> cols, rows = _positional_rows(iter([["196", "242", "3"], ["186", "302"]]))
    >>> cols, list(rows)
    (('1', '2', '3'), [{'1': '196', '2': '242', '3': '3'}, {'1': '186', '2': '302'}])
    """
    first = next(reader, None)
    if first is None:
        return (), iter(())
    columns = tuple(str(i + 1) for i in range(len(first)))

    def rows() -> Iterator[Mapping[str, Any]]:
        for row in itertools.chain([first], reader):
            yield {str(i + 1): v for i, v in enumerate(row)}

    return columns, rows()


def _json_lines(lines: Iterable[str], name: str) -> Iterator[Mapping[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{name} line {number} is not valid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ReplayError(f"{name} line {number} is not a JSON object")
        yield obj
