"""Experiment 1: top-k discovery with an unknown domain, at equal privacy per window.

For every dataset, Δ (keys per user), ε_w (the whole window release's ε), k and -- for limited-domain
top-k (LDT) -- k̄, run each method ``runs`` times on the same bounded histogram and record precision@k,
recall@k and the number of keys returned (:mod:`eval.metrics`), against the bounded truth the mechanisms
see and, as a secondary column, against the unbounded truth (distinct users per key without the L0 bound).

Methods (calibrated by :func:`eval.calibration.calibrate` to the same (ε_w, δ_w)):

- ``ldt``: stream-dp's :func:`stream_dp.mechanisms.limited_domain_topk`, given the window's counts;
- ``full_domain_em``: one-shot Gumbel top-k over the whole known universe;
- ``laplace_threshold``: Laplace partition selection, top k of the noisy kept counts;
- ``laplace_then_em``: Laplace partition selection (½ ε_w, ½ δ_w) then Gumbel top-k over the kept keys;
- ``true_topk``: the DP-free ceiling.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream_dp.mechanisms import limited_domain_topk

from eval import baselines
from eval.calibration import Calibrated, calibrate
from eval.data import Histogram, Stream, bounded_histogram
from eval.metrics import Estimate, release_metrics

METHODS = ("ldt", "full_domain_em", "laplace_threshold", "laplace_then_em", "true_topk")


@dataclass(frozen=True)
class Grid:
    """The parameter grid of experiment 1."""

    epsilons: Sequence[float] = (0.1, 0.5, 1.0, 2.0)
    deltas_keys: Sequence[int] = (1, 5, 20)
    ks: Sequence[int] = (10, 50)
    k_bar_factors: Sequence[int] = (1, 2, 5)
    delta_w: float = 1e-6
    runs: int = 200


def cell_rng(base_seed: int, *parts: Any) -> np.random.Generator:
    """A generator for one grid cell, derived from the base seed and the cell's parameters (stable)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return np.random.default_rng([base_seed, int.from_bytes(digest, "big")])


