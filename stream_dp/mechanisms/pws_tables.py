"""Private weighted sampling tables (Cohen, Geri, Sarlós & Stemmer, AISTATS 2021: Algorithms 3 and 4).

The table of one (sampling scheme, ε, δ): row i is the sanitizer row π_{i,·} of Algorithm 4
(:func:`~stream_dp.mechanisms.pws_rows.next_row`, each row (ε, δ)-DP against the one before it), with
reported mass π_i of Algorithm 3 (:mod:`stream_dp.mechanisms.pws_reporting`) for the scheme's q
(:mod:`stream_dp.mechanisms.pws_schemes`). This module grows the table, finds where it stops growing, looks
rows up and draws tokens from them; everything in it is a function of public parameters only, never of data.

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

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import check_delta, check_epsilon
from stream_dp.mechanisms.pws_reporting import (
    extend_reporting,
    pws_reporting_probabilities,
    pws_sanitizer_probabilities,
)
from stream_dp.mechanisms.pws_rows import EMPTY_ROW, SanitizerRow, next_row
from stream_dp.mechanisms.pws_schemes import SCHEMES, SamplingScheme, Weight

__all__ = [  # the scheme, Algorithm 3 and the row step are re-exported: their import path from before the split
    "DEFAULT_MAX_FREQUENCY",
    "DEFAULT_TABLE_CACHE",
    "EMPTY_ROW",
    "SCHEMES",
    "SHIFT_CONFIRMATIONS",
    "SHIFT_TOLERANCE",
    "SamplingScheme",
    "SanitizerRow",
    "SanitizerTable",
    "SanitizerTableCache",
    "Weight",
    "next_row",
    "pws_reporting_probabilities",
    "pws_sanitizer_probabilities",
]

DEFAULT_MAX_FREQUENCY = 200_000
"""Largest frequency for which a non-saturating table is built; larger frequencies are clipped to it."""

SHIFT_TOLERANCE = 1e-15
"""Largest per-entry difference accepted between row i and row i-1 shifted by one token (rounding only)."""
SHIFT_CONFIRMATIONS = 3
"""Consecutive rows that must be shifts (within the tolerance) before the table stops growing."""


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
            pis = extend_reporting(self._pi[-1], q, self.epsilon, self.delta)
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
