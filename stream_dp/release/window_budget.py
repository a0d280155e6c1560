"""A release's window budget (ε_w, δ_w) → its mechanism's parameters: one rule for the release worker, the library
(:mod:`stream_dp.api`) and the evaluation.

**The window budget of a release type** is the guarantee one release of that type in one window has on its own:
it is (ε_w, δ_w)-DP for the user-level neighbours of docs/privacy.md §1. A release is described by its DP events
(what the ledger charges); the project's accountant (:func:`stream_dp.accounting.composition.compose`) composes
them into Σρ (approximate zCDP), Σε and Σδ (basic), and the release is (ε, δ_w)-DP with the better of

* basic composition: ε = Σε, valid when Σδ ≤ δ_w;
* the zCDP conversion the ledger uses (Canonne, Kamath & Steinke 2020, Cor. 13,
  :func:`~stream_dp.accounting.composition.zcdp_to_epsilon`) with the slack δ′ = δ_w − Σδ:
  ε = ε_CKS(Σρ, δ′) (:func:`window_epsilon`).

Each type gets the largest noise parameter whose guarantee is ≤ ε_w (every guarantee is increasing in it):

* ``topk`` (limited-domain top-k, DR19): judged by its worst case -- k ε-range-bounded outcomes, what the ledger
  reserves before the call -- with the ⊥ rule's δ_⊥ = δ_w/2 (:func:`topk_parameters`);
* ``topk`` over a public domain: k tracked peels (ε_t) and, with discovery share s > 0, the discovery step --
  ``threshold``: one discrete-Gaussian histogram of the keys outside the domain, (ρ_d = s·kε²/8, δ_τ = δ_w/2)
  (σ², τ by :func:`~stream_dp.mechanisms.known_domain.threshold_discovery_calibration`); ``limited_domain``: k
  discovery outcomes (ε_d, δ_⊥ = δ_w/2) -- with ε_d² = s·ε², ε_t² = (1 − s)·ε² (:func:`known_domain_parameters`);
* ``histogram`` (:func:`histogram_calibration`): discrete Gaussian, ``zcdp`` calibration -- ρ from ε_w at
  δ′ = δ_w/2, τ for δ_τ = δ_w/2; ``exact`` -- σ and τ by the thresholded histogram's exact privacy profile at
  (ε_w, δ_w); discrete Laplace -- b = Δ/ε_w, τ for δ_w (one (ε, δ) event); ``per_user`` weighting -- as ``zcdp``;
* ``sample`` and ``argmax``: their (ε, δ) are the window budget; ``watch_topk``: ε_w, pure;
* ``alerts`` has no window budget: an SVT instance's ε is charged in the window it opens and its answers run on
  over later windows (docs/privacy.md §5).

Calibrations are cached (they read only public parameters): a release worker computes them once, the evaluation
once per grid point. The period's δ′ (``budget.delta_prime``) is not part of any of this: it is the ledger's, for
the composition of a whole period.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stream_dp.accounting.composition import compose, zcdp_to_epsilon
from stream_dp.accounting.events import DpEvent, RangeBoundedEvent
from stream_dp.mechanisms._validation import check_delta, check_epsilon, check_positive_int

NOISES = ("gaussian", "laplace")
CALIBRATIONS = ("zcdp", "exact")
WEIGHTINGS = ("uniform", "per_user")


def window_epsilon(events: Sequence[DpEvent], delta_w: float) -> float:
    """Smallest ε for which ``events`` together are (ε, δ_w)-DP by the rule above (inf if none).

    >>> from stream_dp.accounting.events import PureDpEvent
    >>> window_epsilon([PureDpEvent(0.5), PureDpEvent(0.25)], 1e-6)
    0.75
    """
    spent = compose(events)
    best = spent.basic_epsilon if spent.basic_delta <= delta_w else math.inf
    slack = delta_w - spent.zcdp_delta
    if slack > 0:
        best = min(best, zcdp_to_epsilon(spent.rho, slack))
    return best


def largest_parameter(guarantee: Callable[[float], float], target: float, *, hi: float = 64.0) -> float:
    """Largest x in (0, hi] with ``guarantee(x) <= target`` for an increasing guarantee (bisection, 100 steps).

    >>> round(largest_parameter(lambda x: x * x, 4.0), 9)
    2.0
    """
    lo = 0.0
    if guarantee(hi) <= target:
        return hi
    for _ in range(100):
        mid = (lo + hi) / 2
        if guarantee(mid) <= target:
            lo = mid
        else:
            hi = mid
    if lo == 0.0:
        raise ValueError(f"no positive parameter reaches epsilon {target!r}")
    return lo


def check_window_budget(epsilon: Any, delta: Any) -> tuple[float, float]:
    """(ε_w, δ_w) checked: ε_w > 0 finite, δ_w in (0, 1); ``ValueError`` naming ``epsilon`` / ``delta``."""
    return check_epsilon(epsilon), check_delta(delta)


@dataclass(frozen=True)
class TopkParameters:
    """Limited-domain top-k at a window budget: ε per outcome and the ⊥ rule's δ."""

    epsilon: float
    delta: float


