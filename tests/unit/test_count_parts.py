"""The thresholded histograms over disjoint parts (``stream_dp/mechanisms/count_parts.py``, the key layout's key
shards): one part is the single-mapping release draw for draw; split by key shard (S = 2, 12), with a public
domain and a binding ``max_keys`` cap, the released outcome has the single release's law (chi-square
homogeneity over many seeds); a broken variant -- each part released from a generator seeded alike -- is
rejected by the same test."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from stream_dp.mechanisms._validation import tie_key
from stream_dp.mechanisms.count_parts import CountParts
from stream_dp.mechanisms.gaussian_histogram import calibration_for_sigma2, gaussian_histogram
from stream_dp.mechanisms.laplace_histogram import calibrate_laplace_histogram, laplace_histogram
from stream_dp.release.key_shards import route_by_key_shard
from stream_dp.store.keys import key_shard_of

COUNTS = {"a": 9, "b": 7, "c": 7, "d": 4, "e": 12, "f": 3, "g": 6}
DOMAIN = ["z", "a"]
GAUSS = calibration_for_sigma2(sigma2=4, threshold_delta=1e-3, max_keys_per_user=1)
LAPLACE = calibrate_laplace_histogram(epsilon=0.5, threshold_delta=1e-3, max_keys_per_user=1)


def _parts(counts: dict[str, int], shards: int) -> CountParts:
    routed = route_by_key_shard(counts, shards)
    return CountParts(shards, lambda j: {k: counts[k] for k in routed.get(j, [])}, lambda k: key_shard_of(str(k), shards))


def _release(kind: str, counts, rng):
    if kind == "gaussian":
        return gaussian_histogram(counts, calibration=GAUSS, max_keys=3, domain=DOMAIN, rng=rng)
    return laplace_histogram(counts, calibration=LAPLACE, max_keys=3, domain=DOMAIN, rng=rng)


def _outcome(result) -> tuple:
    """What the record lists, coarsened: the released keys in order, and whether the cap bound."""
    return tuple(row.key for row in result.rows), result.capped


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_one_part_is_the_single_release_draw_for_draw(kind):
    for seed in range(20):
        assert _release(kind, CountParts.whole(COUNTS), seed) == _release(kind, COUNTS, seed)


def _law(kind: str, release, reps: int, seed: int) -> Counter:
    gen = np.random.default_rng(seed)
    return Counter(_outcome(release(kind, gen)) for _ in range(reps))


def _homogeneity(ours: Counter, theirs: Counter) -> float:
    cells = [c for c in sorted(set(ours) | set(theirs), key=repr) if ours.get(c, 0) + theirs.get(c, 0) >= 10]
    table = np.array([[ours.get(c, 0) for c in cells], [theirs.get(c, 0) for c in cells]])
    assert len(cells) > 5  # the comparison covers many outcomes
    return float(stats.chi2_contingency(table).pvalue)


REPS = 4000


@pytest.mark.slow  # a statistical audit: 2 x 4,000 releases per case
@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
@pytest.mark.parametrize("shards", [2, 12])
def test_parts_have_the_single_releases_law(kind, shards):
    single = _law(kind, lambda k, gen: _release(k, COUNTS, gen), REPS, seed=1)
    parted = _law(kind, lambda k, gen: _release(k, _parts(COUNTS, shards), gen), REPS, seed=2)
    assert _homogeneity(parted, single) > 1e-3


def _reseeded(kind: str, counts: dict[str, int], shards: int, gen: np.random.Generator):
    """Broken: each key shard released on its own from a generator seeded alike, the rows merged by the cap's
    order -- keys of different shards get the same noise."""
    seed = int(gen.integers(2**32))
    routed = route_by_key_shard(counts, shards)
    rows = []
    for j in range(shards):
        part = {k: counts[k] for k in routed.get(j, [])}
        domain = [k for k in DOMAIN if key_shard_of(k, shards) == j]
        if kind == "gaussian":
            res = gaussian_histogram(part, calibration=GAUSS, max_keys=3, domain=domain, rng=seed)
        else:
            res = laplace_histogram(part, calibration=LAPLACE, max_keys=3, domain=domain, rng=seed)
        rows += res.rows
    rows.sort(key=lambda r: (r.count, tie_key(r.key)), reverse=True)

    class Result:
        pass

    out = Result()
    out.rows, out.capped = rows[:3], len(rows) > 3  # type: ignore[attr-defined]
    return out


@pytest.mark.slow
def test_the_law_test_rejects_parts_drawn_from_one_seed():
    single = _law("gaussian", lambda k, gen: _release(k, COUNTS, gen), REPS, seed=1)
    broken = _law("gaussian", lambda k, gen: _reseeded(k, COUNTS, 12, gen), REPS, seed=2)
    assert _homogeneity(broken, single) < 1e-6
