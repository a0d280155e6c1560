"""The states of a window shard: its meta hash's ``state`` field (:meth:`~stream_dp.store.keys.Keys.window_meta`).

- :data:`OPEN` -- written by the apply script with a shard's first chunk (``lua/apply_window.lua``);
- :data:`CLOSED` -- written by ingest when the global watermark passes the window's end
  (``lua/close_window.lua``): from then on the apply script answers every chunk of the window as late;
- :data:`RELEASED` -- written by the release worker once every release of the window is published, fenced by
  its claim (``lua/release_shard.lua``); the bounding log is deleted then. A released window never goes
  back to closed (``close_window.lua`` keeps the state).

The scripts read and write the same names as Lua constants (:func:`lua_constants`, the ``window_state``
prelude of :mod:`stream_dp.store.scripts`), so the states are spelled once.
"""

from __future__ import annotations

OPEN = "open"
CLOSED = "closed"
RELEASED = "released"
#: In the order a window goes through them.
STATES: tuple[str, ...] = (OPEN, CLOSED, RELEASED)


def lua_constants() -> str:
    """The states as Lua locals ``WINDOW_OPEN``, ``WINDOW_CLOSED``, ``WINDOW_RELEASED`` (a script prelude).

    >>> print(lua_constants(), end="")
    local WINDOW_OPEN, WINDOW_CLOSED, WINDOW_RELEASED = 'open', 'closed', 'released'
    """
    return f"local WINDOW_OPEN, WINDOW_CLOSED, WINDOW_RELEASED = '{OPEN}', '{CLOSED}', '{RELEASED}'\n"
