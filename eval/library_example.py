"""The worked example of docs/library.md on the real MovieLens small data set: ``python -m eval.library_example``.

MovieLens ``ratings.csv`` (userId, movieId, rating, timestamp) replayed in timestamp order as one window; user =
userId, key = movieId; the public domain is the catalogue ``movies.csv``. One window budget, (ε, δ) = (1, 10⁻⁶),
Δ = 5 keys per user, k = 10; the plan's choice, then three release types through :mod:`stream_dp.api`. The seed
is fixed so that the printed output is the one docs/library.md shows (a deployment passes none: the ChaCha20
generator). Prints nothing but a note when the data set is absent.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from stream_dp import api

from eval.data import DEFAULT_MOVIELENS

EPSILON, DELTA, MAX_KEYS_PER_USER, K, SEED = 1.0, 1e-6, 5, 10, 48


def load(directory: Path) -> tuple[list[tuple[int, int]], dict[int, str]]:
    """(user, movie) rows in timestamp order (ties in file order), and the catalogue's titles."""
    with open(directory / "ratings.csv", newline="", encoding="utf-8") as fh:
        ratings = [(int(r["timestamp"]), i, int(r["userId"]), int(r["movieId"])) for i, r in
                   enumerate(csv.DictReader(fh))]
    ratings.sort()
    with open(directory / "movies.csv", newline="", encoding="utf-8") as fh:
        titles = {int(r["movieId"]): r["title"] for r in csv.DictReader(fh)}
    return [(user, movie) for _, _, user, movie in ratings], titles


def show(record: dict, titles: dict[int, str], field: str) -> list[str]:
    return [f"  {item['rank'] if 'rank' in item else '-':>2}  {titles.get(item['key'], item['key'])}"
            + (f"  {item[field]}" if field else "") for item in record["items"][:K]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.library_example", description=__doc__.splitlines()[0])
    parser.add_argument("--movielens", type=Path, default=DEFAULT_MOVIELENS)
    args = parser.parse_args(argv)
    if not (args.movielens / "ratings.csv").is_file():
        print(f"no MovieLens ratings.csv in {args.movielens}")
        return 0
    rows, titles = load(args.movielens)
    catalogue = sorted(titles)
    budget = {"epsilon": EPSILON, "delta": DELTA, "max_keys_per_user": MAX_KEYS_PER_USER}
    print(f"{len(rows):,} ratings, {len({u for u, _ in rows}):,} users, catalogue of {len(catalogue):,} movies")
    choice = api.plan(rows, epsilon=EPSILON, max_keys_per_user=MAX_KEYS_PER_USER, k=K, domain="complete")
    arguments = ", ".join(f"{name}={value}" for name, value in choice["arguments"].items())
    print(f"plan: {choice['release_type']} -> api.{choice['call']}({arguments}); evaluated cell "
          f"{choice['cell']['dataset']} (Δ = {choice['cell']['delta_keys']}, ε_w = {choice['cell']['epsilon_w']}), "
          f"recall@{K} {choice['recall']:.2f}, best peer {choice['best_peer_recall']:.2f}")
    hist = api.histogram(rows, **budget, calibration="exact", domain=catalogue, seed=SEED)
    params = hist["mechanism"]["parameters"]
    print(f"histogram (exact-profile calibration, catalogue public): σ² = {params['sigma2']}, "
          f"{len(hist['items'])} rows (max_keys), ±{hist['info']['ci_half_width']} at 95 %; top {K}:")
    print("\n".join(show(hist, titles, "count")))
    top = api.topk(rows, **budget, k=K, seed=SEED)
    p = top["mechanism"]["parameters"]
    print(f"topk (limited domain, k̄ = {p['k_bar']}, ε per outcome {p['epsilon']:.4f}): {len(top['items'])} keys, "
          f"stopped at ⊥: {top['hit_bottom']}, ε spent {top['budget']['epsilon_spent']:.3f} of {EPSILON}")
    print("\n".join(show(top, titles, "")))
    known = api.topk(rows, **budget, k=K, domain=catalogue, discovery_share=0.0, seed=SEED)
    print(f"topk over the catalogue (Gumbel, ε per peel {known['mechanism']['parameters']['track_epsilon']:.4f}):")
    print("\n".join(show(known, titles, "")))
    sample = api.sample(rows, **budget, seed=SEED)
    estimate = sum(item["estimate"] for item in sample["items"])
    total = sum(api.bounded(rows, max_keys_per_user=MAX_KEYS_PER_USER).counts.values())
    print(f"sample (PPS, τ = 0.01): {sample['info']['sampled']} movies sampled; Σ estimates = {estimate:,.0f} "
          f"(true bounded total {total:,})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
