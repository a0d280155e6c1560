"""Measurements: a mechanism together with its privacy map, in the spirit of OpenDP's measurements.

A measurement is a frozen object holding a mechanism's public parameters. Its input domain is a histogram
of distinct-user counts and its metric the user-level add/remove neighbour relation (docs/privacy.md §1, each user
on at most ``max_keys_per_user`` keys) -- implicit, the same for every release type. It carries

- ``privacy_map()`` -- the worst-case DP events of one run at these parameters: what the ledger reserves
  before the mechanism runs (a release the budget cannot cover never runs, docs/privacy.md §4) and what
  the startup budget check (:mod:`stream_dp.release.budget_plan`) plans with;
- ``realized(result)`` -- the DP events a given result actually cost (pay-what-you-get for limited-domain
  top-k, DR19 Theorem 3: the outcomes returned; the same as the map for data-independent costs). It is never
  more than the map (the contract suite, tests/unit/test_measurements_contract.py, checks this for every
  release type) and refuses results that are not this measurement's.

The release builders (:mod:`stream_dp.release.builders`) reserve ``privacy_map()`` and settle
``realized(result)``, nothing else. The measurements of the mechanisms live next to them
(:class:`~stream_dp.mechanisms.limited_domain.LimitedDomainTopk`,
:class:`~stream_dp.mechanisms.known_domain.KnownDomainTopk`, :class:`~stream_dp.mechanisms.pws.PrivateWeightedSample`,
:class:`~stream_dp.mechanisms.large_margin.LargeMargin`,
:class:`~stream_dp.mechanisms.noisy_topk_gap.NoisyTopkWithGap`,
:class:`~stream_dp.mechanisms.svt.AdaptiveSvtInstance`); the histogram's is here
(:class:`GaussianHistogram`), wrapping its calibration.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from stream_dp.accounting.events import DpEvent
from stream_dp.mechanisms.count_parts import CountParts
from stream_dp.mechanisms.gaussian_histogram import HistogramCalibration, HistogramResult, gaussian_histogram
from stream_dp.mechanisms.laplace_histogram import LaplaceHistogramCalibration, laplace_histogram
from stream_dp.mechanisms.weighted_histogram import WeightedHistogramCalibration, weighted_histogram
from stream_dp.rng import RngLike

R_contra = TypeVar("R_contra", contravariant=True)


@runtime_checkable
class Measurement(Protocol[R_contra]):
    """A mechanism's public parameters and its privacy map (module docstring)."""

    @property
    def mechanism(self) -> str:
        """The mechanism's name as records state it (a frozen field or a class constant of each measurement)."""
        ...

    def privacy_map(self) -> tuple[DpEvent, ...]:
        """The worst-case events of one run: reserve these before running."""
        ...

    def realized(self, result: R_contra) -> tuple[DpEvent, ...]:
        """The events ``result`` cost (never more than :meth:`privacy_map`)."""
        ...


@dataclass(frozen=True)
class _ThresholdHistogram:
    """A histogram with partition selection: its cost does not depend on the data, so every result realizes
    exactly the calibration's events (the map). ``domain``: the public keys released without the threshold -- a
    default; a call may give the window's own (``domain=``), which changes nothing in the map."""

    calibration: Any
    max_keys: int
    confidence: float = 0.95
    domain: tuple[Hashable, ...] = ()

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return tuple(self.calibration.events())

    def realized(self, result: HistogramResult) -> tuple[DpEvent, ...]:
        if len(result.rows) > self.max_keys or result.threshold != self.calibration.threshold:
            raise ValueError("a histogram with more rows than max_keys or another threshold is not this "
                             "measurement's")
        return self.privacy_map()


@dataclass(frozen=True)
class GaussianHistogram(_ThresholdHistogram):
    """The discrete-Gaussian histogram with partition selection and its privacy map: one
    (ρ = Δ/(2σ²), δ)-approximate-zCDP event per release, whatever it releases (the calibration's events,
    :meth:`~stream_dp.mechanisms.gaussian_histogram.HistogramCalibration.events`)."""

    calibration: HistogramCalibration
    mechanism: str = "gaussian_histogram"

    def __call__(self, counts: Mapping[Hashable, Any] | CountParts, rng: RngLike = None,
                 domain: Collection[Hashable] | None = None) -> HistogramResult:
        return gaussian_histogram(counts, calibration=self.calibration, max_keys=self.max_keys,
                                  confidence=self.confidence, domain=self.domain if domain is None else domain,
                                  rng=rng)


@dataclass(frozen=True)
class LaplaceHistogram(_ThresholdHistogram):
    """The discrete-Laplace histogram with partition selection (docs/privacy.md §8b) and its privacy map: one
    (ε = Δ/b, δ)-DP event per release, whatever it releases (the calibration's events,
    :meth:`~stream_dp.mechanisms.laplace_histogram.LaplaceHistogramCalibration.events`)."""

    calibration: LaplaceHistogramCalibration
    mechanism: str = "laplace_histogram"

    def __call__(self, counts: Mapping[Hashable, Any] | CountParts, rng: RngLike = None,
                 domain: Collection[Hashable] | None = None) -> HistogramResult:
        return laplace_histogram(counts, calibration=self.calibration, max_keys=self.max_keys,
                                 confidence=self.confidence, domain=self.domain if domain is None else domain,
                                  rng=rng)


@dataclass(frozen=True)
class WeightedHistogram(_ThresholdHistogram):
    """The discrete-Gaussian histogram of per-user weighted scores (docs/privacy.md §8d) and its privacy map: one
    (ρ = U²Δ/(2σ_w²), δ)-approximate-zCDP event per release, whatever it releases (the calibration's events,
    :meth:`~stream_dp.mechanisms.weighted_histogram.WeightedHistogramCalibration.events`). Its input is the
    window's scores (:func:`~stream_dp.mechanisms.weighted_histogram.weighted_scores`), not its counts."""

    calibration: WeightedHistogramCalibration
    mechanism: str = "weighted_histogram"

    def __call__(self, scores: Mapping[Hashable, Any], rng: RngLike = None,
                 domain: Collection[Hashable] | None = None) -> HistogramResult:
        return weighted_histogram(scores, calibration=self.calibration, max_keys=self.max_keys,
                                  confidence=self.confidence, domain=self.domain if domain is None else domain,
                                  rng=rng)
