"""Experiment 5: the histogram with per-user weights (``releases.histogram.weighting = "per_user"``, docs/privacy.md
§8d) against the uniform histogram, on windows of light users and of full ones.

Both are the library's call (:func:`stream_dp.api.histogram`, ``weighting="uniform"`` / ``"per_user"``) on each
window's bounded (user, key) pairs, one call per Monte-Carlo run: the production calibration at the default window
budget (ε_w = 1, δ_w = 2e-7: δ_τ = δ′ = 1e-7, the same ρ for both), the production scores
(:func:`~stream_dp.mechanisms.weighted_histogram.weighted_scores`) and the exact sampler. recall@k is against the
true top-k by *user counts* (what the uniform histogram estimates), so weighting is measured on the uniform
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

from stream_dp import api
from stream_dp.release.window_budget import histogram_calibration

from eval import analysis
from eval.data import Stream, bounded_mask, load_movielens, zipf_stream

EPSILON, DELTA_W, MAX_KEYS_PER_USER, K = 1.0, 2e-7, 5, 10
#: users of the hourly day: ≈ 10⁴, 10³ and 250 of them active per hour
HOURLY_USERS = (11_500, 1_150, 300)


def hourly_stream(users: int) -> Stream:
    """The continual experiment's hourly day (eval.report.hourly_day_stream) with ``users`` users."""
    return zipf_stream(n_users=users, universe=10_000, exponent=1.0, events_per_user=48, seed=3,
                       start=20_000 * 86400, span_seconds=86400)


def calibrations() -> tuple[Any, Any]:
    """The uniform and the weighted histogram's calibrations of this experiment (the same ρ)."""
    return (histogram_calibration(EPSILON, DELTA_W, MAX_KEYS_PER_USER),
            histogram_calibration(EPSILON, DELTA_W, MAX_KEYS_PER_USER, weighting="per_user"))


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


def _released(pairs: list[tuple[int, int]], weighting: str, runs: int, rng: np.random.Generator) -> list[list[int]]:
    """Per run, the released keys of ``api.histogram`` on the window's pairs, best first (all above the
    threshold)."""
    return [[item["key"] for item in api.histogram(pairs, epsilon=EPSILON, delta=DELTA_W,
                                                   max_keys_per_user=MAX_KEYS_PER_USER, weighting=weighting,
                                                   seed=rng)["items"]]
            for _ in range(runs)]


def compare_weighting(name: str, windows: list[tuple[np.ndarray, np.ndarray]], *, runs: int, seed: int
                      ) -> list[dict[str, Any]]:
    """One row per method: recall@k against the user counts' top-k, keys released, windows with a key."""
    rng = np.random.default_rng(seed)
    stats: dict[str, dict[str, list[float]]] = {m: {"recall": [], "keys": [], "any": []} for m in ("uniform", "per_user")}
    keys_per_user = []
    for users, keys in windows:
        present, counts = np.unique(keys, return_counts=True)
        _, per_user = np.unique(users, return_counts=True)
        keys_per_user.append(float(per_user.mean()))
        top = set(present[np.argsort(-counts, kind="stable")[:K]].tolist())
        pairs = list(zip(users.tolist(), keys.tolist()))
        for method in ("uniform", "per_user"):
            for released in _released(pairs, method, runs, rng):
                stats[method]["recall"].append(len(top & set(released[:K])) / len(top))
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
