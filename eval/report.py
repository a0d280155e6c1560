"""Regenerate the evaluation report: ``python -m eval.report --out docs/evaluation [--scale tiny|full]``.

Runs the experiments, writes their CSVs into ``--out``, then renders ``README.md`` and the PNG figures
*from those CSVs* (``--render-only`` re-renders without re-running). Every number quoted in the report
text is read from a CSV written by the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval import analysis, seeds
from eval.calibration import calibrate
from eval.data import Stream, bounded_histogram, load_movielens, zipf_stream
from eval.render import render_report
from eval.partial_domain import partial_domain_verdicts, run_partial_domain_experiment
from eval.peers import PeerGrid, cell_verdicts, peers_available, run_peer_experiment
from eval.topk import Grid, run_topk_experiment
from eval.weighting import HOURLY_USERS, run_weighting_experiment


@dataclass(frozen=True)
class Scale:
    """How big a run is: data sizes and Monte-Carlo runs per point."""

    name: str
    topk_runs: int
    zipf_users: int
    zipf_universe: int
    zipf_exponent: float
    use_movielens: bool
    continual_runs: int
    continual_users: int  # synthetic continual stream: users over one year
    seed_runs: int  # Monte-Carlo runs per k of the seed-003 experiments
    svt_runs: int  # runs per k of the (slower, query-at-a-time) sparse-vector experiments
    seed_ks: tuple[int, ...] = (2, 4, 8, 12, 16, 24)
    # Monte-Carlo runs per point of experiment 4 (the peer libraries are called per run); the full scale's 1000
    # keep a strict-win verdict from turning on the peers' unseeded noise (200 moved the count by ±4 per rerun)
    peer_runs: int = 200
    weighting_runs: int = 50  # Monte-Carlo runs per window of experiment 5
    weighting_hourly_users: tuple[int, ...] = HOURLY_USERS  # sizes of experiment 5's hourly day


SCALES = {
    # the test runs this: synthetic data only (no /work/shared), the whole grid, few runs
    "tiny": Scale("tiny", topk_runs=20, zipf_users=2000, zipf_universe=1000, zipf_exponent=1.1,
                  use_movielens=False, continual_runs=2, continual_users=1500, seed_runs=30, svt_runs=10,
                  seed_ks=(2, 8), peer_runs=10, weighting_runs=5, weighting_hourly_users=(300,)),
    # the report of 8fa33d2: ~48 minutes on 2 cores (40 of them the peer libraries, called per run). Since stream-dp's
    # rows call the production functions (stream_dp.api) and OpenDP's Gaussian threshold has its true-delta row, a
    # Zipf cell of experiment 4 costs ~450 CPU-seconds at 1000 runs (OpenDP's four rows ~340, stream-dp's ~64,
    # PipelineDP's ~45): ~1.5-2 hours on 2 idle cores for the grid; --cell-cache makes an interrupted run resumable
    "full": Scale("full", topk_runs=1000, zipf_users=20000, zipf_universe=10000, zipf_exponent=1.0,
                  use_movielens=True, continual_runs=20, continual_users=20000, seed_runs=1000, svt_runs=200,
                  peer_runs=1000),
}


def datasets(scale: Scale, movielens_dir: Path | None) -> list[Stream]:
    """MovieLens when wanted and present, and always the synthetic Zipf stream."""
    out = []
    if scale.use_movielens:
        ml = load_movielens(movielens_dir) if movielens_dir else load_movielens()
        if ml is not None:
            out.append(ml)
    out.append(zipf_stream(n_users=scale.zipf_users, universe=scale.zipf_universe, exponent=scale.zipf_exponent,
                           seed=1))
    return out


def calibration_rows(grid: Grid) -> list[dict[str, Any]]:
    """The calibrated noise parameters of every method at every (ε_w, k), for the report's rule table."""
    rows = []
    for eps in grid.epsilons:
        for k in grid.ks:
            c = calibrate(eps, grid.delta_w, k)
            rows.append({"epsilon_w": eps, "delta_w": grid.delta_w, "k": k,
                         "ldt_epsilon_per_outcome": c.ldt_epsilon, "ldt_delta_bottom": c.ldt_delta,
                         "em_epsilon_per_peel": c.em_epsilon, "laplace_epsilon": c.lap_epsilon,
                         "laplace_delta": c.lap_delta, "split_select_epsilon": c.split_select_epsilon,
                         "split_select_delta": c.split_select_delta, "split_em_epsilon_per_peel": c.split_em_epsilon,
                         "basic_per_outcome": eps / k})
    return rows


