"""Experiment 2b: continual release with a *released domain* -- each window's release learns its domain from what
earlier windows published (``domain_from_released``, docs/privacy.md §10) -- against single-window releases, the
public catalogue and the peers, on small windows.

**Streams** (Δ = 5, k = 10, ε_w ∈ {1, 2}, δ_w = 1e-6 per window):

- *MovieLens by arrival*: ml-latest-small's users in the order of their first rating, :data:`ARRIVAL_USERS` per
  window (each user's ratings keep their order; every window has the same number of users). The real 30-day
  windows of this data hold 2-20 users each -- no method finds a key there (a count needs ≈ 50 users at ε_w = 1),
  which :func:`real_time_windows` reports -- so the windows are cut by users, as a service with ~100 new users a
  month would see them; the catalogue drifts with the users' years (1996-2018);
- *hourly day*: the continual experiment's hourly synthetic day (users drawing 48 Zipf keys over a day) with
  1,150 and 300 users, ≈ 10³ and 250 active per hour.

**Methods.** Through the production release worker in-process (ingest's store and the real ledger on a real
redis-server, :mod:`eval.continual`), windows replayed in order within a run:

- ``sdp_histogram_exact_released``: the histogram (exact calibration at (ε_w, δ_w)) with
  ``domain_from_released`` (the default memory and order);
- ``sdp_topk_released``: known-domain top-k with only a released domain and threshold discovery, per-outcome ε
  the largest whose worst case is (ε_w, δ_w) by the ledger's conversion;
- ``sdp_topk_released_ldt`` -- today's route before this change: the same with ``discovery = "limited_domain"``
  and ``discovery_share = 0.2`` (its k̄-based ⊥ at ε·√0.2).

Single-window releases (no domain: each window alone, the same law drawn by the vectorised samplers of
experiment 4, :mod:`eval.peers`): stream-dp's histogram (exact, zcdp, Laplace) and limited-domain top-k; the
peers OpenDP (Laplace threshold at its true δ, Gaussian threshold) and PipelineDP (truncated geometric, Laplace
and Gaussian thresholding). With the whole catalogue public -- an oracle most deployments lack: the histogram
over it and PipelineDP's public partitions.

**Scoring.** recall@k of each window's top k (by noisy count; by rank for the selection-only methods) against the
window's true bounded top k (tie-aware, :func:`eval.metrics.release_metrics`). A run's score is its mean over the
windows after the first (the first has nothing earlier to learn from); intervals are 95 % over runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from eval.data import Histogram, Stream, load_movielens, window_histograms
from eval.metrics import Estimate, release_metrics

EPSILONS = (1.0, 2.0)
DELTA_W = 1e-6
DK = 5
K = 10
ARRIVAL_USERS = 100  # users per MovieLens window, in arrival order
MONTH = 30 * 86400
HOURLY_USERS = (1150, 300)
SINGLE_WINDOW = ("sdp_histogram_exact", "sdp_histogram", "sdp_histogram_laplace", "sdp_ldt")
CATALOGUE = ("sdp_histogram_exact_catalogue", "pipelinedp_public_gaussian_catalogue")
PEERS = ("opendp_laplace_threshold_true_delta", "opendp_gaussian_threshold", "pipelinedp_truncated_geometric",
         "pipelinedp_laplace_thresholding", "pipelinedp_gaussian_thresholding")
RELEASED = ("sdp_histogram_exact_released", "sdp_topk_released")
BEFORE = ("sdp_topk_released_ldt",)  # today's continual route before this change


@dataclass(frozen=True)
class Cell:
    """One stream cut into windows of ``size`` seconds."""

    name: str
    stream: Stream
    size: int


def movielens_by_arrival(ml: Stream, users_per_window: int = ARRIVAL_USERS, size: int = MONTH) -> Stream:
    """MovieLens with its users in arrival order, ``users_per_window`` per window of ``size`` seconds: a user's
    events all fall in her window (at its start + 1 s), in their original order; windows of fewer users (the
    last) are dropped.

    >>> s = Stream("m", np.array([7, 8, 7, 9]), np.array([0, 1, 2, 1]), np.array([5, 6, 7, 8]), 3, np.arange(3))
    >>> movielens_by_arrival(s, users_per_window=2, size=10).ts.tolist()
    [11, 11, 11]
    """
    first: dict[int, int] = {}
    for pos, user in enumerate(ml.user.tolist()):
        first.setdefault(user, pos)
    rank = {user: i for i, user in enumerate(sorted(first, key=first.__getitem__))}
    window = np.array([rank[u] // users_per_window for u in ml.user.tolist()], dtype=np.int64)
    keep = window < len(rank) // users_per_window
    order = np.lexsort((np.arange(len(ml))[keep], window[keep]))
    idx = np.flatnonzero(keep)[order]
    start = size  # a multiple of the window size: the schedule's start
    return Stream(f"{ml.name}-by-arrival", ml.user[idx], ml.key[idx], start + window[idx] * size + 1,
                  ml.universe, ml.key_labels)


def real_time_windows(ml: Stream, size: int = MONTH) -> dict[str, float]:
    """How many users the real ``size``-second windows hold (the reason the experiment cuts by arrival)."""
    starts = ml.ts - ml.ts % size
    pairs = np.unique(np.stack([starts, ml.user]), axis=1)
    _, users = np.unique(pairs[0], return_counts=True)
    return {"windows": float(len(users)), "median_users": float(np.median(users)), "max_users": float(users.max())}


def cells(movielens: Stream | None, hourly: Callable[[int], Stream], hourly_users: Sequence[int] = HOURLY_USERS
          ) -> list[Cell]:
    out = []
    if movielens is not None:
        out.append(Cell(f"MovieLens, {ARRIVAL_USERS} users per window", movielens_by_arrival(movielens), MONTH))
    out += [Cell(f"hourly day, {n:,} users", hourly(n), 3600) for n in hourly_users]
    return out


# --- the production worker, windows in order ---------------------------------------------------------------


def topk_epsilon(epsilon_w: float, delta_prime: float, k: int = K) -> float:
    """The per-outcome ε whose k outcomes (ρ = kε²/8) the ledger converts to ε_w at δ′ (known-domain top-k's worst
    case, either discovery, is that ρ)."""
    from stream_dp.mechanisms.gaussian_histogram import rho_for_epsilon

    return math.sqrt(8 * rho_for_epsilon(epsilon_w, delta_prime) / k)


def released_overrides(method: str, epsilon_w: float, *, memory: int | None = None, share: float | None = None
                       ) -> tuple[str, dict[str, str]]:
    """(release type, config overrides) of a continual method at (ε_w, δ_w): the budget never refuses a window
    (the experiment compares windows at equal per-window guarantee, not periods)."""
    half = DELTA_W / 2
    env = {"STREAM_DP_BUDGET__EPSILON": "1e9", "STREAM_DP_BUDGET__DELTA": "0.5",
           "STREAM_DP_BUDGET__ALLOW_PARTIAL_PERIOD": "true", "STREAM_DP_CONTRIBUTION__MAX_KEYS_PER_USER": str(DK)}
    if method == "sdp_histogram_exact_released":
        env |= {"STREAM_DP_BUDGET__DELTA_PRIME": "1e-7", "STREAM_DP_RELEASES__HISTOGRAM__EPSILON": repr(epsilon_w),
                "STREAM_DP_RELEASES__HISTOGRAM__DELTA": repr(DELTA_W - 1e-7),
                "STREAM_DP_RELEASES__HISTOGRAM__CALIBRATION": '"exact"',
                "STREAM_DP_RELEASES__HISTOGRAM__DOMAIN_FROM_RELEASED": "true"}
        if memory is not None:
            env["STREAM_DP_RELEASES__HISTOGRAM__DOMAIN_MEMORY_WINDOWS"] = str(memory)
        return "histogram", env
    env |= {"STREAM_DP_BUDGET__DELTA_PRIME": repr(half), "STREAM_DP_RELEASES__TOPK__K": str(K),
            "STREAM_DP_RELEASES__TOPK__K_BAR": str(2 * K), "STREAM_DP_RELEASES__TOPK__DELTA": repr(half),
            "STREAM_DP_RELEASES__TOPK__EPSILON": repr(topk_epsilon(epsilon_w, half)),
            "STREAM_DP_RELEASES__TOPK__DOMAIN_FROM_RELEASED": "true"}
    if method == "sdp_topk_released_ldt":
        return "topk", env | {"STREAM_DP_RELEASES__TOPK__DISCOVERY": '"limited_domain"',
                              "STREAM_DP_RELEASES__TOPK__DISCOVERY_SHARE": "0.2",
                              "STREAM_DP_RELEASES__TOPK__DOMAIN_MEMORY_WINDOWS": "1000"}
    if method != "sdp_topk_released":
        raise ValueError(f"unknown continual method {method!r}")
    if share is not None:
        env["STREAM_DP_RELEASES__TOPK__DISCOVERY_SHARE"] = repr(share)
    if memory is not None:
        env["STREAM_DP_RELEASES__TOPK__DOMAIN_MEMORY_WINDOWS"] = str(memory)
    return "topk", env


def window_guarantee(cfg: Any, release_type: str) -> tuple[float, float]:
    """The (ε, δ) the ledger states for one worst-case release of ``release_type`` under ``cfg`` (checked ≤ (ε_w, δ_w))."""
    from stream_dp.accounting.budget import reported_epsilon
    from stream_dp.accounting.composition import compose
    from stream_dp.release.types import BUILDERS

    spent = compose(BUILDERS[release_type](cfg).measurement.privacy_map())
    dp = cfg.budget.delta_prime
    return reported_epsilon(spent, dp), spent.delta(dp)


def replay(cell: Cell, release_type: str, overrides: dict[str, str], redis_url: str, *, runs: int, seed: int,
           name: str, epsilon_w: float) -> np.ndarray:
    """``runs`` replays of ``cell`` through the production worker: recall@k per (run, window)."""
    import redis

    from eval.continual import ContinualSetup, _copy_prefix, _delete_prefix, ingest_stream, release_all

    setup = ContinualSetup(name, cell.size, 10 * 365 * 86400, overrides, release_type=release_type)
    first = int(cell.stream.ts.min() - cell.stream.ts.min() % cell.size)
    truth = window_histograms(cell.stream, DK, cell.size)
    starts = sorted(truth)
    labels = {str(label): i for i, label in enumerate(cell.stream.key_labels)}
    cfg = setup.config(redis_url, "probe", start=first)
    eps, delta = window_guarantee(cfg, release_type)  # the ledger adds its δ′ once per period on top of δ_w
    assert eps <= epsilon_w * (1 + 1e-6) and delta <= (DELTA_W + cfg.budget.delta_prime) * (1 + 1e-6), (name, eps, delta)
    client = redis.Redis.from_url(redis_url)
    base = f"cdbase{seed}"
    out = np.zeros((runs, len(starts)))
    try:
        _delete_prefix(client, base)
        ingest_stream(cell.stream, client, setup.config(redis_url, base, start=first))
        for r in range(runs):
            prefix = f"cdrun{seed}x{r}"
            _copy_prefix(client, base, prefix)
            records = {int(rec["window"]["start"]): rec for rec in
                       release_all(setup.config(redis_url, prefix, start=first), client, seed=seed + r)
                       if rec["type"] == release_type}
            _delete_prefix(client, prefix)
            for w, start in enumerate(starts):
                row = -np.ones((1, K), dtype=np.int64)
                ids = [labels[item["key"]] for item in records[start]["items"][:K]]
                row[0, :len(ids)] = ids
                out[r, w] = release_metrics(row, truth[start], K)["recall"][0]
        _delete_prefix(client, base)
    finally:
        client.close()
    return out


# --- single windows, the catalogue and the peers (each window alone: vectorised, the same laws) -------------------


def single_window(cell: Cell, epsilon_w: float, *, runs: int, seed: int, peers: bool = True
                  ) -> dict[str, np.ndarray]:
    """recall@k per (run, window) of every single-window, catalogue and peer method."""
    from eval import peers as p
    from eval.calibration import calibrate
    from eval.topk import cell_rng, run_ldt

    truth = window_histograms(cell.stream, DK, cell.size)
    cal = calibrate(epsilon_w, DELTA_W, K)
    methods: dict[str, Callable[[Histogram, np.random.Generator], Any]] = {
        "sdp_histogram_exact": lambda h, g: p.sdp_histogram(h, DK, epsilon_w, DELTA_W, runs, g, exact=True),
        "sdp_histogram": lambda h, g: p.sdp_histogram(h, DK, epsilon_w, DELTA_W, runs, g),
        "sdp_histogram_laplace": lambda h, g: p.sdp_histogram_laplace(h, DK, epsilon_w, DELTA_W, runs, g),
        "sdp_ldt": lambda h, g: p._ranked(run_ldt(h, k=K, k_bar=2 * K, epsilon=cal.ldt_epsilon, delta=cal.ldt_delta,
                                                  max_keys_per_user=DK, runs=runs, rng=g)[0], K),
        "sdp_histogram_exact_catalogue": lambda h, g: p.sdp_histogram(h, DK, epsilon_w, DELTA_W, runs, g,
                                                                      domain=True, exact=True),
    }
    if peers:
        methods |= {
            "opendp_laplace_threshold_true_delta": lambda h, g: p.run_opendp(
                p.opendp_laplace_true_delta_measurement(DK, epsilon_w, DELTA_W), h, runs,
                p.opendp_min_count("laplace_true_delta", DK, epsilon_w, DELTA_W)),
            "opendp_gaussian_threshold": lambda h, g: p.run_opendp(
                p.opendp_gaussian_measurement(DK, epsilon_w, DELTA_W), h, runs,
                p.opendp_min_count("gaussian", DK, epsilon_w, DELTA_W)),
            "pipelinedp_truncated_geometric": lambda h, g: p.run_pipelinedp_truncated_geometric(
                h, DK, epsilon_w, DELTA_W, runs, g),
            "pipelinedp_laplace_thresholding": lambda h, g: p.run_pipelinedp_thresholding(
                "laplace_thresholding", h, DK, epsilon_w, DELTA_W, runs),
            "pipelinedp_gaussian_thresholding": lambda h, g: p.run_pipelinedp_thresholding(
                "gaussian_thresholding", h, DK, epsilon_w, DELTA_W, runs),
            "pipelinedp_public_gaussian_catalogue": lambda h, g: p.run_pipelinedp_public(
                "gaussian", h, DK, epsilon_w, DELTA_W, runs, g),
        }
    out = {}
    for method, run in methods.items():
        per_window = []
        for start in sorted(truth):
            rel = run(truth[start], cell_rng(seed, "continual-domain", cell.name, epsilon_w, method, start))
            ties = cell_rng(seed, "continual-domain-ties", cell.name, epsilon_w, method, start)
            per_window.append(p._score(rel, truth[start], K, ties)["recall"])
        out[method] = np.stack(per_window, axis=1)
    return out


# --- the experiment -------------------------------------------------------------------------------------------


def summarise(cell: Cell, epsilon_w: float, method: str, recall: np.ndarray, *, setting: str = "") -> tuple[
        dict[str, Any], list[dict[str, Any]]]:
    """The summary row (mean over windows after the first, per run; interval over runs) and the per-window rows."""
    later = recall[:, 1:] if recall.shape[1] > 1 else recall
    est = Estimate.of(later.mean(axis=1))
    row = {"cell": cell.name, "epsilon_w": epsilon_w, "delta_w": DELTA_W, "delta_keys": DK, "k": K,
           "method": method, "setting": setting, "runs": recall.shape[0], "windows": recall.shape[1],
           "recall_mean": est.mean, "recall_ci95": est.half_width}
    windows = []
    for w in range(recall.shape[1]):
        e = Estimate.of(recall[:, w])
        windows.append({"cell": cell.name, "epsilon_w": epsilon_w, "method": method, "setting": setting,
                        "window_index": w, "recall_mean": e.mean, "recall_ci95": e.half_width})
    return row, windows


def run_continual_domain_experiment(the_cells: Sequence[Cell], redis_url: str, *, runs: int, single_runs: int,
                                    seed: int, peers: bool = True, epsilons: Sequence[float] = EPSILONS,
                                    tuning: Sequence[tuple[str, dict[str, Any]]] = ()
                                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Summary rows and per-window rows: every cell × ε_w × method (module docstring); ``tuning``: extra
    (method, {memory, share}) settings of the continual methods, rows labelled by their setting."""
    rows: list[dict[str, Any]] = []
    windows: list[dict[str, Any]] = []
    for i, cell in enumerate(the_cells):
        for eps in epsilons:
            results: list[tuple[str, str, np.ndarray]] = []
            for method in (*RELEASED, *BEFORE):
                rtype, env = released_overrides(method, eps)
                results.append((method, "", replay(cell, rtype, env, redis_url, runs=runs, seed=seed + 1000 * i,
                                                   name=method, epsilon_w=eps)))
            for method, setting in tuning:
                rtype, env = released_overrides(method, eps, **setting)
                label = ", ".join(f"{k} = {v}" for k, v in setting.items())
                results.append((method, label, replay(cell, rtype, env, redis_url, runs=runs,
                                                      seed=seed + 1000 * i, name=method, epsilon_w=eps)))
            for method, recall in single_window(cell, eps, runs=single_runs, seed=seed, peers=peers).items():
                results.append((method, "", recall))
            for method, setting, recall in results:
                row, per_window = summarise(cell, eps, method, recall, setting=setting)
                rows.append(row)
                windows += per_window
    return rows, windows


