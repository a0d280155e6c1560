"""Input checks and the fixed tie order shared by the selection mechanisms.

Error messages name the parameter at fault but never echo a key or a count: raw per-key data must not
reach logs or error reports (docs/privacy.md §1, trusted curator).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    """Return ``value`` as a float, or raise ``ValueError`` unless it is finite and > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number > 0, got {type(value).__name__}")
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {number!r}")
    return number


def check_delta(value: Any, name: str = "delta") -> float:
    """Return ``value`` as a float, or raise ``ValueError`` unless 0 < value < 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number in (0, 1), got {type(value).__name__}")
    number = float(value)
    if not 0 < number < 1:
        raise ValueError(f"{name} must be in (0, 1), got {number!r}")
    return number


def check_positive_fraction(value: Any, name: str) -> Fraction:
    """``value`` as an exact positive Fraction (floats convert exactly: a sampler then uses exactly this value)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    try:
        exact = Fraction(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number > 0, got {value!r}") from None
    if exact <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return exact


def check_positive_int(value: Any, name: str) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def check_size(size: Any) -> int:
    """A sample size: an integer >= 0 (``ValueError`` otherwise)."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise ValueError(f"size must be an integer >= 0, got {size!r}")
    return int(size)


def check_scores(values: Mapping[Hashable, Any], *, name: str = "counts",
                 nonnegative: bool = True) -> tuple[list[Hashable], np.ndarray]:
    """Split a mapping key → score into (keys, float64 array), rejecting NaN, ±inf and (optionally) < 0.

    The message says what is wrong, not which key or which value.
    """
    if not isinstance(values, Mapping):
        raise ValueError(f"{name} must be a mapping key -> number, got {type(values).__name__}")
    keys = list(values.keys())
    try:
        arr = np.fromiter(values.values(), dtype=np.float64, count=len(keys))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must map every key to a real number") from None
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains an infinite value")
    if nonnegative and (arr < 0).any():
        raise ValueError(f"{name} contains a negative value; counts must be >= 0")
    return keys, arr


def tie_key(key: Hashable) -> tuple[int, Any]:
    """The fixed, data-independent tie order: equal scores rank by *descending* ``tie_key``.

    For ``str`` keys this is their UTF-8 bytes, so the order among equal counts is the one Redis uses for
    ``ZRANGE ... REV`` (reverse lexicographic by member bytes): a top-(k̄+1) list read from a window ZSET is
    consistent with the tie order used here. Integers rank by value; any other key by a blake2b hash of its
    ``repr`` (stable across processes, unlike the built-in ``hash``).

    >>> sorted(["b", "a", "c"], key=tie_key, reverse=True)
    ['c', 'b', 'a']
    """
    if isinstance(key, str):
        return (0, key.encode("utf-8"))
    if isinstance(key, bytes):
        return (1, key)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return (2, int(key))
    return (3, hashlib.blake2b(repr(key).encode("utf-8"), digest_size=16).digest())


def ranked_top(candidates: np.ndarray, values: np.ndarray, keys: list[Hashable], limit: int) -> list[int]:
    """The ``limit`` candidates (indices into ``values`` and ``keys``) with the largest values, best first, equal
    values in the fixed :func:`tie_key` order (descending) -- exactly the first ``limit`` of sorting every candidate
    by (value, tie key), but only the candidates at or above the ``limit``-th largest value are sorted.

    >>> ranked_top(np.arange(4), np.array([5, 9, 5, 1]), ["a", "b", "c", "d"], 2)
    [1, 2]
    """
    if len(candidates) > limit:
        chosen = values[candidates]
        cut = np.partition(chosen, len(chosen) - limit)[len(chosen) - limit]
        candidates = candidates[chosen >= cut]
    ranked = sorted(zip(values[candidates].tolist(), candidates.tolist()), key=lambda vi: (vi[0], tie_key(keys[vi[1]])),
                    reverse=True)
    return [i for _, i in ranked[:limit]]


def top_indices(keys: list[Hashable], values: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` highest values (the top-m *set*), ties at the boundary broken by :func:`tie_key`.

    Returns all indices when there are at most ``m``. The order of the returned indices is unspecified.
    """
    n = len(values)
    if n <= m:
        return np.arange(n)
    threshold = np.partition(values, n - m)[n - m]  # the m-th largest value
    above = np.flatnonzero(values > threshold)
    tied = np.flatnonzero(values == threshold)
    need = m - len(above)
    if need < len(tied):
        tied = np.array(sorted(tied, key=lambda i: tie_key(keys[i]), reverse=True)[:need], dtype=np.intp)
    return np.concatenate([above, tied])


def kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest value (1-based), or 0.0 when there are fewer than k values (missing counts are 0)."""
    n = len(values)
    if n < k:
        return 0.0
    return float(np.partition(values, n - k)[n - k])
