"""Tables the commands print (budget list, history, plan), drawn by rich: columns sized to their contents, numbers right-aligned.

The output is plain text (no colour, no terminal control) whether or not it goes to a terminal, so it
can be piped and compared; every command that prints a table also has ``--json`` for machines.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table


def table(columns: Sequence[str], rows: Sequence[Sequence[object]], *, numeric: Sequence[str] = (),
          title: str | None = None) -> Table:
    """A table of ``rows`` (cells already formatted, or anything ``str`` turns into text); the ``numeric``
    columns are right-aligned."""
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False)
    for name in columns:
        t.add_column(name, justify="right" if name in numeric else "left", no_wrap=True, overflow="fold")
    for row in rows:
        t.add_row(*(str(cell) for cell in row))
    return t


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1 (nouns that take an s).

    >>> counted(1, "window"), counted(2, "window"), counted(0, "release")
    ('1 window', '2 windows', '0 releases')
    """
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def render(t: Table, *, width: int = 160) -> str:
    """``t`` as plain text."""
    console = Console(width=width, color_system=None, force_terminal=False, highlight=False, emoji=False,
                      record=False, file=io.StringIO())  # never written: capture collects the text
    with console.capture() as captured:
        console.print(t)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def print_table(t: Table, out: TextIO) -> None:
    print(render(t), file=out)
