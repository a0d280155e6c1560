"""Online Adaptive Sparse Vector with Gap (Algorithms 1–3 of seed 003), resumable across processes.

Ding et al., "Free Gap Estimates from the Exponential Mechanism, Sparse Vector, Noisy Max and Related
Algorithms" (VLDB J.; arXiv 1904.12773), §5.1 (Algorithm 1, Theorem 5.1), Algorithm 2 (SVT with Gap),
§5.2 (Algorithm 3, exponential and geometric noise), §5.3 (Lemma 3).

**Privacy guarantee.** One instance is ε-DP for any stream of sensitivity-1 queries (monotone queries
when ``monotone=True``, e.g. counts of distinct users that can only grow when a user is added), whatever
its answers and however often it is frozen and resumed. The budget is split ``ε0 = θε`` for the threshold,
``ε1 = (1−θ)ε/k`` per middle-branch answer and ``ε2 = ε1/2`` per top-branch answer; below-threshold
answers are free. Costs are kept in integer units of ``ε2`` and the instance stops (``exhausted``) when
``cost > ε − ε1``, i.e. when more than ``2(k−1)`` units are used, so the realised cost
``ε0 + ε2·#top + ε1·#middle`` never exceeds ε. The ledger is charged the whole ε when the instance
opens (:meth:`AdaptiveSVT.privacy_event`; docs/privacy.md §4): adaptivity shows as more answers, not a refund.

Per query ``q`` (rates: threshold ``ε0``; top ``ε2``, middle ``ε1`` when monotone, half of them otherwise;
see :mod:`stream_dp.mechanisms.svt_noise`):

- top: ``q + ξ − T̃ ≥ 2σ`` with σ the standard deviation of the noise ``ξ`` actually used →
  ``(above, gap, "top", ε2)`` (2σ as in the pseudocode; for monotone Laplace σ = √2/ε2, where the authors' code keeps
  the general 2·2√2/ε2 — any fixed test threshold is private, it only moves answers between branches);
- else middle: ``q + η − T̃ ≥ 0`` → ``(above, gap, "middle", ε1)``;
- else ``(below, None, None, 0)``.

``adaptive=False`` disables the top branch: that is SVT with Gap (Algorithm 2). The noisy threshold
``T̃`` is drawn once, when the instance is created, and is part of the (secret) state: it is never
re-drawn on resume (fresh threshold noise for the same instance would be an averaging attack).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream_dp.accounting.events import DpEvent, PureDpEvent
from stream_dp.errors import StreamDPError
from stream_dp.mechanisms.svt_bounds import BranchSelection
from stream_dp.mechanisms.svt_noise import NOISES, GapTail, default_theta, noise_variance, sample_centred
from stream_dp.mechanisms.svt_state import STATE_VERSION, validate_state
from stream_dp.rng import RngLike, make_rng

MECHANISM = "adaptive_svt"


class SVTExhaustedError(RuntimeError, StreamDPError):
    """Raised by :meth:`AdaptiveSVT.process` once the instance's budget rule has fired."""


@dataclass(frozen=True)
class SVTAnswer:
    """One answer of the sparse vector.

    ``above``: the query was judged above the threshold; ``gap``: the noisy ``q − T`` (None when below);
    ``branch``: "top", "middle" or None; ``estimate``: ``gap + T`` (None when below); ``cost``: the ε this
    answer used (ε2, ε1 or 0); ``gap_variance``: the variance of the gap's noise (None when below).
    """

    above: bool
    gap: float | None
    branch: str | None
    estimate: float | None
    cost: float
    gap_variance: float | None = None
    _tail: GapTail | None = field(default=None, repr=False, compare=False)
    _selection: BranchSelection | None = field(default=None, repr=False, compare=False)
    _threshold: float | None = field(default=None, repr=False, compare=False)

    def published_lower_bound(self, confidence: float = 0.95, at_least: float = -math.inf) -> float | None:
        """A value the true query answer exceeds with probability ≥ ``confidence`` **given that this answer
        was published in its branch** (None when below): selective inference,
        :mod:`stream_dp.mechanisms.svt_bounds`. This is the bound the alerts release publishes.

        ``at_least``: the least value a query can take, known a priori (0 for counts); the bound is never
        below it, and it is ``at_least`` (``−∞`` by default) when the answer excludes no value
        (:meth:`~stream_dp.mechanisms.svt_bounds.BranchSelection.lower_bound_of_gap`). Never above the
        estimate."""
        if not self.above or self._selection is None or self.gap is None or self._threshold is None:
            return None
        return self._threshold + self._selection.lower_bound_of_gap(self.gap, confidence, at_least - self._threshold)

    def lower_bound(self, confidence: float = 0.95) -> float | None:
        """A value the true query answer exceeds with probability ``confidence`` (None when below),
        **before selection**: not a bound conditional on the answer being published (see
        :meth:`published_lower_bound`, which is).

        Lemma 3 of seed 003 for Laplace noise, the exact exponential and geometric analogues otherwise
        (:class:`~stream_dp.mechanisms.svt_noise.GapTail`); the probability is over the noise of this
        query and the threshold, before the branch test selected it -- for queries near the threshold
        its coverage among published answers is below ``confidence``.
        """
        if not self.above or self._tail is None or self.estimate is None:
            return None
        bound = self.estimate - self._tail.quantile(confidence)
        if self._tail.noise == "geometric":
            bound = float(round(bound, 6))
        return bound


