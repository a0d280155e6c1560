"""Exact discrete samplers: CKS20 in batches (after) vs one draw at a time in Python integers (before).

Issue 48 runs the exact discrete Gaussian and discrete Laplace samplers on whole arrays
(:mod:`stream_dp.mechanisms.exact_batch`); the scalar loops they replace stay as
``sample_discrete_gaussian_scalar`` / ``sample_discrete_laplace_scalar``. Both run here on the production
generator (ChaCha20, :func:`stream_dp.rng.secure_rng`), interleaved rep by rep, at each ``--sizes`` number of keys:

- ``gaussian``: N_Z(0, σ²) draws at the histogram's σ² for ε = 1, Δ = 5, δ = 10⁻⁶ (σ² = 108.993);
- ``laplace``: discrete Laplace draws at b = Δ/ε = 5 (the Laplace histogram at ε = 1, Δ = 5);
- ``histogram``: a whole Gaussian histogram release (noise, threshold, cap, rows) over that many keys with
  Zipf counts, with the batched sampler vs the same release drawing its noise with the scalar one.

The scalar sampler takes ~1 µs·10² per draw, so at sizes above ``--scalar-reps-above`` keys it runs once per case
(the batched one still ``--reps`` times); medians are reported.

    python -m bench.bench_samplers                       # 17,000 and 10⁶ keys (~3 min on 2 busy cores)
    python -m bench.bench_samplers --sizes 17000 --reps 9

The last stdout line is a JSON summary: ``{"bench": "samplers", "seconds": {...}, "speedup": {...}}``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from bench.results import emit

from stream_dp.mechanisms.discrete_gaussian import (
    discrete_gaussian_quantile,
    sample_discrete_gaussian,
    sample_discrete_gaussian_scalar,
)
from stream_dp.mechanisms.gaussian_histogram import calibrate_histogram, gaussian_histogram, noisy_threshold_release
from stream_dp.mechanisms.laplace_histogram import sample_discrete_laplace, sample_discrete_laplace_scalar
from stream_dp.rng import secure_rng

LAPLACE_SCALE = 5
MAX_KEYS = 1000


def _cases(keys: int) -> dict[str, tuple[Callable[[np.random.Generator], object], Callable[[np.random.Generator],
                                                                                          object]]]:
    cal = calibrate_histogram(epsilon=1.0, threshold_delta=5e-7, conversion_delta=5e-7, max_keys_per_user=5)
    counts = dict(zip((f"key:{i:07d}" for i in range(keys)),
                      np.minimum(np.random.default_rng(0).zipf(1.5, size=keys), 10**6).tolist()))
    half_width = discrete_gaussian_quantile(cal.sigma2, 0.95)

    def histogram_scalar(g: np.random.Generator) -> object:
        return noisy_threshold_release(counts, noise=lambda n: sample_discrete_gaussian_scalar(cal.sigma2, n, rng=g),
                                       threshold=cal.threshold, max_keys=MAX_KEYS, ci_half_width=half_width,
                                       domain=(), events=cal.events())

    return {
        "gaussian": (lambda g: sample_discrete_gaussian_scalar(cal.sigma2, keys, rng=g),
                     lambda g: sample_discrete_gaussian(cal.sigma2, keys, rng=g)),
        "laplace": (lambda g: sample_discrete_laplace_scalar(LAPLACE_SCALE, keys, rng=g),
                    lambda g: sample_discrete_laplace(LAPLACE_SCALE, keys, rng=g)),
        "histogram": (histogram_scalar,
                      lambda g: gaussian_histogram(counts, calibration=cal, max_keys=MAX_KEYS, rng=g)),
    }


def _timed(call: Callable[[np.random.Generator], object], generator: np.random.Generator) -> float:
    start = time.perf_counter()
    call(generator)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[17_000, 1_000_000])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scalar-reps-above", type=int, default=100_000,
                        help="sizes above this run the scalar sampler once per case")
    args = parser.parse_args()
    generator = secure_rng()
    seconds: dict[str, dict[str, float]] = {}
    speedup: dict[str, float] = {}
    print(f"ChaCha20 generator; median of {args.reps} interleaved reps (scalar: 1 rep above "
          f"{args.scalar_reps_above:,} keys)\n")
    print("| case | keys | scalar (before) | batched (after) | speedup |")
    print("|---|---|---|---|---|")
    for keys in args.sizes:
        for name, (before, after) in _cases(keys).items():
            scalar_reps = 1 if keys > args.scalar_reps_above else args.reps
            times: dict[str, list[float]] = {"before": [], "after": []}
            for rep in range(args.reps):
                if rep < scalar_reps:
                    times["before"].append(_timed(before, generator))
                times["after"].append(_timed(after, generator))
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            label = f"{name}_{keys}"
            seconds[label] = {"before": b, "after": a}
            speedup[label] = b / a
            print(f"| {name} | {keys:,} | {b * 1e3:,.1f} ms | {a * 1e3:,.1f} ms | {b / a:,.0f}× |")
    emit({"bench": "samplers", "sizes": args.sizes, "reps": args.reps, "seconds": seconds, "speedup": speedup})


if __name__ == "__main__":
    main()