def verdicts(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell and ε_w: the released-domain histogram against the best single-window release (ratio) and every
    peer without the catalogue (ahead beyond both intervals?) -- the issue's targets."""
    out = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if not r["setting"]:
            groups.setdefault((r["cell"], r["epsilon_w"]), []).append(r)
    for (cell, eps), group in groups.items():
        by = {r["method"]: r for r in group}
        mine = by.get("sdp_histogram_exact_released")
        if mine is None:
            continue
        single = max((by[m] for m in SINGLE_WINDOW if m in by), key=lambda r: r["recall_mean"])
        peer_rows = [by[m] for m in PEERS if m in by]
        best_peer = max(peer_rows, key=lambda r: r["recall_mean"]) if peer_rows else None
        ahead = all(mine["recall_mean"] - r["recall_mean"] > mine["recall_ci95"] + r["recall_ci95"] for r in peer_rows)
        out.append({"cell": cell, "epsilon_w": eps, "released": mine["recall_mean"],
                    "released_ci95": mine["recall_ci95"], "best_single": single["method"],
                    "best_single_recall": single["recall_mean"], "best_single_ci95": single["recall_ci95"],
                    "wins": bool(mine["recall_mean"] - single["recall_mean"] > mine["recall_ci95"] + single["recall_ci95"]),
                    "ratio": mine["recall_mean"] / single["recall_mean"] if single["recall_mean"] > 0 else math.inf,
                    "best_peer": best_peer["method"] if best_peer else "",
                    "best_peer_recall": best_peer["recall_mean"] if best_peer else math.nan,
                    "ahead_of_every_peer": bool(ahead) if peer_rows else None,
                    "topk_released": by["sdp_topk_released"]["recall_mean"] if "sdp_topk_released" in by else math.nan,
                    "topk_released_before": by["sdp_topk_released_ldt"]["recall_mean"]
                    if "sdp_topk_released_ldt" in by else math.nan})
    return out


def load_cells(scale_name: str, movielens_dir: Any = None) -> list[Cell]:
    from eval.weighting import hourly_stream

    if scale_name == "tiny":  # synthetic only, the first 8 hours: the test suite runs this
        day = hourly_stream(300)
        keep = day.ts < day.ts.min() - day.ts.min() % 3600 + 8 * 3600
        return [Cell("hourly day, 300 users, 8 hours", Stream(day.name, day.user[keep], day.key[keep], day.ts[keep],
                                                             day.universe, day.key_labels), 3600)]
    ml = load_movielens(movielens_dir) if movielens_dir else load_movielens()
    return cells(ml, hourly_stream)


#: Settings of the continual methods also run, to choose the defaults (memory: ``domain_memory_windows``;
#: share: ``releases.topk.discovery_share``); the main rows run the config defaults.
TUNING: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sdp_histogram_exact_released", {"memory": 1}), ("sdp_histogram_exact_released", {"memory": 12}),
    ("sdp_topk_released", {"share": 0.2}), ("sdp_topk_released", {"share": 0.5}),
    ("sdp_topk_released", {"share": 0.9}))