@functools.lru_cache(maxsize=1024)
def topk_parameters(epsilon_w: float, delta_w: float, k: int) -> TopkParameters:
    """Limited-domain top-k at (ε_w, δ_w): δ_⊥ = δ_w/2 and the largest per-outcome ε whose worst case (k outcomes)
    meets ε_w.

    >>> p = topk_parameters(1.0, 1e-6, 10)
    >>> round(p.epsilon, 3), p.delta
    (0.135, 5e-07)
    """
    epsilon_w, delta_w = check_window_budget(epsilon_w, delta_w)
    k = check_positive_int(k, "k")
    delta = delta_w / 2
    epsilon = largest_parameter(lambda e: window_epsilon([RangeBoundedEvent(e, count=k, delta=delta)], delta_w),
                                epsilon_w)
    return TopkParameters(epsilon, delta)


@dataclass(frozen=True)
class KnownDomainParameters:
    """Known-domain top-k at a window budget: ε per tracked peel; ``discover_epsilon`` None: no discovery, else the
    share's ε per outcome (ε_d, used as such by ``limited_domain`` discovery); ``delta``: the discovery's δ (the ⊥
    rule's, or the threshold's δ_τ; unused without discovery); ``discovery_calibration``: threshold discovery's σ²,
    τ and ρ_d (None otherwise)."""

    track_epsilon: float
    discover_epsilon: float | None
    delta: float
    discovery: str = "limited_domain"
    discovery_calibration: Any = None  # HistogramCalibration with threshold discovery

    def measurement(self, *, k: int, k_bar: int, max_keys_per_user: int) -> Any:
        """The :class:`~stream_dp.mechanisms.known_domain.KnownDomainTopk` of these parameters (its
        ``privacy_map()`` is what the ledger reserves)."""
        from stream_dp.mechanisms.known_domain import KnownDomainTopk

        return KnownDomainTopk(k=k, k_bar=k_bar, track_epsilon=self.track_epsilon,
                               discover_epsilon=self.discover_epsilon, delta=self.delta,
                               max_keys_per_user=max_keys_per_user, discovery=self.discovery,
                               discovery_calibration=self.discovery_calibration)


def known_domain_at(epsilon: float, k: int, discovery_share: float, delta: float, *,
                    discovery: str = "limited_domain", max_keys_per_user: int = 1) -> KnownDomainParameters:
    """Known-domain top-k at per-outcome ε split by ``discovery_share`` (:func:`~stream_dp.mechanisms.known_domain.
    domain_split`; threshold discovery's calibration from the share of kε²/8) with the discovery's δ."""
    from stream_dp.mechanisms.known_domain import DISCOVERIES, domain_split, threshold_discovery_calibration

    if discovery not in DISCOVERIES:
        raise ValueError(f"discovery must be one of {', '.join(DISCOVERIES)}, got {discovery!r}")
    track, discover = domain_split(epsilon=epsilon, discovery_share=discovery_share)
    calibration = None
    if discovery == "threshold" and discover is not None:
        calibration = threshold_discovery_calibration(k=k, epsilon=epsilon, discovery_share=discovery_share,
                                                      delta=delta, max_keys_per_user=max_keys_per_user)
    return KnownDomainParameters(track, discover, delta, discovery, calibration)


