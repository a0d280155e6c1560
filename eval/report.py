"""Regenerate the evaluation report: ``python -m eval.report --out docs/evaluation [--scale tiny|full]``.

Runs the experiments, writes their CSVs into ``--out``, then renders ``README.md`` and the PNG figures
*from those CSVs* (``--render-only`` re-renders without re-running). Every number quoted in the report
text is read from a CSV written by the same command.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eval import analysis
from eval.calibration import calibrate
from eval.data import Stream, load_movielens, zipf_stream
from eval.render import render_report
from eval.topk import Grid, run_topk_experiment


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
    seed_runs: int
    extra: dict[str, Any] = field(default_factory=dict)


SCALES = {
    # the test runs this: synthetic data only (no /work/shared), the whole grid, few runs
    "tiny": Scale("tiny", topk_runs=20, zipf_users=2000, zipf_universe=1000, zipf_exponent=1.1,
                  use_movielens=False, continual_runs=2, seed_runs=200),
    # the committed report: ~10 minutes on 2 cores
    "full": Scale("full", topk_runs=1000, zipf_users=20000, zipf_universe=10000, zipf_exponent=1.0,
                  use_movielens=True, continual_runs=20, seed_runs=2000),
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
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_all(out: Path, scale: Scale, *, seed: int, movielens_dir: Path | None = None) -> dict[str, Any]:
    """Run every experiment at ``scale``, write CSVs and ``meta.json`` into ``out``; return the meta."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    streams = datasets(scale, movielens_dir)
    grid = Grid(runs=scale.topk_runs)

    t = time.perf_counter()
    analysis.write_csv(out / "calibration.csv", calibration_rows(grid))
    rows = run_topk_experiment(streams, grid, seed=seed)
    analysis.write_csv(out / "topk.csv", rows)
    timings["topk"] = time.perf_counter() - t

    meta = {
        "command": f"python -m eval.report --out {out} --scale {scale.name}",
        "scale": asdict(scale), "seed": seed, "grid": asdict(grid),
        "datasets": [{"name": s.name, "events": len(s), "users": int(np.unique(s.user).size),
                      "universe": s.universe} for s in streams],
        "movielens_present": any(s.name == "movielens" for s in streams),
        "timings_seconds": {k: round(v, 1) for k, v in timings.items()},
        "total_seconds": round(time.perf_counter() - started, 1),
        "git_commit": git_commit(), "python": platform.python_version(), "numpy": np.__version__,
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
    parser.add_argument("--render-only", action="store_true", help="re-render README.md and figures from CSVs")
    args = parser.parse_args(argv)
    if not args.render_only:
        meta = run_all(args.out, SCALES[args.scale], seed=args.seed, movielens_dir=args.movielens)
        print(f"experiments done in {meta['total_seconds']} s", file=sys.stderr)
    path = render_report(args.out)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
