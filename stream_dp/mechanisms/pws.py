"""Private weighted sampling, the ``sample`` release (Cohen, Geri, Sarlós & Stemmer, AISTATS 2021).

Every key x with count w_x ≥ 1 is, independently, either not reported or reported with a token
j ∈ {1..w_x} drawn from row π_{w_x,·} of the late Algorithm 4 (:mod:`stream_dp.mechanisms.pws_tables`)
for the sampling scheme q (PPS/priority, PPSWOR or none) at the per-key privacy (ε/Δ, δ/Δ).
Each released row is (key, token, estimate), where the estimate is the MLE estimate of the key's
frequency (:mod:`stream_dp.mechanisms.pws_estimators`), so Σ rows.estimate estimates Σ_x w_x.

Privacy (docs/pws.md, Privacy). *Per key*: between rows i-1 and i of the table both hockey-stick
divergences are ≤ δ_key at e^{ε_key} (checked exactly in the tests), i.e. the report of one key is
(ε_key, δ_key)-DP when its count changes by 1 (including 0 ↔ 1: a key with count 0 is never reported,
and keys outside ``counts`` are count 0). *Per user*: with contribution bounding (docs/ingest.md) a user adds
1 to at most Δ = ``max_keys_per_user`` counts; every other count is unchanged, keys are reported
independently, so the release is the product of at most Δ changed per-key mechanisms and the rest
unchanged. Basic composition of Δ (ε/Δ, δ/Δ)-DP mechanisms is (ε, δ)-DP; the tests also check the
product distribution numerically for Δ = 2, 3. The ledger cost is therefore ONE
``ApproxDpEvent(ε, δ, mechanism="private_weighted_sample")`` for the whole release, whatever the number
of keys or rows (there is no data-dependent cost).

Rows are released sorted by (token descending, key) so their order carries nothing of the input order
(a window ZSET is read in count order).

What a subscriber needs to compute estimates: the release's parameters (scheme, τ, ε, δ, Δ and the
weight function's name; :meth:`SampleResult.parameters`) -- then :func:`pws_token_estimates` rebuilds the
same public table and maps tokens to estimates for any g, with either estimator.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_dp.accounting.events import ApproxDpEvent, DpEvent
from stream_dp.mechanisms._validation import (
    check_delta,
    check_epsilon,
    check_positive_int,
    check_scores,
    tie_key,
)
from stream_dp.mechanisms.pws_estimators import estimate_sum, estimator_for
from stream_dp.mechanisms.pws_schemes import SamplingScheme, Weight
from stream_dp.mechanisms.pws_tables import DEFAULT_MAX_FREQUENCY, DEFAULT_TABLE_CACHE, SanitizerTable, SanitizerTableCache
from stream_dp.rng import RngLike, make_rng

MECHANISM = "private_weighted_sample"


@dataclass(frozen=True)
class SampleRow:
    """One released key: its sanitized frequency ``token`` (1 ≤ token ≤ count) and ``estimate`` of g(w)."""

    key: Hashable
    token: int | float
    estimate: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form for release records."""
        return {"key": self.key, "token": self.token, "estimate": self.estimate}


