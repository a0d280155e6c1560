"""Cost of the cryptographically secure generator: every mechanism with PCG64 (before) vs ChaCha20 (after).

Issue 16 moved every production draw from numpy's PCG64 to ChaCha20 (``stream_dp.rng.secure_rng``). This
runs each release mechanism on the same inputs with both bit generators behind the same
``numpy.random.Generator`` API, interleaved rep by rep (so machine noise hits both alike), and reports the
median time per call and the ratio after/before:

- ``limited_domain_topk`` on the top k̄+1 = 1001 counts (k = 10; the ``topk`` release);
- ``sample_arrays`` PPS private weighted sampling of ``--keys`` keys (the ``sample`` release, the largest
  number of draws: one per key);
- ``large_margin_argmax`` over ``--keys`` keys (the ``argmax`` release);
- ``noisy_topk_with_gap`` over a 200-key watchlist, Laplace and discrete noise (the ``watch_topk`` release);
- ``AdaptiveSVT`` answering a 200-key watchlist, Laplace and geometric noise (the ``alerts`` release);
- raw draws: 10⁶ Laplace variates.

    python -m bench.bench_rng                    # 10⁵ keys, 30 reps (~1 min)
    python -m bench.bench_rng --keys 1000000 --reps 10

The last stdout line is a JSON summary: ``{"bench": "rng", "ratios": {name: after/before, ...}}``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from bench.results import emit

from stream_dp.mechanisms import AdaptiveSVT, large_margin_argmax, limited_domain_topk, noisy_topk_with_gap
from stream_dp.release.sampling import sample_arrays
from stream_dp.rng import secure_rng


def _cases(keys: int) -> dict[str, Callable[[np.random.Generator], object]]:
    data = np.random.default_rng(0)
    counts = np.minimum(data.zipf(1.3, size=keys), 10**6).astype(np.float64)
    names = [f"key:{i:07d}" for i in range(keys)]
    order = np.argsort(-counts, kind="stable")
    top = {names[i]: float(counts[i]) for i in order[:1001]}
    full = dict(zip(names, counts.tolist()))
    watch = {names[i]: float(counts[i]) for i in order[:200]}
    watch_values = [watch[k] for k in watch]

    def svt(noise: str) -> Callable[[np.random.Generator], object]:
        return lambda g: AdaptiveSVT(float(counts[order[20]]), k=50, epsilon=1.0, noise=noise,
                                     rng=g).process_many(watch_values)

    return {
        "limited_domain_topk": lambda g: limited_domain_topk(top, k=10, k_bar=1000, epsilon=0.1, delta=1e-7,
                                                             max_keys_per_user=10, rng=g),
        "sample_pps": lambda g: sample_arrays(names, counts, scheme="pps", tau=0.01, epsilon=0.5, delta=1e-7,
                                              max_keys_per_user=10, rng=g),
        "large_margin_argmax": lambda g: large_margin_argmax(full, epsilon=0.5, delta=1e-7, n=1, rng=g),
        "watch_topk_laplace": lambda g: noisy_topk_with_gap(watch, k=10, epsilon=0.5, noise="laplace", rng=g),
        "watch_topk_geometric": lambda g: noisy_topk_with_gap(watch, k=10, epsilon=0.5, noise="geometric",
                                                              rng=g),
        "alerts_svt_laplace": svt("laplace"),
        "alerts_svt_geometric": svt("geometric"),
        "draws_laplace_1e6": lambda g: g.laplace(0.0, 1.0, 1_000_000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    cases = _cases(args.keys)
    before, after = np.random.default_rng(1), secure_rng()
    print(f"{args.keys:,} keys; median of {args.reps} interleaved reps per generator\n")
    print("| mechanism | PCG64 (before) | ChaCha20 (after) | after/before |")
    print("|---|---|---|---|")
    ratios: dict[str, float] = {}
    for name, call in cases.items():
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.reps):
            for label, gen in (("before", before), ("after", after)):
                t0 = time.perf_counter()
                call(gen)
                times[label].append(time.perf_counter() - t0)
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        ratios[name] = round(a / b, 3)
        print(f"| {name} | {b * 1e3:.3f} ms | {a * 1e3:.3f} ms | {a / b:.2f}× |")
    emit({"bench": "rng", "keys": args.keys, "reps": args.reps, "ratios": ratios})


if __name__ == "__main__":
    main()