def run_ldt(hist: Histogram, *, k: int, k_bar: int, epsilon: float, delta: float, max_keys_per_user: int,
            runs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``runs`` calls of stream-dp's limited-domain top-k on the window's counts (keys as strings, as the
    release worker reads them from Redis). Returns released key ids (runs, k) and hit_bottom per run."""
    counts = {str(key): int(c) for key, c in zip(hist.keys, hist.counts)}
    out = -np.ones((runs, k), dtype=np.int64)
    bottom = np.zeros(runs, dtype=bool)
    for r in range(runs):
        result = limited_domain_topk(counts, k=k, k_bar=k_bar, epsilon=epsilon, delta=delta,
                                     max_keys_per_user=max_keys_per_user, rng=rng)
        out[r, :len(result.keys)] = [int(key) for key in result.keys]
        bottom[r] = result.hit_bottom
    return out, bottom


def _row(dataset: str, delta_keys: int, cal: Calibrated, method: str, k_bar: int | None, params: str,
         released: np.ndarray, hist: Histogram, unbounded: Histogram, seconds: float,
         hit_bottom: np.ndarray | None = None) -> dict[str, Any]:
    m = release_metrics(released, hist, cal.k)
    mu = release_metrics(released, unbounded, cal.k)
    row: dict[str, Any] = {
        "dataset": dataset, "delta_keys": delta_keys, "epsilon_w": cal.epsilon_w, "delta_w": cal.delta_w,
        "k": cal.k, "k_bar": k_bar if k_bar is not None else "", "method": method, "params": params,
        "runs": len(released),
    }
    for name, values in (("precision", m["precision"]), ("recall", m["recall"]), ("keys", m["keys"]),
                         ("recall_unbounded", mu["recall"])):
        est = Estimate.of(values)
        row[f"{name}_mean"], row[f"{name}_ci95"], row[f"{name}_n"] = est.mean, est.half_width, est.n
    row["empty_fraction"] = float(np.mean(m["keys"] == 0))
    row["hit_bottom_fraction"] = float(np.mean(hit_bottom)) if hit_bottom is not None else ""
    row["seconds"] = round(seconds, 3)
    return row


def run_topk_experiment(datasets: Iterable[Stream], grid: Grid, *, seed: int = 20261129) -> list[dict[str, Any]]:
    """All rows of experiment 1 (one per dataset × Δ × ε_w × k × method [× k̄ for LDT])."""
    rows: list[dict[str, Any]] = []
    for stream in datasets:
        unbounded = bounded_histogram(stream, None)
        for dk in grid.deltas_keys:
            hist = bounded_histogram(stream, dk)
            for eps_w in grid.epsilons:
                for k in grid.ks:
                    cal = calibrate(eps_w, grid.delta_w, k)
                    rows.extend(_cell(stream.name, dk, cal, hist, unbounded, grid, seed))
    return rows


def _cell(name: str, dk: int, cal: Calibrated, hist: Histogram, unbounded: Histogram, grid: Grid,
          seed: int) -> list[dict[str, Any]]:
    k, runs = cal.k, grid.runs
    rows = []
    for factor in grid.k_bar_factors:
        k_bar = factor * k
        t = time.perf_counter()
        released, bottom = run_ldt(hist, k=k, k_bar=k_bar, epsilon=cal.ldt_epsilon, delta=cal.ldt_delta,
                                   max_keys_per_user=dk, runs=runs,
                                   rng=cell_rng(seed, name, dk, cal.epsilon_w, k, "ldt", k_bar))
        rows.append(_row(name, dk, cal, "ldt", k_bar, f"eps_outcome={cal.ldt_epsilon:.4g};delta_bottom={cal.ldt_delta:g}",
                         released, hist, unbounded, time.perf_counter() - t, bottom))
    t = time.perf_counter()
    released = baselines.full_domain_topk(hist, k=k, epsilon=cal.em_epsilon, runs=runs,
                                          rng=cell_rng(seed, name, dk, cal.epsilon_w, k, "em"))
    rows.append(_row(name, dk, cal, "full_domain_em", None, f"eps_peel={cal.em_epsilon:.4g};universe={hist.universe}",
                     released, hist, unbounded, time.perf_counter() - t))
    t = time.perf_counter()
    released = baselines.laplace_partition_topk(hist, k=k, epsilon=cal.lap_epsilon, delta=cal.lap_delta,
                                                max_keys_per_user=dk, runs=runs,
                                                rng=cell_rng(seed, name, dk, cal.epsilon_w, k, "lap"))
    tau = baselines.laplace_threshold(epsilon=cal.lap_epsilon, delta=cal.lap_delta, max_keys_per_user=dk)
    rows.append(_row(name, dk, cal, "laplace_threshold", None,
                     f"eps={cal.lap_epsilon:g};delta={cal.lap_delta:g};tau={tau:.1f}",
                     released, hist, unbounded, time.perf_counter() - t))
    t = time.perf_counter()
    released = baselines.laplace_select_then_em(
        hist, k=k, select_epsilon=cal.split_select_epsilon, select_delta=cal.split_select_delta,
        em_epsilon=cal.split_em_epsilon, max_keys_per_user=dk, runs=runs,
        rng=cell_rng(seed, name, dk, cal.epsilon_w, k, "split"))
    rows.append(_row(name, dk, cal, "laplace_then_em", None,
                     f"eps_select={cal.split_select_epsilon:g};eps_peel={cal.split_em_epsilon:.4g}",
                     released, hist, unbounded, time.perf_counter() - t))
    ceiling = np.tile(baselines.true_topk(hist, k=k), (1, 1))
    rows.append(_row(name, dk, cal, "true_topk", None, "no noise", ceiling, hist, unbounded, 0.0))
    return rows