def published_lower_bounds(answers: Sequence[SVTAnswer], confidence: float = 0.95,
                           at_least: float = -math.inf) -> list[float | None]:
    """:meth:`SVTAnswer.published_lower_bound` of each answer (None when below), equal to it answer by
    answer; the answers published in the same branch of one instance are bounded side by side
    (:meth:`~stream_dp.mechanisms.svt_bounds.BranchSelection.lower_bounds_of_gaps`)."""
    bounds: list[float | None] = [None] * len(answers)
    groups: dict[tuple[BranchSelection, float], list[int]] = {}
    for i, ans in enumerate(answers):
        if ans.above and ans._selection is not None and ans.gap is not None and ans._threshold is not None:
            groups.setdefault((ans._selection, ans._threshold), []).append(i)
    for (selection, threshold), members in groups.items():
        gaps = selection.lower_bounds_of_gaps([answers[i].gap for i in members], confidence,  # type: ignore[misc]
                                              at_least - threshold)
        for i, g in zip(members, gaps):
            bounds[i] = threshold + g
    return bounds


class AdaptiveSVT:
    """Online Adaptive SVT with Gap: one query at a time, frozen to JSON and resumed anywhere.

    ``threshold``: public T; ``k``: answers at the baseline budget; ``epsilon``: the instance's ε;
    ``noise``: "laplace" (Alg. 1), "exponential" (Alg. 3) or "geometric" (Alg. 3, integer queries only);
    ``monotone``: queries are monotone (smaller noise scales); ``theta``: threshold share of ε (default:
    the seed's variance-optimal value for the middle branch, :func:`default_theta`); ``adaptive=False``
    gives SVT with Gap (Algorithm 2); ``rng``: Generator, int seed (tests) or None (OS entropy).

    >>> svt = AdaptiveSVT(100, k=2, epsilon=1.0, rng=7)
    >>> [a.above for a in svt.process_many([5, 500, 3, 480])]
    [False, True, False, True]
    >>> svt.spent <= 1.0, svt.privacy_event().epsilon
    (True, 1.0)
    >>> resumed = AdaptiveSVT.from_state(svt.to_state())
    >>> resumed.to_state() == svt.to_state()
    True
    """

    def __init__(self, threshold: float, *, k: int, epsilon: float, noise: str = "laplace",
                 monotone: bool = True, theta: float | None = None, adaptive: bool = True,
                 rng: RngLike = None) -> None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        if not _is_real(epsilon) or not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        if not _is_real(threshold) or not math.isfinite(threshold):
            raise ValueError("threshold must be a finite number")
        if not isinstance(monotone, bool) or not isinstance(adaptive, bool):
            raise ValueError("monotone and adaptive must be booleans")
        if theta is None:
            theta = default_theta(int(k), noise=noise, monotone=monotone)
        if not _is_real(theta) or not 0 < theta < 1:
            raise ValueError(f"theta must be in (0, 1), got {theta!r}")
        self._rng = make_rng(rng)
        self._set_params(float(threshold), int(k), float(epsilon), noise, monotone, float(theta), adaptive)
        self._threshold_noise = sample_centred(noise, self.epsilon0, self._rng)
        self._queries = self._top = self._middle = 0

    # -- parameters -------------------------------------------------------------------------------------

    def _set_params(self, threshold: float, k: int, epsilon: float, noise: str, monotone: bool,
                    theta: float, adaptive: bool) -> None:
        self.threshold, self.k, self.epsilon, self.noise = threshold, k, epsilon, noise
        self.monotone, self.theta, self.adaptive = monotone, theta, adaptive
        self.epsilon0 = theta * epsilon
        self.epsilon1 = (1.0 - theta) * epsilon / k
        self.epsilon2 = self.epsilon1 / 2.0
        per_query = 1.0 if monotone else 0.5  # general queries: Lap(2/ε*) etc., i.e. rate ε*/2
        self._top_rate = per_query * self.epsilon2
        self._middle_rate = per_query * self.epsilon1
        self.sigma = math.sqrt(noise_variance(noise, self._top_rate))

    @property
    def noisy_threshold(self) -> float:
        """``T̃`` (secret: part of the state, never released)."""
        return self.threshold + self._threshold_noise

    @property
    def cost_units(self) -> int:
        """Budget used by answers so far, in units of ε2 (top = 1, middle = 2)."""
        return self._top + 2 * self._middle

    @property
    def spent(self) -> float:
        """Realised privacy cost so far: ``ε0 + ε2·#top + ε1·#middle`` (≤ ε)."""
        return self.epsilon0 + self.epsilon2 * self._top + self.epsilon1 * self._middle

    @property
    def exhausted(self) -> bool:
        """True once ``cost > ε − ε1`` (Algorithm 1's break rule, in exact integer units)."""
        return self.cost_units > 2 * (self.k - 1)

    @property
    def answers(self) -> dict[str, int]:
        """How many queries were processed and answered in each branch."""
        return {"queries": self._queries, "top": self._top, "middle": self._middle}

    def remaining_fraction(self) -> float:
        """Share of ε not (yet) used by the realised answers: ``(ε − spent)/ε``."""
        return max(0.0, (self.epsilon - self.spent) / self.epsilon)

    def privacy_event(self) -> DpEvent:
        """The ledger charge of the whole instance: ``PureDpEvent(ε)``, charged when it opens."""
        (event,) = instance_events(epsilon=self.epsilon)
        return event

    def events(self) -> tuple[DpEvent, ...]:
        """The events of this instance (one: :meth:`privacy_event`)."""
        return (self.privacy_event(),)

    # -- processing -------------------------------------------------------------------------------------

    def process(self, value: float) -> SVTAnswer:
        """Answer "is ``value`` above the threshold?" with a free noisy gap (raises once exhausted)."""
        if self.exhausted:
            raise SVTExhaustedError("this sparse-vector instance has used its budget; open a new one")
        if not _is_real(value) or not math.isfinite(value):
            raise ValueError("value must be a finite real number")
        if self.noise == "geometric" and float(value) != math.floor(value):
            raise ValueError("geometric noise needs integer query values (e.g. counts)")
        value = float(value)
        noisy_threshold = self.threshold + self._threshold_noise
        top_value = value + sample_centred(self.noise, self._top_rate, self._rng) if self.adaptive else None
        middle_value = value + sample_centred(self.noise, self._middle_rate, self._rng)
        self._queries += 1
        if top_value is not None and top_value - noisy_threshold >= 2.0 * self.sigma:
            self._top += 1
            return self._above(top_value - noisy_threshold, "top", self.epsilon2, self._top_rate)
        if middle_value - noisy_threshold >= 0:
            self._middle += 1
            return self._above(middle_value - noisy_threshold, "middle", self.epsilon1, self._middle_rate)
        return SVTAnswer(above=False, gap=None, branch=None, estimate=None, cost=0.0)

    def _above(self, gap: float, branch: str, cost: float, rate: float) -> SVTAnswer:
        tail = GapTail(self.noise, rate, self.epsilon0)
        selection = BranchSelection(self.noise, branch, self.adaptive, self._top_rate, self._middle_rate,
                                    self.epsilon0, 2.0 * self.sigma)
        return SVTAnswer(above=True, gap=gap, branch=branch, estimate=gap + self.threshold, cost=cost,
                         gap_variance=tail.variance, _tail=tail, _selection=selection,
                         _threshold=self.threshold)

    def process_many(self, values: Iterable[float]) -> list[SVTAnswer]:
        """Batch helper (river style): equals calling :meth:`process` on each value in turn, stopping
        (without raising) after the answer that exhausts the instance."""
        out: list[SVTAnswer] = []
        for value in values:
            if self.exhausted:
                break
            out.append(self.process(value))
        return out

    # -- state ------------------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """JSON-serialisable state: public parameters, the SECRET noisy threshold and the answer counters.

        It holds nothing from which past noise can be recomputed (no generator state, seed or key;
        docs/privacy.md §5b): the query noise already drawn is gone for good. Keep it operator-only, next
        to the raw counts, never in a release; delete it once the instance closes."""
        return {
            "version": STATE_VERSION, "mechanism": MECHANISM, "threshold": self.threshold, "k": self.k,
            "epsilon": self.epsilon, "noise": self.noise, "monotone": self.monotone, "theta": self.theta,
            "adaptive": self.adaptive, "epsilon0": self.epsilon0, "epsilon1": self.epsilon1,
            "epsilon2": self.epsilon2, "threshold_noise": self._threshold_noise,
            "noisy_threshold": self.noisy_threshold, "queries": self._queries, "top": self._top,
            "middle": self._middle, "spent": self.spent, "exhausted": self.exhausted,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], rng: RngLike = None) -> AdaptiveSVT:
        """Resume an instance from :meth:`to_state` output (validated; a bad field → ``ValueError``).

        Randomness contract: the resumed instance draws fresh query noise from ``rng`` (``None``: the
        production CSPRNG, :func:`stream_dp.rng.make_rng`). The noisy threshold is never re-drawn. Fresh
        query noise is sound: every query of Algorithm 1 uses independent noise, whatever generator
        produced it; only the threshold noise must stay the same for the whole instance.
        """
        s = validate_state(state)
        obj = cls.__new__(cls)
        obj._set_params(s["threshold"], s["k"], s["epsilon"], s["noise"], s["monotone"], s["theta"],
                        s["adaptive"])
        obj._threshold_noise = s["threshold_noise"]
        obj._queries, obj._top, obj._middle = s["queries"], s["top"], s["middle"]
        obj._rng = make_rng(rng)
        return obj


@dataclass(frozen=True)
class SVTRun:
    """Result of :func:`adaptive_svt`: the answers in query order and the instance's cost."""

    answers: tuple[SVTAnswer, ...]
    exhausted: bool
    spent: float
    events: tuple[DpEvent, ...]


