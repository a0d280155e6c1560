"""Release builders: for each batch release type, what to read, what to reserve, and how to run it.

A builder is a small object with one job per step (the :class:`Builder` protocol), so the worker treats
every type alike:

- ``measurement`` -- the mechanism at the configured parameters with its privacy map
  (:mod:`stream_dp.mechanisms.measurement`): ``measurement.privacy_map()`` is reserved in the ledger *before*
  the mechanism runs (a release the budget cannot cover never runs, docs/privacy.md §4);
- ``read(reader, window, watchlist)`` -- only the data the mechanism needs (top k̄+1 for top-k, the watched
  keys' counts for watch_topk, the count histogram and then the reported keys for sampling, the sorted prefix
  its search needs for the large-margin mechanism), as a :class:`~stream_dp.node_batches.ReadStep`: read ``now``, or -- when it
  is one command -- ``later``, in the round trip of the reservation (the mechanism still runs only once the
  hold is accepted: reading a closed window reveals nothing);
- ``run(window, data, rng)`` -- call the pure mechanism and build the record draft whose events are
  ``measurement.realized(result)``, what the release actually cost (pay-what-you-get for top-k: the outcomes
  returned, DR19 Theorem 3).

One module per type: :mod:`~stream_dp.release.topk_builder`, :mod:`~stream_dp.release.sample_builder`,
:mod:`~stream_dp.release.argmax_builder`, :mod:`~stream_dp.release.watch_topk_builder`,
:mod:`~stream_dp.release.histogram_builder` (named here too, the import path callers use). The online
``alerts`` type keeps state across windows and lives in :mod:`stream_dp.release.alerts`; its measurement is
:func:`~stream_dp.release.alerts.alerts_measurement`. Which builder a type has, and everything else that sets
a type apart, is its entry in the release type registry (:mod:`stream_dp.release.types`).
"""

from __future__ import annotations

from typing import Any, Protocol

from stream_dp.mechanisms.measurement import Measurement
from stream_dp.node_batches import ReadStep
from stream_dp.release.alerts import alerts_measurement
from stream_dp.release.argmax_builder import ArgmaxBuilder
from stream_dp.release.histogram_builder import HistogramBuilder
from stream_dp.release.records import RecordDraft
from stream_dp.release.sample_builder import SampleBuilder
from stream_dp.release.topk_builder import TopkBuilder
from stream_dp.release.watch_topk_builder import WatchTopkBuilder
from stream_dp.release.windows import Window, WindowReader

__all__ = ["ArgmaxBuilder", "Builder", "HistogramBuilder", "SampleBuilder", "TopkBuilder", "WatchTopkBuilder",
           "alerts_measurement"]


class Builder(Protocol):
    type: str
    mechanism: str

    @property
    def measurement(self) -> Measurement[Any]: ...

    def parameters(self) -> dict[str, Any]: ...

    def skip_reason(self, watchlist: list[str]) -> str | None: ...

    def read(self, reader: WindowReader, window: Window, watchlist: list[str]) -> ReadStep:
        """What the mechanism needs: ``.now()``, or -- when it is one command -- ``.later(ride)``, in the round
        trip of the reservation. Making the step reads nothing."""
        ...

    def run(self, window: Window, data: Any, rng: Any) -> RecordDraft: ...