def git_commit() -> str:
    """The commit the experiments run on, with "-dirty" when tracked files differ from it (read before any
    output is written: the report's own files must not make it dirty)."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def command_line(out: Path, scale_name: str, cwd: Path | None = None) -> str:
    """The command that wrote ``out``, with ``out`` relative to the working directory when inside it (a run in
    a worktree records ``docs/evaluation``, not the worktree's absolute path).

    >>> command_line(Path("/tmp/w/docs/evaluation"), "full", cwd=Path("/tmp/w"))
    'python -m eval.report --out docs/evaluation --scale full'
    >>> command_line(Path("/elsewhere/out"), "tiny", cwd=Path("/tmp/w"))
    'python -m eval.report --out /elsewhere/out --scale tiny'
    """
    base = (cwd or Path.cwd()).resolve()
    shown = out.resolve()
    if shown.is_relative_to(base):
        shown = shown.relative_to(base)
    return f"python -m eval.report --out {shown} --scale {scale_name}"


CONTINUAL_PERIOD = 365 * 86400  # budget period of the continual setups (aligned to the epoch, as the ledger does)


def continual_setups(scale: Scale) -> list[tuple[Any, str]]:
    """(setup, which stream) pairs of experiment 2: the default config except window, period and the
    synthetic setup's top-k window budget (ε_w = 2: ≈ 0.24 per outcome at k = 10)."""
    from eval import continual

    return [
        (continual.ContinualSetup("movielens-30d-windows", 30 * 86400, CONTINUAL_PERIOD), "movielens"),
        (continual.ContinualSetup("synthetic-weekly-windows", 7 * 86400, CONTINUAL_PERIOD,
                                  {"STREAM_DP_RELEASES__TOPK__WINDOW_EPSILON": "2.0"}), "synthetic"),
        # the histogram release on the same streams, with its defaults (window budget ε = 1, δ = 2e-7)
        (continual.ContinualSetup("movielens-30d-windows-histogram", 30 * 86400, CONTINUAL_PERIOD,
                                  release_type="histogram"), "movielens"),
        (continual.ContinualSetup("synthetic-weekly-windows-histogram", 7 * 86400, CONTINUAL_PERIOD,
                                  release_type="histogram"), "synthetic"),
        # one day of hourly windows, ~10^4 users per hour, the default one-day budget period and cap
        (continual.ContinualSetup("hourly-day-topk", 3600, 86400), "hourly"),
        (continual.ContinualSetup("hourly-day-histogram", 3600, 86400, release_type="histogram"), "hourly"),
        # the same with per-user weights (docs/privacy.md §8d): the release worker reads the bounding logs
        (continual.ContinualSetup("hourly-day-histogram-weighted", 3600, 86400,
                                  {"STREAM_DP_RELEASES__HISTOGRAM__WEIGHTING": "per_user"}, release_type="histogram"),
         "hourly"),
    ]


HOURLY_DAY_START = 20_000 * 86400  # 2024-10-04 00:00 UTC: the day is one default budget period


def hourly_day_stream(scale: Scale) -> Stream:
    """24 hourly windows: users who each draw 48 keys at uniform times over one day (≈ 10⁴ users per hour
    at full scale: a user with 48 events is active in ~21 of the 24 hours)."""
    users = 11_500 if scale.name == "full" else 300
    return zipf_stream(n_users=users, universe=scale.zipf_universe, exponent=scale.zipf_exponent,
                       events_per_user=48, seed=3, start=HOURLY_DAY_START, span_seconds=86400)


def continual_stream(scale: Scale) -> Stream:
    """One year of a synthetic Zipf stream starting at a budget-period boundary."""
    start = 54 * CONTINUAL_PERIOD  # 2023-12-19, a multiple of the period: the year is one budget scope
    events = 30 if scale.name == "full" else 10
    return zipf_stream(n_users=scale.continual_users, universe=scale.zipf_universe, exponent=scale.zipf_exponent,
                       events_per_user=events, seed=2, start=start, span_seconds=CONTINUAL_PERIOD - 1)


def continual_available() -> bool:
    """Experiment 2 needs the ingest and release packages (the production code path it replays through)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("stream_dp.ingest", "stream_dp.release"))


def run_continual_setups(scale: Scale, movielens: Stream | None, redis_url: str | None, *, seed: int
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Experiment 2 against ``redis_url``, or against an embedded redis-server started (and stopped) here."""
    if redis_url is None:
        from stream_dp.dev.devstack import DevStack

        with DevStack(kafka=False, redis=True) as stack:
            return run_continual_setups(scale, movielens, stack.redis_url, seed=seed)
    from eval import continual

    window_rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    streams = {"movielens": lambda: movielens, "synthetic": lambda: continual_stream(scale),
               "hourly": lambda: hourly_day_stream(scale)}
    for setup, which in continual_setups(scale):
        stream = streams[which]()
        if stream is None:
            continue
        # the histogram's exact sampler runs in Python on every key of every window: fewer replays
        runs = scale.continual_runs if setup.release_type == "topk" else max(2, scale.continual_runs // 4)
        rows, summary = continual.run_continual(stream, setup, redis_url, runs=runs, seed=seed)
        summary["dataset"] = stream.name
        window_rows += rows
        summaries.append(summary)
    return window_rows, summaries


def run_seed_experiments(scale: Scale, movielens: Stream | None, *, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Experiment 3: seed 002 key-reporting gain, seed 003 BLUE / measures and adaptivity."""
    from bench.bench_pws import zipf_frequencies
    from bench.bench_svt import synthetic_counts

    frequencies = {"zipf_n1e4_a1": zipf_frequencies(10_000, 1.0), "zipf_n1e4_a2": zipf_frequencies(10_000, 2.0)}
    # on the scale of the seed-003 datasets: 2000 items, Poisson around 300000/rank (bench/bench_svt.py)
    histograms = {"synthetic_paper_scale": synthetic_counts()}
    if movielens is not None:
        ml_counts = bounded_histogram(movielens, None).counts
        frequencies["movielens_movies"] = ml_counts
        histograms["movielens_movies"] = ml_counts
    out: dict[str, list[dict[str, Any]]] = {"seed002_pws_gain": seeds.pws_gain_rows(frequencies)}
    blue: list[dict[str, Any]] = []
    for name, counts in histograms.items():
        blue += seeds.blue_topk_rows(counts, ks=scale.seed_ks, epsilon=0.7, runs=scale.seed_runs, seed=seed,
                                     dataset=name)
        blue += seeds.blue_svt_rows(counts, ks=scale.seed_ks, epsilon=0.7, runs=scale.svt_runs, seed=seed,
                                    dataset=name)
    out["seed003_blue"] = blue
    adaptivity = seeds.adaptivity_rows(histograms, ks=list(scale.seed_ks), epsilon=0.7, runs=scale.svt_runs,
                                       seed=seed)
    if adaptivity is not None:
        out["seed003_adaptivity"] = adaptivity
    return out


def run_all(out: Path, scale: Scale, *, seed: int, movielens_dir: Path | None = None,
            redis_url: str | None = None, workers: int = 1, cell_cache: Path | None = None) -> dict[str, Any]:
    """Run every experiment at ``scale``, write CSVs and ``meta.json`` into ``out``; return the meta. The peer
    experiments' cells run in ``workers`` processes (the rows do not depend on it); ``cell_cache`` keeps their
    finished cells, so a rerun of an interrupted run resumes (:func:`eval.peers.map_cells`)."""
    commit = git_commit()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    streams = datasets(scale, movielens_dir)
    grid = Grid(runs=scale.topk_runs)

    # the peer experiments first: the longest (the peer libraries run per Monte-Carlo run) and resumable
    # (``cell_cache``); the experiments are seeded each on its own, so their order changes no row
    t = time.perf_counter()
    peer_rows = run_peer_experiment(streams, PeerGrid(runs=scale.peer_runs), seed=seed, peers=peers_available(),
                                    workers=workers, cache=cell_cache)
    analysis.write_csv(out / "peers.csv", peer_rows)
    analysis.write_csv(out / "peers_verdicts.csv", cell_verdicts(peer_rows))
    timings["peers"] = time.perf_counter() - t

    t = time.perf_counter()
    partial_rows = run_partial_domain_experiment(streams, PeerGrid(runs=scale.peer_runs), seed=seed,
                                                 peers=peers_available(), workers=workers, cache=cell_cache)
    analysis.write_csv(out / "peers_partial_domain.csv", partial_rows)
    analysis.write_csv(out / "peers_partial_domain_verdicts.csv", partial_domain_verdicts(partial_rows, peer_rows))
    timings["peers_partial_domain"] = time.perf_counter() - t

    t = time.perf_counter()
    analysis.write_csv(out / "calibration.csv", calibration_rows(grid))
    rows = run_topk_experiment(streams, grid, seed=seed)
    analysis.write_csv(out / "topk.csv", rows)
    timings["topk"] = time.perf_counter() - t

    t = time.perf_counter()
    movielens = next((s for s in streams if s.name == "movielens"), None)
    for stale in ("continual_windows.csv", "continual_summary.csv"):
        (out / stale).unlink(missing_ok=True)
    if continual_available():
        window_rows, summaries = run_continual_setups(scale, movielens, redis_url, seed=seed)
        analysis.write_csv(out / "continual_windows.csv", window_rows)
        analysis.write_csv(out / "continual_summary.csv", summaries)
    timings["continual"] = time.perf_counter() - t

    t = time.perf_counter()
    continual_domain_meta = None
    if continual_available():
        from eval import continual_domain

        continual_domain_meta = continual_domain.run_and_write(out, scale.name, redis_url, seed=seed,
                                                               movielens_dir=movielens_dir, peers=peers_available())
    timings["continual_domain"] = time.perf_counter() - t

    t = time.perf_counter()
    analysis.write_csv(out / "weighting.csv", run_weighting_experiment(
        runs=scale.weighting_runs, seed=seed, movielens=movielens, hourly_users=scale.weighting_hourly_users))
    timings["weighting"] = time.perf_counter() - t

    t = time.perf_counter()
    for name, seed_rows in run_seed_experiments(scale, movielens, seed=seed).items():
        analysis.write_csv(out / f"{name}.csv", seed_rows)
    timings["seeds"] = time.perf_counter() - t

    meta = {
        "command": command_line(out, scale.name),
        "scale": asdict(scale), "seed": seed, "grid": asdict(grid), "workers": workers,
        "datasets": [{"name": s.name, "events": len(s), "users": int(np.unique(s.user).size),
                      "universe": s.universe} for s in streams],
        "movielens_present": any(s.name == "movielens" for s in streams),
        "continual_domain": continual_domain_meta,
        "timings_seconds": {k: round(v, 1) for k, v in timings.items()},
        "total_seconds": round(time.perf_counter() - started, 1),
        "git_commit": commit, "python": platform.python_version(), "numpy": np.__version__,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.report", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/evaluation"), help="output directory")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full")
    parser.add_argument("--seed", type=int, default=20261129, help="base seed of every Monte-Carlo run")
    parser.add_argument("--movielens", type=Path, default=None,
                        help="directory with ratings.csv (default $STREAM_DP_MOVIELENS or /work/shared/...)")
    parser.add_argument("--redis-url", default=None,
                        help="redis-server for the continual-release replay (default: start an embedded one)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes for the peer experiments' cells (default: one per CPU)")
    parser.add_argument("--cell-cache", type=Path, default=None,
                        help="directory keeping each finished cell of the peer experiments; a rerun with the same "
                             "arguments reuses them (resume an interrupted run; clear it after a code change)")
    parser.add_argument("--render-only", action="store_true", help="re-render README.md and figures from CSVs")
    args = parser.parse_args(argv)
    if not args.render_only:
        meta = run_all(args.out, SCALES[args.scale], seed=args.seed, movielens_dir=args.movielens,
                       redis_url=args.redis_url, workers=args.workers, cell_cache=args.cell_cache)
        print(f"experiments done in {meta['total_seconds']} s", file=sys.stderr)
    path = render_report(args.out)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