def adaptive_svt(values: Iterable[float], threshold: float, *, k: int, epsilon: float,
                 noise: str = "laplace", monotone: bool = True, theta: float | None = None,
                 adaptive: bool = True, rng: RngLike = None) -> SVTRun:
    """Run one fresh instance over ``values`` until they end or the budget rule fires (batch form).

    Same guarantee as :class:`AdaptiveSVT` (ε-DP; ``events`` = one ``PureDpEvent(ε)``).

    >>> run = adaptive_svt([0, 1000, 1000, 1000], 50, k=1, epsilon=1.0, rng=3)
    >>> len(run.answers) <= 4 and run.spent <= 1.0
    True
    """
    svt = AdaptiveSVT(threshold, k=k, epsilon=epsilon, noise=noise, monotone=monotone, theta=theta,
                      adaptive=adaptive, rng=rng)
    answers = svt.process_many(values)
    return SVTRun(tuple(answers), svt.exhausted, svt.spent, svt.events())


def _is_real(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating))


def instance_events(*, epsilon: float) -> tuple[DpEvent, ...]:
    """The cost of one Adaptive SVT instance, known before it opens (docs/privacy.md §4): ε-DP as a
    whole (Theorem 5.1), whatever its answers turn out to be. The one place this formula is written.

    >>> instance_events(epsilon=0.5)[0].epsilon
    0.5
    """
    return (PureDpEvent(epsilon, mechanism=MECHANISM),)


