"""Private weighted sampling tables (Cohen, Geri, Sarlós & Stemmer, AISTATS 2021: Algorithms 3 and 4).

A non-private threshold sampling scheme keeps a key of frequency i with probability q_i (q_0 = 0,
non-decreasing). This module computes, from (q, ε, δ) alone -- never from data:

* **Algorithm 3**: the largest end-to-end reporting probabilities π_i allowed by (ε, δ)-DP between
  frequencies i-1 and i, ``π_i = min{q_i, e^ε π_{i-1} + δ, 1 + e^{-ε}(π_{i-1} + δ - 1)}``, and the
  post-processing probabilities p_i = π_i / q_i for an existing non-private sample.
* **Algorithm 4, "late" variant** (the authors' later code; docs/pws.md): the frequency sanitizer: row i is the
  distribution π_{i,·} of the token reported for a key of frequency i (token 0 = not reported, tokens
  1..i otherwise). Row i is built from row i-1; for every i both hockey-stick divergences between rows i
  and i-1 are ≤ δ (tested exactly in tests/unit/test_pws_tables.py). The "early" variant of the authors'
  first code (no Dfix term, cumulative sums from token 0) is not DP when sampling binds and is not offered.

Rows are stored sparsely (only tokens with positive mass; the support is a band of width ~ c_h below the
top token i), computed lazily up to the largest frequency asked for, and cached per (scheme, ε, δ)
(:class:`SanitizerTableCache`).

**Frequencies beyond saturation.** Let S be the token shift (S(r)_0 = r_0, S(r)_1 = 0, S(r)_j = r_{j-1}).
Writing row i = F(row i-1, π_i) for one step of Algorithm 4, one checks line by line that
F(S(r), π) = S(F(r, π)) whenever r's reported mass is π (so Dfix = 0): pass 1's prefix sums and pass 2's
tail sums of S(r) at token j+1 are those of r at token j, token 1 gets e^{-ε}(0 - δ) < 0 in pass 1 and
the top-down fill stops at the same relative token. Once π reaches 1 it stays 1 (q is non-decreasing, so
q_i ≥ π_{i-1} = 1 and every bound is 1). Hence if π_{k-1} = π_k = 1 and row k = S(row k-1), induction gives
row i = S^{i-k}(row k) for every i ≥ k: the table stops growing at row k (:attr:`SanitizerTable.saturation`)
and a key of frequency i ≥ k draws a token t from row k and reports t + (i - k). Shifting is a bijection
of tokens, so every later pair (i+1, i) has exactly the divergences of the pair (k+1, k). In floating
point, rounding differences of ~1e-17 can circulate forever instead of dying out, so the detection
accepts :data:`SHIFT_TOLERANCE` per entry on :data:`SHIFT_CONFIRMATIONS` consecutive rows; rows beyond k
are then *defined* as exact shifts of row k (they differ from the recursion by rounding only). The test
suite builds tables far beyond saturation the slow, dense way and compares (1e-13), and checks DP of
every pair including the shifted ones. Built-in schemes with the identity weight saturate (q reaches
1.0 in floating point: PPS at τ·i ≥ 1, PPSWOR at τ·i ≳ 37.5, then π reaches 1 within ~ln(1/δ)/ε more
rows); a custom bounded weight may not, and PPSWOR with τ below ~37.5/``max_frequency`` reaches the
cap first: tables stop at ``max_frequency`` and frequencies above it are clipped to it (a fixed,
data-independent clip: rows above the cap equal the row at the cap, which is trivially DP). Building
costs 0.1–1 ms per row (the band is ~ln(1/δ)/ε wide), once per parameter set (cached).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from stream_dp.mechanisms._validation import check_delta, check_epsilon

SCHEMES = ("pps", "ppswor", "none")
DEFAULT_MAX_FREQUENCY = 200_000
"""Largest frequency for which a non-saturating table is built; larger frequencies are clipped to it."""

Weight = Callable[[np.ndarray], Any]
SHIFT_TOLERANCE = 1e-15
"""Largest per-entry difference accepted between row i and row i-1 shifted by one token (rounding only)."""
SHIFT_CONFIRMATIONS = 3
"""Consecutive rows that must be shifts (within the tolerance) before the table stops growing."""


# --------------------------------------------------------------------------------------------- schemes
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


# ------------------------------------------------------------------------------------------ Algorithm 3
def _check_q(q: Any) -> np.ndarray:
    arr = np.asarray(q, dtype=np.float64)
    if arr.ndim != 1 or len(arr) == 0:
        raise ValueError("q must be a non-empty 1-D sequence of probabilities q[0..]")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError("q must contain probabilities in [0, 1]")
    if arr[0] != 0:
        raise ValueError("q[0] must be 0 (keys of frequency 0 are never sampled)")
    if np.any(np.diff(arr) < 0):
        raise ValueError("q must be non-decreasing (a sampling scheme samples heavier keys more often)")
    return arr


def _extend_reporting(pi_prev: float, q: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """π for the frequencies whose q values are given, continuing from π of the frequency before them."""
    up, down = math.exp(epsilon), math.exp(-epsilon)
    out = np.empty(len(q))
    pi = pi_prev
    for n, qi in enumerate(q.tolist()):
        pi = min(qi, up * pi + delta, 1.0 + down * (pi + delta - 1.0))
        out[n] = pi
    return out


def pws_reporting_probabilities(q: Any, *, epsilon: float, delta: float) -> np.ndarray:
    """Algorithm 3 of Cohen et al.: the optimal (ε, δ)-DP key-reporting probabilities π[0..len(q)-1].

    Element-level guarantee: reporting each key independently with probability π_{w_x} is (ε, δ)-DP for
    neighbours that change one key's frequency by 1 (including 0 ↔ 1); every π_i is the largest such value
    (each bound is non-decreasing in π_{i-1}, so the greedy choice is pointwise optimal).

    >>> pws_reporting_probabilities([0, 1, 1, 1], epsilon=1.0, delta=0.1).round(4).tolist()
    [0.0, 0.1, 0.3718, 0.8057]
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    arr = _check_q(q)
    pi = np.zeros(len(arr))
    pi[1:] = _extend_reporting(0.0, arr[1:], epsilon, delta)
    return pi