@dataclass(frozen=True)
class SampleResult:
    """A private weighted sample and its privacy cost."""

    rows: list[SampleRow]
    scheme: str
    tau: float | None
    epsilon: float
    delta: float
    max_keys_per_user: int
    estimator: str = "mle"
    mechanism: str = MECHANISM
    weight: str = "identity"

    @property
    def events(self) -> tuple[DpEvent, ...]:
        """The user-level cost of the whole release, as charged: Δ composed per-key (ε/Δ, δ/Δ) mechanisms.

        A user changes at most Δ keys, each by one, and every key is reported independently at
        (ε/Δ, δ/Δ) (docs/pws.md, Privacy), so the privacy loss is the sum of Δ per-key losses. Basic composition
        gives (ε, δ); in the project's zCDP currency it is ρ = Δ·(ε/Δ)²/2 = ε²/(2Δ) with δ -- Δ times
        cheaper than accounting the release as one (ε, δ)-DP mechanism (:attr:`whole_release_events`).
        """
        return per_key_composed_events(epsilon=self.epsilon, delta=self.delta,
                                       max_keys_per_user=self.max_keys_per_user, mechanism=self.mechanism)

    @property
    def whole_release_events(self) -> tuple[DpEvent, ...]:
        """The same release accounted as one (ε, δ)-DP mechanism: valid, but ρ = ε²/2 (Δ times dearer)."""
        return (ApproxDpEvent(epsilon=self.epsilon, delta=self.delta, mechanism=self.mechanism),)

    def parameters(self) -> dict[str, Any]:
        """The public parameters a subscriber needs to recompute the token → estimate table."""
        return {"scheme": self.scheme, "tau": self.tau, "epsilon": self.epsilon, "delta": self.delta,
                "max_keys_per_user": self.max_keys_per_user, "weight": self.weight, "estimator": self.estimator,
                "statistic": "frequency"}

    def estimate_sum(self, coefficient: Callable[[Hashable], float] | Mapping[Hashable, float] | None
                     = None) -> float:
        """Σ_rows L(key)·estimate (see :func:`~stream_dp.mechanisms.pws_estimators.estimate_sum`)."""
        return estimate_sum(self.rows, coefficient)


