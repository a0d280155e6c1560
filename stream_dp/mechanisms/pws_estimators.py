"""Estimators for sums Q = Σ_x L_x g(w_x) from a private weighted sample (Cohen et al. 2021).

A released row carries a token j (Algorithm 4); every estimator here is a fixed function token → ĝ(j) of
the public parameters (scheme, τ, weight, per-key ε and δ) and of g -- never of the data -- so computing
it is post-processing and costs no privacy. A subscriber who knows the release's mechanism parameters
recomputes exactly the same table (:func:`stream_dp.mechanisms.pws.pws_token_estimates`) and estimates
Q̂ = Σ_{reported x} L_x ĝ(j_x) (keys not reported contribute 0).

* **MLE** (inverse probability at the maximum-likelihood frequency; the authors' default):
  î(j) = the first i (smallest) maximizing π_{i,j} over the run of consecutive frequencies i = j, j+1, …
  with π_{i,j} > 0; ĝ(j) = g(î) / π_î.
* **Biased-down**: ĝ(j) = min over the same run of (g(i) - Σ_{0<h<j} ĝ(h) π_{i,h}) / Σ_{h≥j} π_{i,h}
  (defined recursively from token 1 up). It never overestimates in expectation (tested: bias(i) ≤ 0). As
  defined, it is a staircase in j (the minimum switches between the frequencies of the run), so its
  bias and MSE are periodic in i beyond saturation; it is computed token by token from 1, so it is meant
  for analysis and moderate tokens (≤ :data:`BIASED_DOWN_MAX_TOKEN`). Released rows carry the MLE.

The run of a column is what the authors' estimators scan (they stop at the first zero). It is finite: row
supports are bands below the top token, and beyond saturation (row i = row k shifted by i - k) the column
of token j ≥ k is row k read downwards from its top token, so î(j) = j + d* with a fixed offset d*. When a
table is clipped at its ``max_frequency`` the rows above the cap repeat the cap row, so scanning stops
there (a repeated row cannot change a first-maximum or a minimum).

Per-frequency quality is exact (no simulation): bias(i) = Σ_j π_{i,j} ĝ(j) - g(i),
MSE(i) = Σ_{j≥0} π_{i,j} (ĝ(j) - g(i))² with ĝ(0) = 0.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from stream_dp.mechanisms.pws_tables import SanitizerTable

ESTIMATORS = ("mle", "biased_down")
BIASED_DOWN_MAX_TOKEN = 20_000
"""The biased-down recursion runs token by token from 1 (cost ~ token × band²); larger tokens are refused."""
FrequencyFunction = Callable[[np.ndarray], Any]


def _identity(freqs: np.ndarray) -> np.ndarray:
    return np.asarray(freqs, dtype=np.float64)


class TokenEstimator:
    """Token → ĝ(token) for one table, one statistic g and one estimator kind; memoised.

    >>> from stream_dp.mechanisms.pws_tables import SamplingScheme, SanitizerTable
    >>> table = SanitizerTable(SamplingScheme("none"), epsilon=1.0, delta=0.01)
    >>> mle = TokenEstimator(table)
    >>> [round(float(v), 3) for v in mle([0, 1, 30])]
    [0.0, 6.662, 34.0]
    """

    def __init__(self, table: SanitizerTable, *, g: FrequencyFunction | None = None,
                 kind: str = "mle") -> None:
        if kind not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {kind!r}")
        self.table = table
        self.g = g if g is not None else _identity
        self.kind = kind
        self._memo: dict[int, float] = {0: 0.0}
        self._down = np.zeros(1)  # biased-down estimates for tokens 0..len-1
        self._offset: int | None = None  # MLE offset d* beyond saturation

    def _g(self, freqs: np.ndarray) -> np.ndarray:
        vals = np.asarray(self.g(np.asarray(freqs, dtype=np.int64)), dtype=np.float64)
        if vals.shape != np.shape(freqs) or not np.all(np.isfinite(vals)):
            raise ValueError("g must map a frequency array to finite values of the same shape")
        return vals

    def column(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        """The run (frequencies i, probabilities π_{i,token}) scanned by the estimators."""
        t = self.table
        i = token
        limit = None if t.saturation is not None else t.max_frequency
        while t.reporting_probability(i) == 0.0:  # leading frequencies a custom weight never samples
            if limit is not None and i >= limit:
                return np.zeros(0, dtype=np.int64), np.zeros(0)
            i += 1
        freqs, probs = [], []
        while True:
            p = t.prob(i, token)
            if p <= 0.0:
                break
            freqs.append(i)
            probs.append(p)
            if limit is not None and i >= limit:
                break
            i += 1
        return np.asarray(freqs, dtype=np.int64), np.asarray(probs)

    # -- MLE
    def _mle(self, token: int) -> float:
        t = self.table
        k = t.saturation
        if k is not None and token >= k:
            if self._offset is None:
                freqs, probs = self.column(k)
                self._offset = int(freqs[int(np.argmax(probs))]) - k
            i_hat = token + self._offset
        else:
            freqs, probs = self.column(token)
            if len(freqs) == 0:
                return 0.0
            i_hat = int(freqs[int(np.argmax(probs))])  # argmax returns the first maximum: smallest i
        return float(self._g(np.array([i_hat]))[0] / t.reporting_probability(i_hat))

    # -- biased-down
    def _extend_down(self, token: int) -> None:
        est = self._down
        start = len(est)
        if token < start:
            return
        est = np.concatenate((est, np.zeros(token + 1 - start)))
        for j in range(start, token + 1):
            freqs, _ = self.column(j)
            if len(freqs) == 0:
                est[j] = 0.0
                continue
            gvals = self._g(freqs)
            best = np.inf
            for i, gi in zip(freqs.tolist(), gvals.tolist()):
                row = self.table.row(i)
                low = row.tokens < j
                tail = float(row.probs[~low].sum())
                value = (gi - float(np.dot(est[row.tokens[low]], row.probs[low]))) / tail
                best = min(best, value)
            est[j] = best
        self._down = est

    def estimate(self, token: int) -> float:
        """ĝ(token); ĝ(0) = 0 (not reported)."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or token < 0:
            raise ValueError("token must be an integer >= 0")
        token = int(token)
        if self.kind == "biased_down":
            if token > BIASED_DOWN_MAX_TOKEN:
                raise ValueError(f"the biased_down estimator is limited to tokens <= {BIASED_DOWN_MAX_TOKEN}; "
                                 "use estimator='mle'")
            self._extend_down(token)
            return float(self._down[token])
        if token not in self._memo:
            self._memo[token] = self._mle(token)
        return self._memo[token]

    def __call__(self, tokens: Iterable[int]) -> np.ndarray:
        """ĝ for each token."""
        return np.array([self.estimate(j) for j in tokens], dtype=np.float64)

    def bias_and_mse(self, frequency: int) -> tuple[float, float]:
        """Exact (bias, MSE) of ĝ(token) as an estimate of g(frequency) for a key of that frequency."""
        row = self.table.row(frequency)
        gi = float(self._g(np.array([frequency]))[0])
        est = self(row.tokens.tolist())
        bias = float(np.dot(row.probs, est)) - gi
        mse = float(np.dot(row.probs, (est - gi) ** 2)) + (1.0 - row.reported) * gi * gi
        return bias, mse