def known_domain_events(epsilon: float, k: int, discovery_share: float, delta: float, *,
                        discovery: str = "limited_domain", max_keys_per_user: int = 1) -> tuple[DpEvent, ...]:
    """The worst case of known-domain top-k at per-outcome ε split by ``discovery_share`` (what the ledger reserves:
    :meth:`~stream_dp.mechanisms.known_domain.KnownDomainTopk.privacy_map`)."""
    p = known_domain_at(epsilon, k, discovery_share, delta, discovery=discovery, max_keys_per_user=max_keys_per_user)
    return p.measurement(k=k, k_bar=k, max_keys_per_user=max_keys_per_user).privacy_map()


@functools.lru_cache(maxsize=1024)
def known_domain_parameters(epsilon_w: float, delta_w: float, k: int, discovery_share: float = 0.0, *,
                            discovery: str = "limited_domain", max_keys_per_user: int = 1) -> KnownDomainParameters:
    """Known-domain top-k at (ε_w, δ_w): with discovery, its δ (the ⊥ rule's or the threshold's) = δ_w/2 and the
    rest to the conversion; without, all of δ_w to the conversion (the tracked peels have no δ). Threshold
    discovery's τ depends on ``max_keys_per_user`` (Δ); its σ² is rounded up to the 1/1000 grid, so its ρ_d only
    shrinks and the search stays on the map the ledger reserves.

    >>> p = known_domain_parameters(1.0, 1e-6, 10)
    >>> round(p.track_epsilon, 2), p.discover_epsilon
    (0.14, None)
    >>> q = known_domain_parameters(1.0, 1e-6, 10, 0.8, discovery="threshold", max_keys_per_user=5)
    >>> q.discovery_calibration.threshold_delta, window_epsilon(q.measurement(k=10, k_bar=10,
    ...     max_keys_per_user=5).privacy_map(), 1e-6) <= 1.0
    (5e-07, True)
    """
    epsilon_w, delta_w = check_window_budget(epsilon_w, delta_w)
    k = check_positive_int(k, "k")
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    if not 0 <= discovery_share < 1:
        raise ValueError(f"discovery_share must be in [0, 1), got {discovery_share!r}")
    delta = delta_w / 2
    epsilon = largest_parameter(
        lambda e: window_epsilon(known_domain_events(e, k, discovery_share, delta, discovery=discovery,
                                                     max_keys_per_user=dk), delta_w), epsilon_w)
    return known_domain_at(epsilon, k, discovery_share, delta, discovery=discovery, max_keys_per_user=dk)


