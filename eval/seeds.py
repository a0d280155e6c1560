"""Experiment 3: the seed papers' own results, reproduced with stream-dp's mechanisms.

Reuses the mechanism helpers' code, so the report shows what the shipped mechanisms do:

* **Seed 002 key-reporting gain** (Cohen et al. 2021, their key-reporting experiments): expected fraction of keys
  reported by private weighted sampling (Algorithm 3/4, ``stream_dp.mechanisms.pws``) over the SbH
  baseline (Laplace histogram, threshold 1 + ln(1/δ)/ε), exact expectations (no Monte Carlo), on the
  Zipf data of ``bench/bench_pws.py`` and on MovieLens movie frequencies; element level (Δ = 1) as in the
  paper. Reference gains computed beforehand with the paper's formulas are quoted next to ours.
* **Seed 003 BLUE** (Ding et al., §6.3 Theorem 6.2 / Corollary 1): % MSE reduction of Noisy Top-K with
  Measures' BLUE over the measurement alone, against the theory (1+λk)/(k+λk); and **SVT with Measures**
  (§5.3) against ``measures_mse_ratio``. Monte Carlo with the shipped ``noisy_topk_with_gap``,
  ``blue_estimates`` and ``svt_with_measures``.
* **Seed 003 adaptivity** (§9.3, Figs. 4–6): SVT with Gap vs Adaptive SVT with Gap -- answers, the
  branch split, precision and the share of budget left after k answers -- by ``bench/bench_svt.py``'s
  ``run_dataset`` (when present).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stream_dp.mechanisms import blue_estimates, noisy_topk_with_gap, sbh_reporting_probabilities, svt_with_measures
from stream_dp.mechanisms.noisy_topk_gap import noise_scale, noise_variance
from stream_dp.mechanisms.pws import sanitizer_table
from stream_dp.mechanisms.svt_measures import measures_mse_ratio

from eval.metrics import Z95

PWS_EPSILONS = (0.1, 0.5, 1.0)
PWS_DELTAS = (1e-1, 1e-3, 1e-6)


def pws_gain_rows(frequencies: dict[str, np.ndarray], *, tau: float = 0.01) -> list[dict[str, Any]]:
    """Exact expected reporting fractions of PWS and SbH, no sampling and PPS(τ), per dataset/ε/δ."""
    from bench.bench_pws import SPEC_GAINS

    rows = []
    for name, freqs in frequencies.items():
        freqs = np.asarray(freqs, dtype=np.int64)
        freqs = freqs[freqs > 0]
        for scheme, scheme_tau in (("none", None), ("pps", tau)):
            for eps in PWS_EPSILONS:
                for delta in PWS_DELTAS:
                    pws = float(_pws_reporting(freqs, scheme=scheme, tau=scheme_tau, epsilon=eps,
                                               delta=delta).sum()) / len(freqs)
                    sbh = float(sbh_reporting_probabilities(freqs, scheme=scheme, tau=scheme_tau, epsilon=eps,
                                                            delta=delta).sum()) / len(freqs)
                    spec = SPEC_GAINS.get((eps, delta)) if (name == "zipf_n1e4_a1" and scheme == "none") else None
                    rows.append({"dataset": name, "keys": len(freqs), "scheme": scheme,
                                 "tau": scheme_tau if scheme_tau is not None else "", "epsilon": eps, "delta": delta,
                                 "reported_pws": pws, "reported_sbh": sbh, "gain": pws / sbh if sbh > 0 else math.inf,
                                 "spec_gain": spec if spec is not None else ""})
    return rows


def _pws_reporting(freqs: np.ndarray, *, scheme: str, tau: float | None, epsilon: float, delta: float
                   ) -> np.ndarray:
    """π_w of every key. π is non-decreasing in w and ≤ 1, so frequencies above a cap at which π is already
    1 − 1e-12 are evaluated at the cap (error ≤ 1e-12 per key); this avoids building the sanitizer table up
    to the largest frequency (10⁸ for Zipf a = 2), which is slow for some (ε, δ)."""
    table = sanitizer_table(scheme=scheme, tau=tau, epsilon=epsilon, delta=delta)
    cap = int(4 * (1 + math.log(1 / delta) / epsilon) + (2 / tau if tau else 0)) + 8
    while cap < freqs.max():
        if table.reporting_probabilities(np.array([cap]))[0] >= 1 - 1e-12:
            return table.reporting_probabilities(np.minimum(freqs, cap))
        cap *= 2
    return table.reporting_probabilities(freqs)


def _ratio_estimate(err_new: np.ndarray, err_base: np.ndarray) -> tuple[float, float]:
    """Ratio of mean squared errors and its 95 % half-width (delta method over runs)."""
    n = len(err_base)
    ratio = float(err_new.mean() / err_base.mean())
    resid = err_new - ratio * err_base
    se = float(resid.std(ddof=1) / (math.sqrt(n) * err_base.mean())) if n > 1 else math.nan
    return ratio, Z95 * se


def blue_topk_rows(counts: np.ndarray, *, ks: tuple[int, ...], epsilon: float, runs: int, seed: int,
                   dataset: str, noise: str = "laplace") -> list[dict[str, Any]]:
    """Noisy Top-K with Measures (monotone): MSE of the BLUE vs the measurement alone. ``noise``:
    ``"laplace"`` (the paper) or ``"geometric"`` (discrete Laplace selection and measurements, the
    service's default since issue 16; integer counts)."""
    from stream_dp.mechanisms.noisy_topk_gap import discrete_laplace

    values = {f"i{i}": int(c) for i, c in enumerate(counts)}
    truth = np.asarray(counts, dtype=float)
    measure_noise = "geometric" if noise == "geometric" else "laplace"
    rows = []
    for k in ks:
        rng = np.random.default_rng([seed, k])
        half = epsilon / 2
        measure_scale = k / half
        lam = noise_variance(noise, noise_scale(k=k, epsilon=half, monotone=True)) / noise_variance(
            measure_noise, measure_scale)
        err_a, err_b = np.empty(runs), np.empty(runs)
        for r in range(runs):
            selected = noisy_topk_with_gap(values, k=k, epsilon=half, monotone=True, noise=noise, rng=rng)
            q = truth[[int(key[1:]) for key, _ in selected]]
            if measure_noise == "geometric":
                alpha = q + discrete_laplace(measure_scale, k, rng)
            else:
                alpha = q + rng.laplace(0.0, measure_scale, k)
            beta = blue_estimates(alpha, [g for _, g in selected], lam=lam)
            err_a[r] = float(np.sum((alpha - q) ** 2))
            err_b[r] = float(np.sum((beta - q) ** 2))
        ratio, half_width = _ratio_estimate(err_b, err_a)
        rows.append({"experiment": "noisy_topk_with_measures", "dataset": dataset, "k": k, "epsilon": epsilon,
                     "runs": runs, "lambda": lam, "mse_reduction": 1 - ratio,
                     "mse_reduction_ci95": half_width, "theory_reduction": 1 - (1 + lam * k) / (k + lam * k)})
    return rows


def blue_svt_rows(counts: np.ndarray, *, ks: tuple[int, ...], epsilon: float, runs: int, seed: int,
                  dataset: str) -> list[dict[str, Any]]:
    """SVT with Gap with Measures (§5.3): MSE of the BLUE vs the measurement alone, threshold drawn per run
    between the 2k-th and 8k-th largest counts (the paper's setup), queries in a fixed shuffled order."""
    rows = []
    for k in ks:
        rng = np.random.default_rng([seed, 1000 + k])
        stream = np.asarray(counts, dtype=float)[rng.permutation(len(counts))]
        ranked = np.sort(stream)[::-1]
        err_a, err_b, answered = [], [], []
        for _ in range(runs):
            threshold = float(ranked[int(rng.integers(2 * k, min(8 * k, len(ranked))))])
            res = svt_with_measures(stream, threshold, k=k, epsilon=epsilon, rng=rng)
            if not res.items:
                continue
            q = stream[[it.index for it in res.items]]
            err_a.append(float(np.sum((np.array([it.measurement for it in res.items]) - q) ** 2)))
            err_b.append(float(np.sum((np.array([it.blue for it in res.items]) - q) ** 2)))
            answered.append(len(res.items))
        ratio, half_width = _ratio_estimate(np.array(err_b), np.array(err_a))
        rows.append({"experiment": "svt_with_measures", "dataset": dataset, "k": k, "epsilon": epsilon,
                     "runs": len(err_a), "lambda": "", "mse_reduction": 1 - ratio, "mse_reduction_ci95": half_width,
                     "theory_reduction": 1 - measures_mse_ratio(k, epsilon=epsilon)})
    return rows


def adaptivity_rows(datasets: dict[str, np.ndarray], *, ks: list[int], epsilon: float, runs: int,
                    seed: int) -> list[dict[str, Any]] | None:
    """Seed 003 §9.3 by ``bench/bench_svt.py`` (``None`` when that script is not in the tree)."""
    try:
        from bench.bench_svt import run_dataset
    except ImportError:
        return None
    rows = []
    for name, counts in datasets.items():
        for row in run_dataset(name, np.asarray(counts), ks, epsilon, runs, seed):
            out = dict(row)
            for key in [k for k in row if k.endswith("_se")]:
                out[key[:-3] + "_ci95"] = Z95 * row[key] if row[key] == row[key] else math.nan
                del out[key]
            rows.append(out)
    return rows
