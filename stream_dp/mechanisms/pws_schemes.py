"""Threshold sampling schemes: q_i, the probability that a non-private sample keeps a key of frequency i.

The private weighted sample (Cohen, Geri, Sarlós & Stemmer, AISTATS 2021) starts from a non-private
threshold sampling scheme -- priority sampling (``pps``), PPSWOR, or none -- and calibrates everything from
its inclusion probabilities q (q_0 = 0, non-decreasing) and (ε, δ):
:mod:`stream_dp.mechanisms.pws_reporting` (Algorithm 3) and :mod:`stream_dp.mechanisms.pws_rows`
(Algorithm 4). q is a function of public parameters (the scheme, τ, the weight) only, never of data, so
every table built from it is public too; a weight that would make q decrease is refused, since both
algorithms assume a heavier key is sampled at least as often.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import check_epsilon

SCHEMES = ("pps", "ppswor", "none")

Weight = Callable[[np.ndarray], Any]


@dataclass(frozen=True)
class SamplingScheme:
    """A threshold sampling scheme (as in the paper's experiments): q_i = P[key of frequency i is sampled].

    * ``"pps"`` (priority): score U(0,1)/f(w) < τ, q_i = min(1, τ f(i));
    * ``"ppswor"``: score Exp(1)/f(w) < τ, q_i = 1 - e^{-τ f(i)};
    * ``"none"``: q ≡ 1 (no sampling; τ is ignored and may be None).

    ``weight`` is the sampling weight f (default: the identity). It must accept a numpy array of
    frequencies and be non-decreasing with f ≥ 0; this is checked as tables grow (``ValueError``).

    >>> SamplingScheme("pps", 0.25).inclusion_probabilities(np.arange(6)).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    """

    name: str
    tau: float | None = None
    weight: Weight | None = field(default=None, compare=True)

    def __post_init__(self) -> None:
        if self.name not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.name!r}")
        if self.name == "none":
            if self.tau is not None:
                check_epsilon(self.tau, "tau")
        else:
            object.__setattr__(self, "tau", check_epsilon(self.tau, "tau"))
        if self.weight is not None and not callable(self.weight):
            raise ValueError("weight must be a callable f(frequencies) -> weights, or None for the identity")

    @property
    def rate(self) -> float:
        """τ of ``pps`` and ``ppswor`` (set and checked at construction for both)."""
        if self.tau is None:
            raise ValueError(f"scheme {self.name!r} has no tau")
        return self.tau

    def cache_key(self) -> Hashable:
        return (self.name, self.tau if self.name != "none" else None, self.weight)

    def inclusion_probabilities(self, freqs: np.ndarray) -> np.ndarray:
        """q_i for the integer frequencies ``freqs`` (q_0 = 0)."""
        freqs = np.asarray(freqs, dtype=np.int64)
        if self.weight is None:
            f = freqs.astype(np.float64)
        else:
            f = np.asarray(self.weight(freqs), dtype=np.float64)
            if f.shape != freqs.shape or not np.all(np.isfinite(f)) or np.any(f < 0):
                raise ValueError("weight must map a frequency array to finite weights >= 0 of the same shape")
        if self.name == "pps":
            q = np.minimum(1.0, self.rate * f)
        elif self.name == "ppswor":
            q = -np.expm1(-self.rate * f)
        else:
            q = np.ones_like(f)
        return np.where(freqs == 0, 0.0, q)
