"""Experiment 5: the histogram with per-user weights (``releases.histogram.weighting = "per_user"``, docs/privacy.md
§8d) against the uniform histogram, on windows of light users and of full ones.

Both run the production calibrations (:func:`~stream_dp.mechanisms.gaussian_histogram.calibrate_histogram`,
:func:`~stream_dp.mechanisms.weighted_histogram.calibrate_weighted_histogram`: the default zcdp route, ε = 1 per
window at δ′ = 1e-7, δ_τ = 1e-7, the same ρ) on the same bounded windows; the scores come from the windows'
counted (user, key) pairs by the production :func:`~stream_dp.mechanisms.weighted_histogram.weighted_scores`.
Monte-Carlo runs draw the noise with the vectorised sampler of the same law
(:func:`~stream_dp.mechanisms.discrete_gaussian.sample_discrete_gaussian_table`). recall@k is against the true
top-k by *user counts* (what the uniform histogram estimates), so weighting is measured on the uniform
histogram's own target.

Streams: the hourly synthetic day of the continual experiment (users drawing 48 Zipf keys over a day, ≈ 2.2
distinct keys per user and hour) at three sizes — ≈ 10⁴, 10³ and 250 users per hour — and the MovieLens grid's
whole-stream window, where every user holds Δ keys after bounding (so every weight is the same).

``python -m eval.weighting --out docs/evaluation`` runs it alone (``python -m eval.report`` runs it with the rest).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from eval import analysis
from eval.data import Stream, bounded_mask, load_movielens, zipf_stream
from stream_dp.mechanisms.discrete_gaussian import sample_discrete_gaussian_table
from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram
from stream_dp.mechanisms.weighted_histogram import calibrate_weighted_histogram, weighted_scores

EPSILON, DELTA_TAU, DELTA_PRIME, MAX_KEYS_PER_USER, K = 1.0, 1e-7, 1e-7, 5, 10
#: users of the hourly day: ≈ 10⁴, 10³ and 250 of them active per hour
HOURLY_USERS = (11_500, 1_150, 300)


def hourly_stream(users: int) -> Stream:
    """The continual experiment's hourly day (eval.report.hourly_day_stream) with ``users`` users."""
    return zipf_stream(n_users=users, universe=10_000, exponent=1.0, events_per_user=48, seed=3,
                       start=20_000 * 86400, span_seconds=86400)


def calibrations() -> tuple[Any, Any]:
    """The uniform and the weighted histogram's calibrations of this experiment (the same ρ)."""
    return (calibrate_histogram(epsilon=EPSILON, threshold_delta=DELTA_TAU, conversion_delta=DELTA_PRIME,
                                max_keys_per_user=MAX_KEYS_PER_USER),
            calibrate_weighted_histogram(epsilon=EPSILON, threshold_delta=DELTA_TAU, conversion_delta=DELTA_PRIME,
                                         max_keys_per_user=MAX_KEYS_PER_USER))


def thresholds_in_count_units() -> tuple[int, float]:
    """τ of the uniform histogram and τ_w / U of the weighted one."""
    uniform, weighted = calibrations()
    return uniform.threshold, weighted.threshold / weighted.unit


def windows_of(stream: Stream, window_size: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per window (``None``: the whole stream), the bounded (user, key) pairs as two arrays."""
    keep = bounded_mask(stream, MAX_KEYS_PER_USER, window_size)
    starts = np.zeros(len(stream), dtype=np.int64) if window_size is None else stream.ts - stream.ts % window_size
    out = []
    for start in np.unique(starts[keep]):
        sel = keep & (starts == start)
        out.append((stream.user[sel], stream.key[sel]))
    return out


def _released(values: np.ndarray, sigma2: Any, threshold: int, runs: int, rng: np.random.Generator
              ) -> list[np.ndarray]:
    """Per run, the indices of the released keys in decreasing noisy value (all above the threshold)."""
    noisy = values[None, :] + sample_discrete_gaussian_table(sigma2, (runs, len(values)), rng)
    out = []
    for row in noisy:
        kept = np.flatnonzero(row >= threshold)
        out.append(kept[np.argsort(-row[kept], kind="stable")])
    return out


def compare_weighting(name: str, windows: list[tuple[np.ndarray, np.ndarray]], *, runs: int, seed: int
                      ) -> list[dict[str, Any]]:
    """One row per method: recall@k against the user counts' top-k, keys released, windows with a key."""
    uniform, weighted = calibrations()
    rng = np.random.default_rng(seed)
    stats: dict[str, dict[str, list[float]]] = {m: {"recall": [], "keys": [], "any": []} for m in ("uniform", "per_user")}
    keys_per_user = []
    for users, keys in windows:
        present, counts = np.unique(keys, return_counts=True)
        _, per_user = np.unique(users, return_counts=True)
        keys_per_user.append(float(per_user.mean()))
        scores = weighted_scores(zip(users.tolist(), keys.tolist()), max_keys_per_user=MAX_KEYS_PER_USER)
        score = np.array([scores[int(k)] for k in present], dtype=np.int64)
        top = set(np.argsort(-counts, kind="stable")[:K].tolist())
        for method, values, cal in (("uniform", counts, uniform), ("per_user", score, weighted)):
            for released in _released(values, cal.sigma2, cal.threshold, runs, rng):
                stats[method]["recall"].append(len(top & set(released[:K].tolist())) / len(top))
                stats[method]["keys"].append(float(len(released)))
                stats[method]["any"].append(float(len(released) > 0))
    rows = []
    for method, s in stats.items():
        recall = np.array(s["recall"])
        rows.append({"stream": name, "method": method, "windows": len(windows), "runs": runs,
                     "keys_per_user": round(float(np.mean(keys_per_user)), 3),
                     "users_per_window": round(float(np.mean([len(np.unique(u)) for u, _ in windows])), 1),
                     "recall_mean": float(recall.mean()),
                     "recall_ci95": float(1.96 * recall.std(ddof=1) / math.sqrt(len(recall))),
                     "keys_released_mean": float(np.mean(s["keys"])),
                     "windows_with_a_key": float(np.mean(s["any"]))})
    return rows


def run_weighting_experiment(*, runs: int, seed: int, movielens: Stream | None = None,
                             hourly_users: tuple[int, ...] = HOURLY_USERS) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, users in enumerate(hourly_users):
        rows += compare_weighting(f"hourly day, {users:,} users", windows_of(hourly_stream(users), 3600),
                                  runs=runs, seed=seed + i)
    if movielens is not None:
        rows += compare_weighting("MovieLens, one window (every user on Δ keys)", windows_of(movielens, None),
                                  runs=runs, seed=seed + 10)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.weighting", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/evaluation"))
    parser.add_argument("--runs", type=int, default=50, help="Monte-Carlo runs per window")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--movielens", type=Path, default=None)
    args = parser.parse_args(argv)
    movielens = load_movielens(args.movielens) if args.movielens else load_movielens()
    path = analysis.write_csv(args.out / "weighting.csv",
                              run_weighting_experiment(runs=args.runs, seed=args.seed, movielens=movielens))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
