"""The e^{−1} coin of the exact samplers: one table look-up (after) vs the loop over K (before), same run.

CKS20 Algorithm 1 at γ = 1 draws Bernoulli(1/K) coins for K = 2, 3, … until one fails; the batched samplers
(:mod:`stream_dp.mechanisms.exact_batch`) pack the coins of K = 2 … 8 into one uniform integer R below 8!, so the
loop passes K = 2 … j iff j! divides R. The loop used to test K = 2 … 8 in turn on the whole array (seven rounds of
modulo and fancy indexing); where it stops is a function of R alone, so :func:`exact_batch._packed_coins` decides
every element with one look-up. Both draw the same coins and decide them the same way: this bench checks the draws
are identical for one seed before timing them.

Cases, each with ``exp_minus_one`` the loop (:func:`loop_exp_minus_one`, the code before, kept here as the
baseline) and then the table, interleaved rep by rep, on the production generator (ChaCha20):

- ``coin``: 10⁵ coins of e^{−1};
- ``gaussian`` / ``laplace``: the discrete Gaussian at the histogram's σ² (ε = 1, Δ = 5, δ = 10⁻⁶: σ² = 108.993)
  and the discrete Laplace at b = 5, over ``--keys`` draws;
- ``histogram``: one ``stream_dp.api.histogram`` call over ``--keys`` keys with Zipf counts at window budget
  (1, 10⁻⁶), Δ = 5 -- what the evaluation (docs/evaluation, experiment 4) runs per Monte-Carlo run.

Times are process CPU seconds (the machine is shared; wall time moves with the other processes' load).

    python -m bench.bench_packed_coin                         # 17,000 and 10⁶ keys
    python -m bench.bench_packed_coin --keys 17000 --reps 21

The last stdout line is a JSON summary: ``{"bench": "packed_coin", "seconds": {...}, "speedup": {...}}``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from bench.results import emit

from stream_dp import api
from stream_dp.mechanisms import exact_batch
from stream_dp.mechanisms.discrete_gaussian import sample_discrete_gaussian
from stream_dp.mechanisms.laplace_histogram import sample_discrete_laplace
from stream_dp.rng import secure_rng

SIGMA2 = Fraction(108993, 1000)  # the histogram's σ² at ε = 1, Δ = 5, δ = 1e-6
LAPLACE_SCALE = 5


def loop_exp_minus_one(rng: np.random.Generator, size: int) -> np.ndarray:
    """The baseline: Algorithm 1's loop at γ = 1 over the packed digits K = 2 … 8 one round at a time (the code
    before the table), then fresh Bernoulli(1/K) coins past them."""
    out = np.empty(size, dtype=bool)
    idx = np.arange(size)
    r = exact_batch.uniform_below(rng, exact_batch._FACTORIAL[exact_batch._DIGITS], size)
    k = 2
    while len(idx):
        passed = r % exact_batch._FACTORIAL[k] == 0 if k <= exact_batch._DIGITS \
            else exact_batch.uniform_below(rng, k, len(idx)) == 0
        out[idx[~passed]] = k % 2 == 1
        idx, r = idx[passed], r[passed]
        k += 1
    return out


def _cases(keys: int) -> dict[str, Callable[[np.random.Generator], object]]:
    counts = dict(zip((f"key:{i:07d}" for i in range(keys)),
                      np.minimum(np.random.default_rng(0).zipf(1.5, size=keys), 10**6).tolist()))
    return {
        "coin": lambda g: exact_batch.exp_minus_one(g, 100_000),
        "gaussian": lambda g: sample_discrete_gaussian(SIGMA2, keys, rng=g),
        "laplace": lambda g: sample_discrete_laplace(LAPLACE_SCALE, keys, rng=g),
        "histogram": lambda g: api.histogram(counts=counts, epsilon=1.0, delta=1e-6, max_keys_per_user=5, seed=g),
    }


def _with_coin(coin: Callable[[np.random.Generator, int], np.ndarray], call: Callable[[np.random.Generator], object],
               generator: np.random.Generator) -> tuple[float, object]:
    table = exact_batch.exp_minus_one
    exact_batch.exp_minus_one = coin  # the samplers look the coin up in the module at every call
    try:
        start = time.process_time()
        out = call(generator)
        return time.process_time() - start, out
    finally:
        exact_batch.exp_minus_one = table


def _same_draws(call: Callable[[np.random.Generator], object]) -> bool:
    """Whether the loop and the table give the same output for one seed."""
    _, before = _with_coin(loop_exp_minus_one, call, np.random.default_rng(7))
    _, after = _with_coin(exact_batch.exp_minus_one, call, np.random.default_rng(7))
    if isinstance(before, np.ndarray):
        return bool(np.array_equal(before, after))  # type: ignore[arg-type]
    return before == after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[17_000, 1_000_000])
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--large-reps", type=int, default=5, help="reps above 10⁵ keys")
    args = parser.parse_args()
    generator = secure_rng()
    seconds: dict[str, dict[str, float]] = {}
    speedup: dict[str, float] = {}
    print(f"ChaCha20 generator; process CPU time, median of {args.reps} interleaved reps ({args.large_reps} above 10⁵ keys)\n")
    print("| case | keys | loop over K (before) | table (after) | speedup | same draws |")
    print("|---|---|---|---|---|---|")
    for keys in args.keys:
        reps = args.reps if keys <= 100_000 else args.large_reps
        for name, call in _cases(keys).items():
            if name == "coin" and keys != args.keys[0]:
                continue
            same = _same_draws(call)
            times: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(reps):
                times["before"].append(_with_coin(loop_exp_minus_one, call, generator)[0])
                times["after"].append(_with_coin(exact_batch.exp_minus_one, call, generator)[0])
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            label = name if name == "coin" else f"{name}_{keys}"
            seconds[label] = {"before": b, "after": a}
            speedup[label] = b / a
            shown = "10⁵ coins" if name == "coin" else f"{keys:,}"
            print(f"| {name} | {shown} | {b * 1e3:,.2f} ms | {a * 1e3:,.2f} ms | {b / a:.2f}× | {same} |")
            if not same:
                raise SystemExit(f"{name}: the table's draws differ from the loop's for one seed")
    emit({"bench": "packed_coin", "keys": args.keys, "reps": args.reps, "seconds": seconds, "speedup": speedup})


if __name__ == "__main__":
    main()
