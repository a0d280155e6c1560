"""Key reporting and sum estimation: private weighted sampling (PWS) vs the SbH baseline on Zipf data.

Reproduces the comparison of Cohen, Geri, Sarlós & Stemmer (AISTATS 2021, their key-reporting experiments): the
fraction of keys reported by PWS (late Algorithm 4) and by SbH (Laplace histogram, threshold
1 + ln(1/δ)/ε, then sample), without sampling and with PPS, for ε ∈ {0.1, 0.5, 1} and
δ ∈ {1e-1, 1e-3, 1e-6}, element level (Δ = 1). Reporting fractions are exact expectations
(Σ_x P[report x] / n from π and the SbH closed form), as in the paper. The NRMSE of the estimate of
Q = Σ_x w_x is exact for PWS (per-frequency bias and MSE of the MLE estimator; keys are independent, so
E(Q̂-Q)² = (Σ bias)² + Σ (MSE - bias²)) and Monte Carlo for both (``--reps`` runs, same seed stream).

    python bench/bench_pws.py                    # Zipf(n=1e4, a=1), PPS τ=0.01, 30 Monte-Carlo runs
    python bench/bench_pws.py --a 2 --reps 10
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from stream_dp.mechanisms import private_weighted_sample, sbh_reporting_probabilities, sbh_sample
from stream_dp.mechanisms.pws import sanitizer_table
from stream_dp.mechanisms.pws_estimators import estimator_for

from bench.results import emit

# Reference gains (no sampling, Zipf(n=1e4, a=1)) computed beforehand with the paper's formulas (not printed in it)
SPEC_GAINS = {(0.1, 1e-1): 3.14, (0.1, 1e-3): 1.98, (0.1, 1e-6): 1.29, (0.5, 1e-1): 1.69, (0.5, 1e-3): 1.31,
              (0.5, 1e-6): 1.13, (1.0, 1e-1): 1.37, (1.0, 1e-3): 1.18, (1.0, 1e-6): 1.09}


def zipf_frequencies(n: int, a: float, mult: float = 1.0) -> np.ndarray:
    """w_i = int(mult · i^-a / n^-a), i = 1..n (the authors' Zipf(size, a, mult))."""
    i = np.arange(1, n + 1, dtype=np.float64)
    return (mult * (n / i) ** a).astype(np.int64)


def exact_nrmse_pws(table, freqs: np.ndarray) -> float:
    est = estimator_for(table)
    uniq, mult = np.unique(freqs, return_counts=True)
    bias_total = var_total = 0.0
    for f, m in zip(uniq.tolist(), mult.tolist()):
        b, mse = est.bias_and_mse(f)
        bias_total += m * b
        var_total += m * (mse - b * b)
    return math.sqrt(bias_total**2 + var_total) / float(freqs.sum())


def run(args: argparse.Namespace) -> list[dict]:
    freqs = zipf_frequencies(args.n, args.a)
    counts = {f"x{n}": int(w) for n, w in enumerate(freqs)}
    total = float(freqs.sum())
    rng = np.random.default_rng(args.seed)
    print(f"Zipf(n={args.n}, a={args.a}): Σw = {int(total)}, max w = {int(freqs.max())}; "
          f"PPS τ = {args.tau}; Monte Carlo runs = {args.reps}; seed = {args.seed}\n")
    print("| sampling | ε | δ | reported PWS | reported SbH | gain PWS/SbH | reference gain | NRMSE PWS exact "
          "| NRMSE PWS MC | NRMSE SbH MC | SbH/PWS NRMSE |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    settings: list[dict] = []
    for scheme, tau in (("none", None), ("pps", args.tau)):
        for eps in (0.1, 0.5, 1.0):
            for delta in (1e-1, 1e-3, 1e-6):
                table = sanitizer_table(scheme=scheme, tau=tau, epsilon=eps, delta=delta)
                frac_pws = float(table.reporting_probabilities(freqs).sum()) / args.n
                frac_sbh = float(sbh_reporting_probabilities(freqs, scheme=scheme, tau=tau, epsilon=eps,
                                                             delta=delta).sum()) / args.n
                nrmse_exact = exact_nrmse_pws(table, freqs)
                err_pws, err_sbh = [], []
                for _ in range(args.reps):
                    seed = int(rng.integers(2**63))
                    q_pws = private_weighted_sample(counts, scheme=scheme, tau=tau, epsilon=eps, delta=delta,
                                                    max_keys_per_user=1, rng=seed).estimate_sum()
                    q_sbh = sbh_sample(counts, scheme=scheme, tau=tau, epsilon=eps, delta=delta,
                                       max_keys_per_user=1, rng=seed).estimate_sum()
                    err_pws.append((q_pws - total) ** 2)
                    err_sbh.append((q_sbh - total) ** 2)
                mc_pws = math.sqrt(np.mean(err_pws)) / total
                mc_sbh = math.sqrt(np.mean(err_sbh)) / total
                spec = SPEC_GAINS.get((eps, delta)) if scheme == "none" and args.n == 10_000 and args.a == 1 else None
                print(f"| {scheme if tau is None else f'{scheme} τ={tau}'} | {eps} | {delta:g} | {frac_pws:.4f} "
                      f"| {frac_sbh:.4f} | {frac_pws / frac_sbh:.2f}× | {f'{spec:.2f}×' if spec else '–'} "
                      f"| {nrmse_exact:.2e} | {mc_pws:.2e} | {mc_sbh:.2e} | {mc_sbh / mc_pws:.2f} |", flush=True)
                settings.append({"scheme": scheme, "tau": tau, "epsilon": eps, "delta": delta,
                                 "reported_pws": frac_pws, "reported_sbh": frac_sbh,
                                 "gain_pws_over_sbh": frac_pws / frac_sbh, "nrmse_pws_exact": nrmse_exact,
                                 "nrmse_pws_mc": mc_pws, "nrmse_sbh_mc": mc_sbh,
                                 "ratio_nrmse_sbh_over_pws": mc_sbh / mc_pws})
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="number of keys")
    parser.add_argument("--a", type=float, default=1.0, help="Zipf exponent")
    parser.add_argument("--tau", type=float, default=0.01, help="PPS threshold τ")
    parser.add_argument("--reps", type=int, default=30, help="Monte-Carlo runs per setting")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    start = time.monotonic()
    settings = run(args)
    print(f"\n({time.monotonic() - start:.1f} s)")
    gains = [s["gain_pws_over_sbh"] for s in settings]
    emit({"bench": "pws", "n": args.n, "a": args.a, "tau": args.tau, "reps": args.reps,
          "min_gain_pws_over_sbh": min(gains), "max_gain_pws_over_sbh": max(gains), "settings": settings,
          "seconds": time.monotonic() - start})


if __name__ == "__main__":
    main()
