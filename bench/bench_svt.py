"""Reproduce seed 003 §9.3 (Figs. 4–6): SVT with Gap vs Adaptive SVT with Gap on item-count histograms.

For k = 2, 4, …, 24 at ε = 0.7 and θ = 1/(1+k^{2/3}) (threshold drawn per run between the 2k-th and
8k-th largest counts), prints the mean number of "above" answers of SVT and of Adaptive SVT (split into
top and middle branch), the precision of each, and the share of ε left when Adaptive SVT is stopped after
its k-th answer, each with its Monte-Carlo standard error (± 1 SE over the runs).

Datasets: MovieLens-small movie counts (number of distinct users who rated each movie; from
``--ratings``, default ``../shared/data/movielens-small/ratings.csv`` next to the repository), and a
heavy-tailed synthetic histogram on the scale of the paper's datasets (Zipf, 2000 items, top count
300 000). When the MovieLens file is missing the script says so and runs on the synthetic data only.

    python -m bench.bench_svt --runs 1000            # both datasets, markdown table to stdout
    python -m bench.bench_svt --dataset synthetic --runs 200 --json out.json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eval.svt_experiments import adaptivity_experiment  # noqa: E402

from bench.results import emit  # noqa: E402

_RATINGS = Path("shared") / "data" / "movielens-small" / "ratings.csv"
# ../shared next to the checkout; from a worktree under <project>/wt/<name> it is two levels up
DEFAULT_RATINGS = next((p for p in (ROOT.parent / _RATINGS, ROOT.parent.parent / _RATINGS) if p.is_file()),
                       ROOT.parent / _RATINGS)


def movielens_counts(path: Path) -> np.ndarray:
    """Distinct users per movieId from a MovieLens ratings.csv (userId,movieId,rating,timestamp)."""
    users: dict[str, set[str]] = defaultdict(set)
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            users[row["movieId"]].add(row["userId"])
    return np.array(sorted(len(u) for u in users.values()), dtype=np.int64)


def synthetic_counts(n: int = 2000, top: float = 300_000, exponent: float = 1.0, seed: int = 0) -> np.ndarray:
    """Zipf-like item counts (Poisson around top/rank^exponent)."""
    rng = np.random.default_rng(seed)
    return rng.poisson(top / np.arange(1, n + 1) ** exponent)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    x = x[~np.isnan(x)]
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")


def run_dataset(name: str, counts: np.ndarray, ks: list[int], epsilon: float, runs: int, seed: int,
                noise: str = "laplace") -> list[dict]:
    rows = []
    order = np.random.default_rng(0).permutation(len(counts))  # one public query order for every k
    for k in ks:
        res = adaptivity_experiment(counts, k=k, epsilon=epsilon, runs=runs, order=order, rng=seed + k,
                                    noise=noise)
        row = {"dataset": name, "k": k, "theta": res.theta, "runs": runs, "noise": noise}
        for key, arr in (("svt", res.svt_answers), ("adaptive", res.adaptive_answers),
                         ("top", res.adaptive_top), ("middle", res.adaptive_middle),
                         ("extra", res.adaptive_answers - res.svt_answers),
                         ("precision_svt", res.svt_precision), ("precision_adaptive", res.adaptive_precision),
                         ("budget_left", res.remaining_at_k)):
            row[key], row[key + "_se"] = _mean_se(arr)
        row["budget_left_bound"] = (1 - res.theta) / 2
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| data | k | SVT answers | Adaptive answers | top | middle | extra | precision SVT | "
            "precision Adaptive | % budget left at k (all-top bound) |\n|" + "---|" * 10)
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['k']} | {r['svt']:.2f} ± {r['svt_se']:.2f} | "
            f"{r['adaptive']:.2f} ± {r['adaptive_se']:.2f} | {r['top']:.2f} | {r['middle']:.2f} | "
            f"{r['extra']:+.2f} ± {r['extra_se']:.2f} | {r['precision_svt']:.3f} ± {r['precision_svt_se']:.3f} | "
            f"{r['precision_adaptive']:.3f} ± {r['precision_adaptive_se']:.3f} | "
            f"{100 * r['budget_left']:.1f} ± {100 * r['budget_left_se']:.1f} ({100 * r['budget_left_bound']:.1f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=("both", "movielens", "synthetic"), default="both")
    parser.add_argument("--ratings", type=Path, default=DEFAULT_RATINGS, help="MovieLens ratings.csv")
    parser.add_argument("--runs", type=int, default=1000, help="Monte-Carlo runs per k (default 1000)")
    parser.add_argument("--epsilon", type=float, default=0.7)
    parser.add_argument("--ks", default="2:24:2", help="start:stop:step (inclusive), default 2:24:2")
    parser.add_argument("--seed", type=int, default=2019)
    parser.add_argument("--noise", choices=("laplace", "geometric", "exponential"), default="laplace",
                        help="the paper's laplace (default) or the service's default geometric (issue 16)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    start, stop, step = (int(x) for x in args.ks.split(":"))
    ks = list(range(start, stop + 1, step))
    datasets: list[tuple[str, np.ndarray]] = []
    if args.dataset in ("both", "movielens"):
        if args.ratings.is_file():
            datasets.append(("movielens", movielens_counts(args.ratings)))
        else:
            print(f"note: {args.ratings} not found; using the synthetic histogram only", file=sys.stderr)
    if args.dataset in ("both", "synthetic") or not datasets:
        datasets.append(("synthetic", synthetic_counts()))
    rows: list[dict] = []
    started = time.perf_counter()
    for name, counts in datasets:
        ranked = np.sort(counts)[::-1]
        print(f"# {name}: {len(counts)} items, largest count {ranked[0]}, counts at ranks 4/48/192: "
              f"{ranked[3]}/{ranked[47]}/{ranked[191]}", file=sys.stderr)
        rows += run_dataset(name, counts, ks, args.epsilon, args.runs, args.seed, args.noise)
    print(f"noise = {args.noise}, ε = {args.epsilon}, θ = 1/(1+k^(2/3)), {args.runs} runs per k, mean ± 1 SE "
          f"({time.perf_counter() - started:.0f} s)\n")
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    emit({"bench": "svt", "runs": args.runs, "epsilon": args.epsilon, "ks": ks,
          "datasets": [name for name, _ in datasets], "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
