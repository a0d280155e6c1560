"""Empirical privacy audit: does a mechanism's output law on two neighbouring inputs respect (ε, δ)?

(ε, δ)-DP requires P[M(x) ∈ E] ≤ e^ε·P[M(x′) ∈ E] + δ for every event E and both orders of (x, x′).
The audit runs the mechanism ``trials`` times on each input, maps every output to event labels, and for
each label E and each direction computes a *lower confidence bound* on

    ln( (P[M(x) ∈ E] − δ) / P[M(x′) ∈ E] )

from one-sided Clopper–Pearson bounds (lower bound of the numerator, upper bound of the denominator),
Bonferroni-corrected over all labels and both directions. ``violated`` is True when the largest such bound
exceeds ε. For a mechanism that *is* (ε, δ)-DP, ``violated`` is True with probability at most
``1 − confidence`` (the audit's false-alarm rate). An audit can only find violations on the events and
neighbours it is given: passing it is evidence, not a proof. Choose neighbours and events where the
mechanism is tight (e.g. a key crossing the limited-domain boundary; a large gap), and show the audit
flags a deliberately broken variant.

Usage (``mechanism(input, rng) -> output``; ``event(output) -> label``)::

    result = audit_privacy(lambda x, rng: my_mech(x, epsilon=1.0, rng=rng), x, x_prime,
                           epsilon=1.0, delta=0.0, trials=20_000, event=lambda out: out, rng=7)
    assert not result.violated, result.summary()

``event`` may instead return a ``frozenset`` of labels when ``multi_label=True`` (an output belongs to every
event it names; use it for nested events such as "gap ≥ t" for several t).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from stream_dp.rng import RngLike, make_rng


@dataclass(frozen=True)
class EventBound:
    """One event in one direction: hits on the numerator input and on the denominator input."""

    event: Hashable
    direction: str  # "x/x'" or "x'/x"
    hits: int
    hits_other: int
    log_ratio_lower: float  # lower confidence bound of ln((P − δ)/P′); −inf when P − δ may be ≤ 0
    log_ratio_estimate: float  # plug-in estimate; inf when the other side had no hit


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit_privacy`."""

    epsilon: float
    delta: float
    trials: int
    confidence: float
    epsilon_lower_bound: float
    """Largest lower confidence bound of the (δ-adjusted) log-ratio over all events and directions."""
    epsilon_estimate: float
    """Largest plug-in log-ratio over events seen at least 10 times on both inputs (a rough number)."""
    worst: EventBound | None
    bounds: tuple[EventBound, ...]

    @property
    def violated(self) -> bool:
        """True when the data show, at the stated confidence, an event breaking (ε, δ)."""
        return self.epsilon_lower_bound > self.epsilon

    def summary(self) -> str:
        worst = (f"event {self.worst.event!r} ({self.worst.direction}: {self.worst.hits} vs "
                 f"{self.worst.hits_other} hits)" if self.worst else "no event")
        return (f"audit ε={self.epsilon:g} δ={self.delta:g}, {self.trials} trials per input: "
                f"ε lower bound {self.epsilon_lower_bound:.3f} (confidence {self.confidence}), "
                f"estimate {self.epsilon_estimate:.3f}, worst {worst} -> "
                f"{'VIOLATED' if self.violated else 'ok'}")


def _labels(outputs: Iterable[Any], event: Callable[[Any], Any], multi_label: bool) -> Counter:
    counts: Counter = Counter()
    for out in outputs:
        label = event(out)
        if multi_label:
            counts.update(label)
        else:
            counts[label] += 1
    return counts


def audit_samples(outputs_x: Sequence[Any], outputs_x_prime: Sequence[Any], *, epsilon: float,
                  delta: float = 0.0, confidence: float = 0.99,
                  event: Callable[[Any], Any] = lambda out: out, multi_label: bool = False) -> AuditResult:
    """The audit on already drawn outputs (same number on each input). See the module docstring.

    >>> audit_samples(["a"] * 50 + ["b"] * 50, ["a"] * 95 + ["b"] * 5, epsilon=0.1).violated
    True
    """
    trials = len(outputs_x)
    if trials == 0 or len(outputs_x_prime) != trials:
        raise ValueError("outputs_x and outputs_x_prime must be non-empty and of equal length")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    counts = _labels(outputs_x, event, multi_label)
    counts_prime = _labels(outputs_x_prime, event, multi_label)
    labels = sorted(set(counts) | set(counts_prime), key=repr)
    # Bonferroni over labels × 2 directions, each comparison using two one-sided bounds.
    alpha = (1 - confidence) / (4 * max(len(labels), 1))
    bounds = []
    for label in labels:
        for direction, hits, other in (("x/x'", counts[label], counts_prime[label]),
                                       ("x'/x", counts_prime[label], counts[label])):
            lower = stats.beta.ppf(alpha, hits, trials - hits + 1) if hits > 0 else 0.0
            upper = stats.beta.ppf(1 - alpha, other + 1, trials - other) if other < trials else 1.0
            log_lower = math.log((lower - delta) / upper) if lower > delta else -math.inf
            p, p_other = hits / trials, other / trials
            estimate = (math.log((p - delta) / p_other) if p_other > 0 and p > delta
                        else (math.inf if p > delta else -math.inf))
            bounds.append(EventBound(label, direction, hits, other, log_lower, estimate))
    worst = max(bounds, key=lambda b: b.log_ratio_lower, default=None)
    robust = [b.log_ratio_estimate for b in bounds if min(b.hits, b.hits_other) >= 10]
    return AuditResult(
        epsilon=epsilon, delta=delta, trials=trials, confidence=confidence,
        epsilon_lower_bound=worst.log_ratio_lower if worst else -math.inf,
        epsilon_estimate=max(robust, default=-math.inf), worst=worst, bounds=tuple(bounds))


def audit_privacy(mechanism: Callable[[Any, Any], Any], x: Any, x_prime: Any, *, epsilon: float,
                  delta: float = 0.0, trials: int = 10_000, confidence: float = 0.99,
                  event: Callable[[Any], Any] = lambda out: out, multi_label: bool = False,
                  rng: RngLike = None) -> AuditResult:
    """Run ``mechanism(input, rng)`` ``trials`` times on ``x`` and on ``x_prime`` (one generator, derived
    from ``rng``, shared by all runs) and audit the outputs with :func:`audit_samples`.

    >>> import numpy as np
    >>> def randomized_response(bit, rng):  # ln 3-DP
    ...     return bit if rng.random() < 0.75 else 1 - bit
    >>> audit_privacy(randomized_response, 0, 1, epsilon=math.log(3), trials=4000, rng=1).violated
    False
    >>> audit_privacy(randomized_response, 0, 1, epsilon=0.5, trials=4000, rng=1).violated
    True
    """
    if not (isinstance(trials, int) and trials >= 1):
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    generator = make_rng(rng)
    outputs_x = [mechanism(x, generator) for _ in range(trials)]
    outputs_x_prime = [mechanism(x_prime, generator) for _ in range(trials)]
    return audit_samples(outputs_x, outputs_x_prime, epsilon=epsilon, delta=delta, confidence=confidence,
                         event=event, multi_label=multi_label)
