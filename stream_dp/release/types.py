"""The release types, each registered once (:data:`REGISTRY`): its builder and what sets it apart.

A release type is a ``[releases.<name>]`` section of the config (:data:`stream_dp.config.RELEASE_TYPES`, in
release order) and the ``type`` string of its records (config/release.schema.json; the wire format is fixed).
Whatever the worker, the budget plan and the rebuild from the topic do differently for one type is a field of
its :class:`ReleaseType` here, never a comparison with its name elsewhere, so adding a type is its section,
its builder and one entry below:

- ``builder`` -- a batch type's builder (:mod:`stream_dp.release.builders`): what it reads, what it reserves,
  how its record is drafted (``run``). None for the stateful type, whose release is one Adaptive SVT instance
  carried across windows (:mod:`stream_dp.release.alerts`, released by
  :class:`~stream_dp.release.unit_alerts.WindowAlerts`); ``opening`` is then the measurement charged when an
  instance opens;
- ``charge`` (derived) -- what its worst case is charged per: ``"window"`` (every window: the builder's
  measurement) or ``"instance"`` (an instance opening, its whole ε, in the window it opens in;
  docs/privacy.md §4);
- ``leads`` -- released first in a window: its reservation and data ride with the claim, and the stateful
  type's steps ride on its round trips (:mod:`stream_dp.release.unit`);
- ``feeds_watchlist`` -- the keys its released records publish join the public watchlist (after its commit;
  when the index is rebuilt from the topic, :mod:`stream_dp.release.schedule_rebuild`);
- ``watches`` -- it reads the watchlist (``releases.alerts``' settings say what the watchlist is);
- ``heavy_hitter`` -- one of the heavy-hitter releases the planner chooses between
  (:mod:`stream_dp.release.release_choice`);
- ``plan_note`` -- what ``stream-dp budget plan`` says about its worst case;
- ``count`` -- the type's own metrics of a freshly published record (:class:`~stream_dp.release.metrics.ReleaseMetrics`);
- ``shows_key`` -- which items of its released records show their key present, for a domain learned from
  published records (:func:`~stream_dp.release.released_domain.found_keys`; None: every item).

Every field is a public fact of the config: nothing here looks at data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from stream_dp.config import Config
from stream_dp.mechanisms.measurement import Measurement
from stream_dp.release.alerts import alerts_measurement
from stream_dp.release.builders import (ArgmaxBuilder, Builder, HistogramBuilder, SampleBuilder, TopkBuilder,
                                        WatchTopkBuilder)

if TYPE_CHECKING:
    from stream_dp.release.metrics import ReleaseMetrics

Charge = Literal["window", "instance"]
CountFresh = Callable[["ReleaseMetrics", Mapping[str, Any]], None]

#: The config section that says what the watchlist is (its keys, whether released top-k keys join it, a
#: learned domain): ``releases.alerts``, whichever enabled type watches it.
WATCHLIST_SECTION = "alerts"


@dataclass(frozen=True)
class ReleaseType:
    """One release type (the module's docstring says what each field decides)."""

    name: str
    builder: Callable[[Config], Builder] | None
    opening: Callable[[Config], Measurement[Any]] | None = None
    leads: bool = False
    feeds_watchlist: bool = False
    watches: bool = False
    heavy_hitter: bool = False
    plan_note: str | None = None
    count: CountFresh | None = None
    shows_key: Callable[[Mapping[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        if (self.builder is None) == (self.opening is None):
            raise ValueError(f"release type {self.name!r}: a builder (batch) or an opening measurement "
                             "(stateful), exactly one")

    @property
    def stateful(self) -> bool:
        """Carried across windows (an SVT instance), released by the window's alerts part, not a builder."""
        return self.builder is None

    @property
    def charge(self) -> Charge:
        return "instance" if self.stateful else "window"

    def measurement(self, cfg: Config) -> Measurement[Any]:
        """The worst case one release of this type reserves: a window's (batch), an instance opening's
        (stateful)."""
        if self.opening is not None:
            return self.opening(cfg)
        assert self.builder is not None
        return self.builder(cfg).measurement


def _count_bottom_stop(metrics: ReleaseMetrics, record: Mapping[str, Any]) -> None:
    """Top-k: a release that stopped early at the bottom outcome (⊥)."""
    if record.get("hit_bottom"):
        metrics.bottom_stops.inc()


def _count_svt(metrics: ReleaseMetrics, record: Mapping[str, Any]) -> None:
    """Alerts: the answers published, and an instance opened (with the ε it was charged)."""
    for item in record["items"]:
        metrics.svt_answers.labels("above" if item["above"] else "below").inc()
    if record.get("info", {}).get("opened") and record["status"] == "released":
        metrics.svt_instances.inc()
        metrics.svt_epsilon.inc(record["cost"]["epsilon"])


def _interval_above_zero(item: Mapping[str, Any]) -> bool:
    """Histogram: the item's interval lies above 0 (``ci_low`` ≥ 1), so the release shows the key present."""
    return int(item.get("ci_low", 0)) >= 1


#: Every release type, in release order (the config's: top-k first, the alerts watch what it released).
REGISTRY: dict[str, ReleaseType] = {t.name: t for t in (
    ReleaseType("topk", TopkBuilder, leads=True, feeds_watchlist=True, heavy_hitter=True, count=_count_bottom_stop),
    ReleaseType("alerts", None, opening=lambda cfg: alerts_measurement(cfg.releases.alerts), watches=True,
                count=_count_svt),
    ReleaseType("sample", SampleBuilder),
    ReleaseType("argmax", ArgmaxBuilder),
    ReleaseType("watch_topk", WatchTopkBuilder, watches=True,
                plan_note="watch_topk is charged every window (it is skipped at no cost only while the watchlist "
                          "has fewer than 2 keys)"),
    ReleaseType("histogram", HistogramBuilder, heavy_hitter=True, shows_key=_interval_above_zero),
)}

#: The batch types' builders, by type (derived from :data:`REGISTRY`).
BUILDERS: dict[str, Callable[[Config], Builder]] = {t.name: t.builder for t in REGISTRY.values()
                                                     if t.builder is not None}


def enabled_types(cfg: Config) -> list[str]:
    """Release types the config enables, in release order (top-k first: alerts watch what it released)."""
    return cfg.releases.enabled()


def release_measurements(cfg: Config) -> dict[str, Measurement[Any]]:
    """Every enabled release type's measurement, in release order: the one source of what a window can cost
    (reserved by the worker, planned by the budget check). A stateful type: the cost of opening an instance."""
    return {t: REGISTRY[t].measurement(cfg) for t in enabled_types(cfg)}


def lead_of(types: Sequence[str]) -> ReleaseType | None:
    """The type released first in a window of ``types`` when it leads (:attr:`ReleaseType.leads`), else None."""
    return REGISTRY[types[0]] if types and REGISTRY[types[0]].leads else None


def stateful_of(types: Sequence[str]) -> ReleaseType | None:
    """The enabled stateful type among ``types`` (the alerts), or None."""
    return next((REGISTRY[t] for t in types if REGISTRY[t].stateful), None)


def watching(types: Sequence[str]) -> bool:
    """Whether any of ``types`` reads the watchlist."""
    return any(REGISTRY[t].watches for t in types)
