"""Private weighted sampling of a whole window, vectorised over its arrays.

:func:`stream_dp.mechanisms.private_weighted_sample` takes a mapping and draws the keys' tokens in
``tie_key`` order (so that a fixed seed gives the same sample whatever the input order); on a 10⁶-key window
that Python sort dominates the release. Here the same mechanism -- the same Algorithm-4 sanitizer table at
(ε/Δ, δ/Δ) (:func:`stream_dp.mechanisms.pws.sanitizer_table`), the same vectorised token draw
(``SanitizerTable.sample_tokens``), the same estimator and the same :class:`SampleResult` and DP event --
runs on the window's arrays in the order the reader returned them (``ZRANGE`` order, deterministic).

Privacy and distribution are unchanged: each key's token is an independent draw from row π_{w,·} of its
own count, so which uniform variate is used for which key does not change the joint distribution of the
output (only the seed-to-sample mapping). Tests check that for keys given in ``tie_key`` order the result
equals ``private_weighted_sample`` with the same seed, row for row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stream_dp.mechanisms._validation import tie_key
from stream_dp.mechanisms.pws import SampleResult, SampleRow, sanitizer_table
from stream_dp.mechanisms.pws_estimators import estimator_for
from stream_dp.rng import make_rng


def sample_arrays(keys: list[str], counts: np.ndarray, *, scheme: str, tau: float | None, epsilon: float,
                  delta: float, max_keys_per_user: int, rng: Any = None, estimator: str = "mle") -> SampleResult:
    """``private_weighted_sample`` over parallel arrays (keys, integer counts ≥ 0); (ε, δ)-DP user-level."""
    counts = np.asarray(counts, dtype=np.float64)
    if len(keys) != len(counts):
        raise ValueError(f"keys and counts differ in length ({len(keys)} != {len(counts)})")
    if not np.all(np.isfinite(counts)) or np.any(counts < 0) or np.any(counts != np.floor(counts)):
        raise ValueError("counts must be finite non-negative integers (numbers of distinct users)")
    table = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta,
                            max_keys_per_user=max_keys_per_user)
    estimates = estimator_for(table, kind=estimator)
    generator = make_rng(rng)
    present = np.flatnonzero(counts >= 1)
    tokens = table.sample_tokens(counts[present].astype(np.int64), generator)
    hit = np.flatnonzero(tokens > 0)
    rows = [SampleRow(keys[int(present[i])], int(tokens[i]), estimates.estimate(int(tokens[i]))) for i in hit]
    rows.sort(key=lambda r: (-r.token, tie_key(r.key)))
    return SampleResult(rows=rows, scheme=scheme, tau=table.scheme.tau, epsilon=float(epsilon), delta=float(delta),
                        max_keys_per_user=int(max_keys_per_user), estimator=estimator)