def pws_sanitizer_probabilities(q: Any, *, epsilon: float, delta: float) -> np.ndarray:
    """p_i = π_i / q_i (p_i = 0 where q_i = 0): keep a key of a non-private sample with probability p_{w}.

    Post-processing an independent q-sample this way reports a key of frequency i with probability π_i.

    >>> pws_sanitizer_probabilities([0, 0.5, 1], epsilon=1.0, delta=0.1).round(4).tolist()
    [0.0, 0.2, 0.3718]
    """
    arr = _check_q(q)
    pi = pws_reporting_probabilities(arr, epsilon=epsilon, delta=delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(arr > 0, pi / np.where(arr > 0, arr, 1.0), 0.0)


# ------------------------------------------------------------------------------------------ Algorithm 4
class SanitizerRow(NamedTuple):
    """Row π_{i,·} stored sparsely: ``tokens`` (ascending, ≥ 1) with ``probs`` > 0; token 0 has 1 - π_i."""

    tokens: np.ndarray
    probs: np.ndarray
    reported: float  # π_i = Σ probs

    def dense(self, frequency: int) -> np.ndarray:
        """π_{i,0..i} as a dense vector of length i+1 (index 0 = not reported)."""
        out = np.zeros(frequency + 1)
        out[0] = 1.0 - self.reported
        out[self.tokens] = self.probs
        return out

    def shifted(self, by: int) -> SanitizerRow:
        return SanitizerRow(self.tokens + by, self.probs, self.reported)


EMPTY_ROW = SanitizerRow(np.zeros(0, dtype=np.int64), np.zeros(0), 0.0)


def next_row(prev: SanitizerRow, frequency: int, pi: float, epsilon: float, delta: float) -> SanitizerRow:
    """One step of Algorithm 4 (late variant): row ``frequency`` from row ``frequency - 1``.

    Pass 1 puts on low tokens the least mass the lower-CDF constraints force,
    Σ_{h≤j} π_{i,h} ≥ e^{-ε}(Σ_{h≤j} π_{i-1,h} - δ) (token 0 handled by Dfix); pass 2 fills the remaining
    π_i - (pass-1 mass) from the top token down, each token capped so that
    Σ_{h≥j} π_{i,h} ≤ e^ε Σ_{h≥j} π_{i-1,h} + δ. Computed on the candidate tokens {1} ∪ support(prev) ∪ {i}
    only -- between candidates every prefix/tail sum is constant, so no other token can get mass -- which
    equals the dense token-by-token loop and costs O(|support|).
    """
    i = frequency
    up, down = math.exp(epsilon), math.exp(-epsilon)
    cand = np.union1d(prev.tokens, np.array([1, i], dtype=np.int64))
    left = np.searchsorted(prev.tokens, cand, side="left")
    right = np.searchsorted(prev.tokens, cand, side="right")
    prev_at = np.zeros(len(cand))
    hit = right > left
    prev_at[hit] = prev.probs[left[hit]]
    prefix = np.concatenate(([0.0], np.cumsum(prev.probs)))  # prefix[m] = mass of the m lowest tokens
    suffix = np.concatenate((np.cumsum(prev.probs[::-1])[::-1], [0.0]))  # suffix[m] = mass from token m up

    # pass 1: the running maximum of A_j = e^{-ε}(Σ_{h≤j} π_{i-1,h} - δ) + Dfix is the cumulative mass.
    dfix = max(0.0, down * (1.0 - prev.reported) - (1.0 - pi))
    a = down * (prefix[right] - delta) + dfix
    a[-1] = -math.inf  # pass 1 runs over tokens 1..i-1 only
    running = np.maximum.accumulate(np.maximum(a, 0.0))
    out1 = np.diff(running, prepend=0.0)
    out = out1.copy()

    remainder = pi - running[-1]
    if remainder < -1e-12:
        raise RuntimeError("Algorithm 4 pass 1 placed more mass than π_i (internal error)")
    if remainder > 0:
        # pass 2: F_j (mass added at tokens ≥ j) = min(R, C_j) from the top until C_j ≥ R.
        out1_tail = np.concatenate((np.cumsum(out1[::-1])[::-1][1:], [0.0]))  # Σ_{h > j} pass-1 mass
        cap = up * suffix[left] + delta - (out1 + out1_tail)  # C_j
        reach = np.flatnonzero(cap >= remainder)
        star = int(reach[-1]) if len(reach) else 0
        above = slice(star + 1, len(cand))
        out[above] = up * prev_at[above]
        out[-1] = delta if star < len(cand) - 1 else out[-1]
        filled_above = cap[star + 1] if star + 1 < len(cand) else 0.0
        fill = min(remainder, cap[star]) - filled_above
        if remainder - cap[star] > 1e-12:
            raise RuntimeError("Algorithm 4 pass 2 could not place all of π_i (internal error)")
        out[star] = out1[star] + fill
    keep = out > 0
    return SanitizerRow(cand[keep], out[keep], pi)


# ------------------------------------------------------------------------------------------ the table
class SanitizerTable:
    """Lazily extended Algorithm-3/4 table for one (scheme, ε, δ) -- a function of public parameters only.

    >>> t = SanitizerTable(SamplingScheme("none"), epsilon=1.0, delta=0.1)
    >>> t.dense_row(3).round(4).tolist()
    [0.1943, 0.4339, 0.2718, 0.1]
    >>> bool(t.row(10**9).tokens[-1] == 10**9) and t.built == t.saturation
    True
    """

    def __init__(self, scheme: SamplingScheme, *, epsilon: float, delta: float,
                 max_frequency: int = DEFAULT_MAX_FREQUENCY) -> None:
        self.scheme = scheme
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if isinstance(max_frequency, bool) or not isinstance(max_frequency, int) or max_frequency < 2:
            raise ValueError(f"max_frequency must be an integer >= 2, got {max_frequency!r}")
        self.max_frequency = max_frequency
        self._q: list[float] = [0.0]
        self._pi: list[float] = [0.0]
        self._rows: list[SanitizerRow] = [EMPTY_ROW]
        self.estimators: dict[Hashable, Any] = {}
        """Memoised token estimators keyed by (g, kind) (see pws_estimators.estimator_for)."""
        self._shift_run = 0
        self.saturation: int | None = None
        """k such that row i = row k shifted by i - k for all i ≥ k (None until found)."""

    # -- growth
    @property
    def built(self) -> int:
        """Largest frequency whose row is stored."""
        return len(self._rows) - 1

    @property
    def complete(self) -> bool:
        """True when every row is known: saturated, or built up to the clipping cap."""
        return self.saturation is not None or self.built >= self.max_frequency

    def effective(self, frequency: int) -> int:
        """The frequency whose stored row (possibly shifted) serves ``frequency``: clipped at the cap."""
        return frequency if self.saturation is not None else min(frequency, self.max_frequency)

    def extend_to(self, frequency: int) -> None:
        """Build rows up to ``frequency`` (or until saturation / the cap)."""
        chunk = 256
        while not self.complete and self.built < frequency:
            start = self.built + 1
            stop = min(max(frequency, start + chunk - 1), self.max_frequency)
            freqs = np.arange(start, stop + 1, dtype=np.int64)
            q = self.scheme.inclusion_probabilities(freqs)
            if np.any(np.diff(np.concatenate(([self._q[-1]], q))) < 0):
                raise ValueError("weight must be non-decreasing: the sampling probabilities q decrease")
            pis = _extend_reporting(self._pi[-1], q, self.epsilon, self.delta)
            for f, qi, pi in zip(freqs.tolist(), q.tolist(), pis.tolist()):
                row = next_row(self._rows[-1], f, pi, self.epsilon, self.delta)
                self._q.append(qi)
                self._pi.append(pi)
                self._rows.append(row)
                if self._is_shift_of_previous(f):
                    self.saturation = f
                    return
            chunk = min(chunk * 2, 65536)

    def _is_shift_of_previous(self, f: int) -> bool:
        """True once rows f-SHIFT_CONFIRMATIONS+1..f are each the previous row shifted (π = 1 throughout)."""
        row, prev = self._rows[f], self._rows[f - 1]
        shifted = (f >= 2 and self._pi[f] == 1.0 and self._pi[f - 1] == 1.0
                   and len(row.tokens) == len(prev.tokens) and bool(np.array_equal(row.tokens, prev.tokens + 1))
                   and bool(np.all(np.abs(row.probs - prev.probs) <= SHIFT_TOLERANCE)))
        self._shift_run = self._shift_run + 1 if shifted else 0
        return self._shift_run >= SHIFT_CONFIRMATIONS

    def extend_until_complete(self) -> None:
        """Build until saturation or the cap (what exact column-wise estimators may need)."""
        while not self.complete:
            self.extend_to(self.built + 4096)

    # -- access
    def row(self, frequency: int) -> SanitizerRow:
        """π_{frequency,·} (sparse)."""
        if frequency < 0:
            raise ValueError("frequency must be >= 0")
        self.extend_to(min(frequency, self.max_frequency))
        eff = self.effective(frequency)
        if self.saturation is not None and eff > self.saturation:
            return self._rows[self.saturation].shifted(eff - self.saturation)
        return self._rows[eff]

    def dense_row(self, frequency: int) -> np.ndarray:
        """π_{frequency,0..frequency} as a dense vector (for checks and plots)."""
        return self.row(frequency).dense(frequency)

    def prob(self, frequency: int, token: int) -> float:
        """π_{frequency, token}."""
        r = self.row(frequency)
        if token == 0:
            return 1.0 - r.reported
        pos = int(np.searchsorted(r.tokens, token))
        return float(r.probs[pos]) if pos < len(r.tokens) and r.tokens[pos] == token else 0.0

    def reporting_probability(self, frequency: int) -> float:
        """π_frequency (Algorithm 3)."""
        return self.row(frequency).reported

    def reporting_probabilities(self, frequencies: np.ndarray) -> np.ndarray:
        """π for an array of frequencies."""
        freqs = np.asarray(frequencies, dtype=np.int64)
        if len(freqs) == 0:
            return np.zeros(0)
        self.extend_to(min(int(freqs.max()), self.max_frequency))
        pis = np.asarray(self._pi)
        eff = np.minimum(freqs, self.built)
        return pis[eff]

    def inclusion_probability(self, frequency: int) -> float:
        """q_frequency of the underlying scheme."""
        return float(self.scheme.inclusion_probabilities(np.array([frequency]))[0])

    # -- sampling
    def sample_tokens(self, frequencies: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One token per key (0 = not reported), independently, from row π_{w,·} of each key's frequency.

        Drawing from π_{w,·} directly is the end-to-end distribution of "sample with q_w, then sanitize with
        p_{w,j} = π_{w,j}/q_w" (Algorithm 4), without materialising the non-private sample.
        """
        freqs = np.asarray(frequencies, dtype=np.int64)
        tokens = np.zeros(len(freqs), dtype=np.int64)
        if len(freqs) == 0:
            return tokens
        uniforms = rng.random(len(freqs))
        self.extend_to(min(int(freqs.max()), self.max_frequency))
        eff = freqs if self.saturation is not None else np.minimum(freqs, self.max_frequency)
        if self.saturation is not None:
            base = np.minimum(eff, self.saturation)
        else:
            base = np.minimum(eff, self.built)
        order = np.argsort(base, kind="stable")
        bounds = np.flatnonzero(np.diff(base[order])) + 1
        for group in np.split(order, bounds):
            f = int(base[group[0]])
            row = self._rows[f]
            if len(row.tokens) == 0:
                continue
            # token = the first whose cumulative mass (after the not-reported mass 1 - π) exceeds u
            edges = (1.0 - row.reported) + np.cumsum(row.probs)
            u = uniforms[group]
            pos = np.searchsorted(edges, u, side="right")
            reported = u >= 1.0 - row.reported
            pos = np.minimum(pos, len(row.tokens) - 1)
            drawn = np.where(reported, row.tokens[pos], 0)
            shift = eff[group] - f
            tokens[group] = np.where(drawn > 0, drawn + shift, 0)
        return tokens


class SanitizerTableCache:
    """A small LRU of :class:`SanitizerTable` keyed by (scheme, ε, δ, max_frequency).

    The tables are deterministic functions of public parameters, so sharing them across calls is safe.
    """

    def __init__(self, max_tables: int = 16) -> None:
        self.max_tables = max_tables
        self._tables: OrderedDict[Hashable, SanitizerTable] = OrderedDict()

    def get(self, scheme: SamplingScheme, *, epsilon: float, delta: float,
            max_frequency: int = DEFAULT_MAX_FREQUENCY) -> SanitizerTable:
        key = (scheme.cache_key(), float(epsilon), float(delta), max_frequency)
        table = self._tables.get(key)
        if table is None:
            table = SanitizerTable(scheme, epsilon=epsilon, delta=delta, max_frequency=max_frequency)
            self._tables[key] = table
            while len(self._tables) > self.max_tables:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return table

    def __len__(self) -> int:
        return len(self._tables)


DEFAULT_TABLE_CACHE = SanitizerTableCache()
"""The process-wide cache used when no ``cache`` is passed (pure, public-parameter tables only)."""