def estimator_for(table: SanitizerTable, *, g: FrequencyFunction | None = None,
                  kind: str = "mle") -> TokenEstimator:
    """The memoised :class:`TokenEstimator` of ``table`` for (g, kind)."""
    key = (g, kind)
    est = table.estimators.get(key)
    if est is None:
        est = TokenEstimator(table, g=g, kind=kind)
        table.estimators[key] = est
    return est


def estimate_sum(rows: Iterable[Any], coefficient: Callable[[Hashable], float] | Mapping[Hashable, float]
                 | None = None) -> float:
    """Q̂ = Σ_{released rows} L(key) · row.estimate -- the sum estimate a subscriber computes.

    ``coefficient`` is L: a mapping or a function key → L_x (default 1 for every key, i.e. the estimate of
    Σ_x g(w_x)); e.g. an indicator of a category estimates that category's total.

    >>> from collections import namedtuple
    >>> Row = namedtuple("Row", "key token estimate")
    >>> estimate_sum([Row("a", 5, 6.0), Row("b", 3, 4.0)], {"a": 1.0})
    6.0
    """
    if coefficient is None:
        return float(sum(r.estimate for r in rows))
    if isinstance(coefficient, Mapping):
        lookup = coefficient
        return float(sum(lookup.get(r.key, 0.0) * r.estimate for r in rows))
    return float(sum(coefficient(r.key) * r.estimate for r in rows))
