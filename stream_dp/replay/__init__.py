"""``stream-dp replay``'s library: a file of events (CSV or JSON lines) into the input topic, optionally paced.

The pieces are separate modules so each can be tested alone:

- :mod:`~stream_dp.replay.rows` -- :func:`read_rows` reads CSV (header row) or JSON lines, plain or gzip, and
  tracks how many bytes it has consumed (for a progress bar);
- :mod:`~stream_dp.replay.events` -- :class:`ColumnMapping` maps a row's columns to an :class:`Event` (user,
  key, event time), e.g. MovieLens' ``userId``/``movieId``/``timestamp``;
- :mod:`~stream_dp.replay.pacing` -- :class:`Pacer` decides when each event may be sent: as fast as possible,
  at most ``rate`` events per second, and/or event time sped up by a factor (``speedup=3600`` plays an hour
  of event time per second);
- :mod:`~stream_dp.replay.progress` -- :class:`Progress`, the one-line progress bar;
- :mod:`~stream_dp.replay.sending` -- :func:`replay` produces each event to the topic as the JSON object
  ingest expects (``{events.user_field: user, events.key_field: key, events.time_field: ts}``), **keyed by
  user** so one user's events stay in one partition, with the Kafka record timestamp set to the event time,
  and never an event stamped further ahead than the topic accepts.

Rows without a user or key are skipped and counted, never half-sent; a column that does not exist at all
is an error naming the column and the ones that do.
"""

from stream_dp.replay.events import TIME_UNITS, ColumnMapping, Event, ReplayError, parse_time, sort_by_time
from stream_dp.replay.pacing import Pacer
from stream_dp.replay.progress import Progress
from stream_dp.replay.rows import RowSource, detect_format, read_rows
from stream_dp.replay.sending import CLOCK_MARGIN_S, ReplayStats, replay

__all__ = ["CLOCK_MARGIN_S", "TIME_UNITS", "ColumnMapping", "Event", "Pacer", "Progress", "ReplayError", "ReplayStats",
           "RowSource", "detect_format", "parse_time", "read_rows", "replay", "sort_by_time"]