def per_key_composed_events(*, epsilon: float, delta: float, max_keys_per_user: int = 1,
                            mechanism: str = MECHANISM) -> tuple[DpEvent, ...]:
    """The privacy map of one release, data-independent: Δ = ``max_keys_per_user`` composed per-key
    (ε/Δ, δ/Δ)-DP events (see :attr:`SampleResult.events`). The one place this formula is written.

    >>> (e,) = per_key_composed_events(epsilon=1.0, delta=1e-6, max_keys_per_user=4)
    >>> e.mechanism, e.epsilon, e.count, round(e.zcdp()[0], 6)
    ('private_weighted_sample', 0.25, 4, 0.125)
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if not (isinstance(max_keys_per_user, int) and max_keys_per_user >= 1):
        raise ValueError(f"max_keys_per_user must be an integer >= 1, got {max_keys_per_user!r}")
    return (ApproxDpEvent(epsilon=epsilon / max_keys_per_user, delta=delta / max_keys_per_user,
                          count=max_keys_per_user, mechanism=mechanism),)


@dataclass(frozen=True)
class PrivateWeightedSample:
    """The private weighted sampling measurement (CGSS21 late Algorithm 4 per key, at (ε/Δ, δ/Δ)).

    Its cost does not depend on the data: ``privacy_map()`` (reserved before a release) and
    ``realized(result)`` are the same Δ per-key events; ``realized`` refuses a result computed at other
    parameters (its events would not be this map's).
    """

    scheme: str
    tau: float | None
    epsilon: float
    delta: float
    max_keys_per_user: int = 1
    mechanism: str = MECHANISM

    def __post_init__(self) -> None:
        self.privacy_map()  # validates ε, δ, Δ

    def __call__(self, counts: Mapping[Hashable, int], rng: RngLike = None) -> SampleResult:
        return private_weighted_sample(counts, scheme=self.scheme, tau=self.tau, epsilon=self.epsilon,
                                       delta=self.delta, max_keys_per_user=self.max_keys_per_user, rng=rng)

    def privacy_map(self) -> tuple[DpEvent, ...]:
        return per_key_composed_events(epsilon=self.epsilon, delta=self.delta,
                                       max_keys_per_user=self.max_keys_per_user, mechanism=self.mechanism)

    def realized(self, result: SampleResult) -> tuple[DpEvent, ...]:
        if (result.epsilon, result.delta, result.max_keys_per_user) != (self.epsilon, self.delta,
                                                                        self.max_keys_per_user):
            raise ValueError("a private weighted sample computed at other (ε, δ, Δ) is not this measurement's")
        return self.privacy_map()


def sanitizer_table(*, scheme: str, tau: float | None, epsilon: float, delta: float,
                    max_keys_per_user: int = 1, weight: Weight | None = None,
                    max_frequency: int = DEFAULT_MAX_FREQUENCY,
                    cache: SanitizerTableCache | None = None) -> SanitizerTable:
    """The (cached) Algorithm-4 table at the per-key calibration (ε/Δ, δ/Δ)."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    delta_keys = check_positive_int(max_keys_per_user, "max_keys_per_user")
    sampling = SamplingScheme(scheme, tau, weight)
    cache = DEFAULT_TABLE_CACHE if cache is None else cache
    return cache.get(sampling, epsilon=epsilon / delta_keys, delta=delta / delta_keys,
                     max_frequency=max_frequency)


def private_weighted_sample(counts: Mapping[Hashable, int], *, scheme: str, tau: float | None,
                            epsilon: float, delta: float, max_keys_per_user: int,
                            rng: RngLike = None, weight: Weight | None = None,
                            max_frequency: int = DEFAULT_MAX_FREQUENCY,
                            cache: SanitizerTableCache | None = None) -> SampleResult:
    """Release a private weighted sample of ``counts`` (key → number of distinct users).

    (ε, δ)-DP at the user level for users touching at most ``max_keys_per_user`` keys (module docstring):
    each key runs the late Algorithm 4 at (ε/Δ, δ/Δ). ``scheme`` ∈ {"pps", "ppswor", "none"}; ``tau`` is
    the sampling threshold (ignored for "none"); ``weight`` the sampling weight f (default identity).
    The estimate in each row is the MLE ĝ(token) for g = identity (O(1) per token beyond saturation); other
    statistics g and the biased-down estimator are post-processing (:func:`pws_token_estimates`).

    >>> res = private_weighted_sample({"a": 400, "b": 2}, scheme="pps", tau=0.1, epsilon=1.0,
    ...                               delta=1e-6, max_keys_per_user=1, rng=7)
    >>> [r.key for r in res.rows], res.rows[0].token <= 400
    (['a'], True)
    >>> res.events[0].epsilon, res.events[0].delta
    (1.0, 1e-06)
    """
    table = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta,
                            max_keys_per_user=max_keys_per_user, weight=weight,
                            max_frequency=max_frequency, cache=cache)
    estimates = estimator_for(table, kind="mle")
    keys, values = check_scores(counts, name="counts")
    if np.any(values != np.floor(values)):
        raise ValueError("counts must be integers (numbers of distinct users)")
    generator = make_rng(rng)
    present = np.flatnonzero(values >= 1)
    # draw in a data-independent key order so the rng stream does not depend on the input order
    present = np.array(sorted(present.tolist(), key=lambda n: tie_key(keys[n])), dtype=np.intp)
    tokens = table.sample_tokens(values[present].astype(np.int64), generator)
    rows = [SampleRow(keys[n], int(tok), estimates.estimate(int(tok)))
            for n, tok in zip(present.tolist(), tokens.tolist()) if tok > 0]
    rows.sort(key=lambda r: (-r.token, tie_key(r.key)))
    return SampleResult(rows=rows, scheme=scheme, tau=table.scheme.tau, epsilon=float(epsilon),
                        delta=float(delta), max_keys_per_user=int(max_keys_per_user), estimator="mle",
                        weight="identity" if weight is None else getattr(weight, "__name__", repr(weight)))


def pws_token_estimates(tokens: Any, *, scheme: str, tau: float | None, epsilon: float, delta: float,
                        max_keys_per_user: int = 1, weight: Weight | None = None,
                        g: Callable[[np.ndarray], Any] | None = None, estimator: str = "mle",
                        max_frequency: int = DEFAULT_MAX_FREQUENCY,
                        cache: SanitizerTableCache | None = None) -> np.ndarray:
    """Subscriber side: ĝ(token) for released tokens, from the release's public parameters only.

    Post-processing: the table is a function of (scheme, τ, weight, ε/Δ, δ/Δ), not of the data.

    >>> pws_token_estimates([1, 50], scheme="none", tau=None, epsilon=1.0, delta=0.01).round(2).tolist()
    [6.66, 54.0]
    """
    table = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta,
                            max_keys_per_user=max_keys_per_user, weight=weight,
                            max_frequency=max_frequency, cache=cache)
    return estimator_for(table, g=g, kind=estimator)(np.asarray(tokens, dtype=np.int64).tolist())
