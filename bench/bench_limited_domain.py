"""Limited-domain top-k vs full-domain Gumbel top-k on a window of 10⁶ distinct keys.

Limited-domain top-k (DR19 Algorithm 1) reads only the top k̄+1 counts -- what the release worker gets
from one ``ZRANGE … REV LIMIT 0 k̄+1`` on the window's ZSET -- and adds k̄+1 Gumbel draws. The baseline
is the textbook one-shot Gumbel top-k over the *whole* domain (no ⊥, needs every count): one Gumbel
draw per key, then a partial sort. Both are timed in the same run on the same data; the table reports
medians, p95 and the ratio baseline / limited-domain.

    python -m bench.bench_limited_domain                    # 10^6 keys, k̄ = 1000, k ∈ {10, 100, 1000}
    python -m bench.bench_limited_domain --keys 100000 --reps 100
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from stream_dp.mechanisms import limited_domain_topk

from bench.results import emit


def _times(fn: Callable[[], object], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def full_domain_gumbel_topk(counts: np.ndarray, k: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Baseline: Gumbel(1/ε) on every count, indices of the k largest, best first."""
    noisy = counts + rng.gumbel(0.0, 1.0 / epsilon, len(counts))
    top = np.argpartition(-noisy, k - 1)[:k]
    return top[np.argsort(-noisy[top])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--k-bar", type=int, default=1000)
    parser.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--max-keys-per-user", type=int, default=10)
    parser.add_argument("--reps", type=int, default=200, help="repetitions of the limited-domain call")
    parser.add_argument("--baseline-reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=2019)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    counts = np.minimum(rng.zipf(1.3, size=args.keys), 10**7).astype(np.float64)  # distinct-user counts
    keys = [f"key:{i:07d}" for i in range(args.keys)]
    order = np.argsort(-counts, kind="stable")[: args.k_bar + 1]
    top = {keys[i]: float(counts[i]) for i in order}  # what ZRANGE … REV LIMIT 0 k̄+1 returns
    full = dict(zip(keys, counts.tolist()))

    print(f"window: {args.keys:,} distinct keys (Zipf 1.3 counts), k̄ = {args.k_bar}, ε = {args.epsilon}, "
          f"δ = {args.delta}, Δ = {args.max_keys_per_user}; medians over {args.reps} (limited domain) and "
          f"{args.baseline_reps} (baseline) runs\n")
    print("| k | limited-domain, top k̄+1 given: median (p95) | full-domain Gumbel top-k: median | ratio |")
    print("|---|---|---|---|")
    per_k: list[dict] = []
    for k in args.k:
        ldt = _times(lambda k=k: limited_domain_topk(top, k=k, k_bar=args.k_bar, epsilon=args.epsilon,
                                                 delta=args.delta, max_keys_per_user=args.max_keys_per_user,
                                                 rng=rng), args.reps)
        base = _times(lambda k=k: full_domain_gumbel_topk(counts, k, args.epsilon, rng), args.baseline_reps)
        med, p95, bmed = statistics.median(ldt), float(np.percentile(ldt, 95)), statistics.median(base)
        print(f"| {k} | {med * 1e3:.3f} ms ({p95 * 1e3:.3f} ms) | {bmed * 1e3:.2f} ms | {bmed / med:.1f}× |")
        per_k.append({"k": k, "limited_domain_median_s": med, "limited_domain_p95_s": p95,
                      "full_domain_median_s": bmed, "ratio_full_over_limited": bmed / med})
    whole = _times(lambda: limited_domain_topk(full, k=args.k[0], k_bar=args.k_bar, epsilon=args.epsilon,
                                               delta=args.delta, max_keys_per_user=args.max_keys_per_user,
                                               rng=rng), 3)
    print(f"\nfor reference: limited-domain top-k handed the whole {args.keys:,}-key mapping (it then finds "
          f"the top k̄+1 itself, k = {args.k[0]}): median {statistics.median(whole) * 1e3:.1f} ms")
    emit({"bench": "limited_domain", "keys": args.keys, "k_bar": args.k_bar, "reps": args.reps, "per_k": per_k,
          "whole_mapping_median_s": statistics.median(whole)})


if __name__ == "__main__":
    main()