@dataclass(frozen=True)
class AdaptiveSvtInstance:
    """The Adaptive SVT measurement (Ding et al., Algorithm 1): one instance and its privacy map.

    ``privacy_map()`` is the whole instance's ε (charged when it opens, docs/privacy.md §4). ``realized(svt)`` of an
    instance that answered some queries is the same single event: the realized loss ``svt.spent`` is ≤ ε by
    the break rule (Theorem 5.1), and is checked; an instance that gave more than its budget allows, or runs
    at other parameters, is refused.

    >>> m = AdaptiveSvtInstance(threshold=100, k=2, epsilon=1.0)
    >>> svt = m.open(rng=7); _ = svt.process_many([5, 500, 3]); m.realized(svt) == m.privacy_map()
    True
    """

    threshold: float
    k: int
    epsilon: float
    noise: str = "laplace"
    theta: float | None = None
    monotone: bool = True
    mechanism: str = MECHANISM

    def open(self, rng: RngLike = None) -> AdaptiveSVT:
        """A fresh instance (its noisy threshold drawn now)."""
        return AdaptiveSVT(self.threshold, k=self.k, epsilon=self.epsilon, noise=self.noise,
                           monotone=self.monotone, theta=self.theta, rng=rng)

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return instance_events(epsilon=self.epsilon)

    def realized(self, svt: AdaptiveSVT) -> tuple[DpEvent, ...]:
        if (svt.epsilon, svt.k, svt.noise) != (self.epsilon, self.k, self.noise):
            raise ValueError("an SVT instance of other (ε, k, noise) is not this measurement's")
        if svt.spent > self.epsilon * (1 + 1e-12):
            raise ValueError(f"the instance spent {svt.spent} > ε = {self.epsilon}")
        return self.privacy_map()
