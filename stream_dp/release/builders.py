"""Release builders: for each batch release type, what to read, what to reserve, and how to run it.

A builder is a small object with one job per step (the :class:`Builder` protocol), so the worker treats
every type alike:

- ``measurement`` -- the mechanism at the configured parameters with its privacy map
  (:mod:`stream_dp.mechanisms.measurement`): ``measurement.privacy_map()`` is reserved in the ledger *before*
  the mechanism runs (a release the budget cannot cover never runs, docs/privacy.md §4);
- ``read(reader, window, watchlist)`` -- only the data the mechanism needs (top k̄+1 for top-k, the watched
  keys' counts for watch_topk, the count histogram and then the reported keys for sampling, the whole window
  for the large-margin mechanism), as a :class:`~stream_dp.node_batches.ReadStep`: read ``now``, or -- when it
  is one command -- ``later``, in the round trip of the reservation (the mechanism still runs only once the
  hold is accepted: reading a closed window reveals nothing);
- ``run(window, data, rng)`` -- call the pure mechanism and build the record draft whose events are
  ``measurement.realized(result)``, what the release actually cost (pay-what-you-get for top-k: the outcomes
  returned, DR19 Theorem 3).

One module per type: :mod:`~stream_dp.release.topk_builder`, :mod:`~stream_dp.release.sample_builder`,
:mod:`~stream_dp.release.argmax_builder`, :mod:`~stream_dp.release.watch_topk_builder`,
:mod:`~stream_dp.release.histogram_builder` (named here too, the import path callers use). The online
``alerts`` type keeps state across windows and lives in :mod:`stream_dp.release.alerts`; its measurement is
:func:`~stream_dp.release.alerts.alerts_measurement`. ``BUILDERS`` is a dispatch table (one entry per type,
each tested), not an ``isinstance`` chain; :func:`release_measurements` gives every enabled type's measurement
(the budget plan and the worker's start check use only those).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from stream_dp.config import Config
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

__all__ = ["ArgmaxBuilder", "BUILDERS", "Builder", "HistogramBuilder", "SampleBuilder", "TopkBuilder",
           "WatchTopkBuilder", "alerts_measurement", "enabled_types", "release_measurements"]


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


BUILDERS: dict[str, Callable[[Config], Builder]] = {
    "topk": TopkBuilder,
    "sample": SampleBuilder,
    "argmax": ArgmaxBuilder,
    "watch_topk": WatchTopkBuilder,
    "histogram": HistogramBuilder,
}


def release_measurements(cfg: Config) -> dict[str, Measurement[Any]]:
    """Every enabled release type's measurement, in release order: the one source of what a window can cost
    (reserved by the worker, planned by the budget check). ``alerts``: the cost of opening an instance."""
    return {t: alerts_measurement(cfg.releases.alerts) if t == "alerts" else BUILDERS[t](cfg).measurement
            for t in enabled_types(cfg)}


def enabled_types(cfg: Config) -> list[str]:
    """Release types the config enables, in release order (top-k first: alerts watch what it released)."""
    return cfg.releases.enabled()