@functools.lru_cache(maxsize=1024)
def histogram_calibration(epsilon_w: float, delta_w: float, max_keys_per_user: int, *, noise: str = "gaussian",
                          calibration: str = "zcdp", weighting: str = "uniform") -> Any:
    """The histogram's noise and threshold at (ε_w, δ_w) (module docstring): a
    :class:`~stream_dp.mechanisms.gaussian_histogram.HistogramCalibration`,
    :class:`~stream_dp.mechanisms.laplace_histogram.LaplaceHistogramCalibration` or
    :class:`~stream_dp.mechanisms.weighted_histogram.WeightedHistogramCalibration`.

    >>> cal = histogram_calibration(1.0, 1e-6, 5)
    >>> float(cal.sigma2), cal.threshold, window_epsilon(cal.events(), 1e-6) <= 1.0
    (108.993, 56, True)
    """
    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram, calibrate_histogram_exact
    from stream_dp.mechanisms.laplace_histogram import calibrate_laplace_histogram
    from stream_dp.mechanisms.weighted_histogram import calibrate_weighted_histogram

    epsilon_w, delta_w = check_window_budget(epsilon_w, delta_w)
    dk = check_positive_int(max_keys_per_user, "max_keys_per_user")
    for name, value, allowed in (("noise", noise, NOISES), ("calibration", calibration, CALIBRATIONS),
                                 ("weighting", weighting, WEIGHTINGS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    if noise == "laplace" and calibration != "zcdp":
        raise ValueError('calibration must be "zcdp" with noise = "laplace" (the exact profile is the Gaussian\'s)')
    if weighting == "per_user" and (noise, calibration) != ("gaussian", "zcdp"):
        raise ValueError('weighting must be "uniform" unless noise = "gaussian" and calibration = "zcdp"')
    if weighting == "per_user":
        return calibrate_weighted_histogram(epsilon=epsilon_w, threshold_delta=delta_w / 2,
                                            conversion_delta=delta_w / 2, max_keys_per_user=dk)
    if noise == "laplace":
        return calibrate_laplace_histogram(epsilon=epsilon_w, threshold_delta=delta_w, max_keys_per_user=dk)
    if calibration == "exact":
        return calibrate_histogram_exact(epsilon=epsilon_w, delta=delta_w, max_keys_per_user=dk)
    return calibrate_histogram(epsilon=epsilon_w, threshold_delta=delta_w / 2, conversion_delta=delta_w / 2,
                               max_keys_per_user=dk)


# ------------------------------------------------------------------------------------------------------------------
# The configured release types (config/stream-dp.toml): their window budget, or a deprecated key's old meaning
# ------------------------------------------------------------------------------------------------------------------

#: The values the deprecated keys had by default (stream_dp/renamed_settings.py): one of a pair set alone keeps its
#: old partner's default.
LEGACY_TOPK = (0.1, 1e-7)  # releases.topk.epsilon (per outcome), releases.topk.delta (⊥ rule)
LEGACY_HISTOGRAM = (1.0, 1e-7)  # releases.histogram.epsilon (at δ′), releases.histogram.delta (threshold)


def legacy_values(section: Any, defaults: tuple[float, float]) -> tuple[float, float] | None:
    """(ε, δ) of a section set by its deprecated keys (the unset one at its old default), or None."""
    if section.epsilon is None and section.delta is None:
        return None
    return (section.epsilon if section.epsilon is not None else defaults[0],
            section.delta if section.delta is not None else defaults[1])


def configured_topk(t: Any, *, max_keys_per_user: int) -> TopkParameters | KnownDomainParameters:
    """``[releases.topk]``'s mechanism parameters: from its window budget, or (deprecated keys) ε per outcome and
    the ⊥ rule's (threshold discovery: the threshold's) δ as given."""
    legacy = legacy_values(t, LEGACY_TOPK)
    if t.has_domain:
        if legacy is not None:
            return known_domain_at(legacy[0], t.k, t.discovery_share, legacy[1], discovery=t.discovery,
                                   max_keys_per_user=max_keys_per_user)
        return known_domain_parameters(t.window_epsilon, t.window_delta, t.k, t.discovery_share,
                                       discovery=t.discovery, max_keys_per_user=max_keys_per_user)
    if legacy is not None:
        return TopkParameters(*legacy)
    return topk_parameters(t.window_epsilon, t.window_delta, t.k)


def configured_histogram(h: Any, *, max_keys_per_user: int, delta_prime: float) -> Any:
    """``[releases.histogram]``'s calibration: from its window budget (:func:`histogram_calibration`), or (deprecated
    keys) ε at δ′ = ``budget.delta_prime`` with the threshold's δ, as the release was calibrated before."""
    from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram, calibrate_histogram_exact
    from stream_dp.mechanisms.laplace_histogram import calibrate_laplace_histogram
    from stream_dp.mechanisms.weighted_histogram import calibrate_weighted_histogram

    legacy = legacy_values(h, LEGACY_HISTOGRAM)
    if legacy is None:
        return histogram_calibration(h.window_epsilon, h.window_delta, max_keys_per_user, noise=h.noise,
                                     calibration=h.calibration, weighting=h.weighting)
    epsilon, delta = legacy
    if h.weighting == "per_user":
        return calibrate_weighted_histogram(epsilon=epsilon, threshold_delta=delta, conversion_delta=delta_prime,
                                            max_keys_per_user=max_keys_per_user)
    if h.noise == "laplace":
        return calibrate_laplace_histogram(epsilon=epsilon, threshold_delta=delta, max_keys_per_user=max_keys_per_user)
    if h.calibration == "exact":
        return calibrate_histogram_exact(epsilon=epsilon, delta=delta + delta_prime, max_keys_per_user=max_keys_per_user)
    return calibrate_histogram(epsilon=epsilon, threshold_delta=delta, conversion_delta=delta_prime,
                               max_keys_per_user=max_keys_per_user)



def record_budget(section: Any, legacy_defaults: tuple[float, float]) -> dict[str, Any]:
    """What a record states about its type's budget: the window budget, or the deprecated keys that set it."""
    legacy = legacy_values(section, legacy_defaults)
    if legacy is not None:
        return {"epsilon": legacy[0], "delta": legacy[1]}
    return {"window_epsilon": section.window_epsilon, "window_delta": section.window_delta}