RUNS = {"tiny": (2, 4), "full": (30, 200)}  # (production replays, single-window Monte-Carlo runs) per point


def run_and_write(out: Any, scale_name: str, redis_url: str | None, *, seed: int, movielens_dir: Any = None,
                  peers: bool = True) -> dict[str, Any]:
    """Run experiment 2b at ``scale_name`` (against ``redis_url``, or an embedded redis-server) and write
    ``continual_domain.csv``, ``continual_domain_windows.csv``, ``continual_domain_verdicts.csv`` and
    ``continual_domain_meta.json`` (runs, users per window) into ``out``."""
    import json
    from pathlib import Path

    from eval import analysis

    if redis_url is None:
        from stream_dp.dev.devstack import DevStack

        with DevStack(kafka=False, redis=True) as stack:
            return run_and_write(out, scale_name, stack.redis_url, seed=seed, movielens_dir=movielens_dir,
                                 peers=peers)
    runs, single_runs = RUNS[scale_name]
    the_cells = load_cells(scale_name, movielens_dir)
    rows, windows = run_continual_domain_experiment(
        the_cells, redis_url, runs=runs, single_runs=single_runs, seed=seed, peers=peers,
        epsilons=EPSILONS if scale_name == "full" else (1.0,), tuning=TUNING if scale_name == "full" else ())
    out = Path(out)
    analysis.write_csv(out / "continual_domain.csv", rows)
    analysis.write_csv(out / "continual_domain_windows.csv", windows)
    analysis.write_csv(out / "continual_domain_verdicts.csv", verdicts(rows))
    ml = (load_movielens(movielens_dir) if movielens_dir else load_movielens()) if scale_name == "full" else None
    meta = {"runs": runs, "single_runs": single_runs, "cells": [c.name for c in the_cells],
            "users_per_window": {c.name: _users_per_window(c) for c in the_cells},
            "movielens_real_30d_windows": real_time_windows(ml) if ml is not None else None}
    (out / "continual_domain_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return meta


def _users_per_window(cell: Cell) -> float:
    starts = cell.stream.ts - cell.stream.ts % cell.size
    pairs = np.unique(np.stack([starts, cell.stream.user]), axis=1)
    return float(np.mean(np.unique(pairs[0], return_counts=True)[1]))


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m eval.continual_domain", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/evaluation"))
    parser.add_argument("--scale", choices=sorted(RUNS), default="tiny")
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--movielens", type=Path, default=None)
    args = parser.parse_args(argv)
    meta = run_and_write(args.out, args.scale, args.redis_url, seed=args.seed, movielens_dir=args.movielens)
    print(json.dumps(meta, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
