"""The array form of private weighted sampling is private_weighted_sample, row for row."""

from __future__ import annotations

import numpy as np
import pytest

from stream_dp.mechanisms import private_weighted_sample
from stream_dp.release.sampling import sample_arrays


@pytest.mark.parametrize("scheme,tau", [("pps", 0.05), ("ppswor", 0.05), ("none", None)])
def test_same_rows_as_private_weighted_sample_for_keys_in_tie_order(scheme, tau) -> None:
    rng = np.random.default_rng(0)
    keys = sorted(f"k{j:04d}" for j in range(2000))  # tie_key order for str keys: UTF-8 bytes ascending
    counts = np.floor(rng.pareto(1.0, size=len(keys)) * 3).astype(float)
    params = dict(scheme=scheme, tau=tau, epsilon=1.0, delta=1e-5, max_keys_per_user=2)
    ours = sample_arrays(keys, counts, rng=11, **params)
    theirs = private_weighted_sample(dict(zip(keys, counts.tolist())), rng=11, **params)
    assert ours.rows == theirs.rows and ours.events == theirs.events
    assert ours.parameters() == theirs.parameters()
    assert len(ours.rows) > 10  # something was sampled: the comparison is not vacuous


def test_rejects_non_integer_or_negative_counts() -> None:
    for bad in ([1.5], [-1.0], [float("nan")]):
        with pytest.raises(ValueError, match="counts must be"):
            sample_arrays(["a"], np.array(bad), scheme="pps", tau=0.1, epsilon=1.0, delta=1e-6,
                          max_keys_per_user=1)
    with pytest.raises(ValueError, match="differ in length"):
        sample_arrays(["a", "b"], np.array([1.0]), scheme="pps", tau=0.1, epsilon=1.0, delta=1e-6,
                      max_keys_per_user=1)
