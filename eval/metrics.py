"""Utility metrics of a released top-k list, and Monte-Carlo summaries with error bars.

Ties make "the true top-k" ambiguous, so correctness is tie-aware: a released key is correct when its
true count is at least the k-th largest true count (and positive). For a release of m ≤ k keys:

* precision@k = correct / m  (undefined, NaN, when nothing was released; averaged over runs that released);
* recall@k    = correct / min(k, number of keys with a positive count);
* keys        = m.

Error bars are 95 % normal-approximation intervals of the Monte-Carlo mean: 1.96·s/√n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from eval.data import Histogram

Z95 = 1.959963984540054


def release_metrics(released: np.ndarray, truth: Histogram, k: int) -> dict[str, np.ndarray]:
    """Per-run precision, recall and number of keys of ``released`` (shape (runs, k), -1 padded).

    >>> h = Histogram.from_arrays(np.arange(5), np.array([9, 7, 7, 3, 1]), 5)
    >>> m = release_metrics(np.array([[0, 2], [3, -1], [-1, -1]]), h, 2)
    >>> m["precision"].tolist(), m["recall"].tolist(), m["keys"].tolist()
    ([1.0, 0.0, nan], [1.0, 0.0, 0.0], [2, 1, 0])
    """
    released = np.atleast_2d(released)
    dense = truth.dense()
    present = released >= 0
    counts = np.where(present, dense[np.maximum(released, 0)], 0)
    kth = truth.kth(k)
    correct = (present & (counts >= max(kth, 1))).sum(axis=1)
    keys = present.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(keys > 0, correct / np.maximum(keys, 1), np.nan)
    denominator = max(1, min(k, len(truth)))
    return {"precision": precision, "recall": correct / denominator, "keys": keys}


@dataclass(frozen=True)
class Estimate:
    """Monte-Carlo mean of a per-run quantity with its 95 % half-width and the runs that defined it."""

    mean: float
    half_width: float
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> "Estimate":
        """Mean and error bar over the finite values (NaN runs are excluded and not counted in n).

        >>> e = Estimate.of(np.array([1.0, 0.0, np.nan, 1.0, 0.0]))
        >>> e.mean, e.n, round(e.half_width, 3)
        (0.5, 4, 0.566)
        """
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return cls(math.nan, math.nan, 0)
        sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
        return cls(float(v.mean()), Z95 * sd / math.sqrt(v.size), int(v.size))

    def fmt(self, digits: int = 2) -> str:
        """``mean ± half_width`` for tables; ``n/a`` when undefined."""
        if self.n == 0:
            return "n/a"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"
