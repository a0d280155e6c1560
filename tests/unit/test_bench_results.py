"""Every benchmark ends with one machine-readable line: a JSON object naming the benchmark (bench/results.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bench.results import emit, run

ROOT = Path(__file__).resolve().parents[2]
#: Modules of bench/ that benchmarks import, not benchmarks themselves.
HELPERS = ("__init__.py", "results.py", "release_windows.py")
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name not in HELPERS)


def _calls_emit_with_its_name(path: Path) -> bool:
    """The module calls ``emit(...)`` and builds a dict with a literal ``"bench"`` entry (syntax tree)."""
    tree = ast.parse(path.read_text())
    calls = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "emit" and n.args for n in ast.walk(tree))
    named = any(isinstance(n, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "bench" for k in n.keys)
                for n in ast.walk(tree))
    return calls and named


def test_there_are_benchmarks() -> None:
    assert len(BENCHES) >= 5


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.stem)
def test_every_benchmark_emits_a_json_result(path: Path) -> None:
    assert _calls_emit_with_its_name(path), f"{path.name} must end with bench.results.emit({{'bench': ...}})"


def test_emit_prints_one_json_line_and_requires_a_name(capsys) -> None:
    import numpy as np

    emit({"bench": "x", "p99_s": np.float64(0.123456789), "n": np.int64(3), "nested": {"r": [1.0, float("nan")]}})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(line) == {"bench": "x", "p99_s": 0.123457, "n": 3, "nested": {"r": [1.0, None]}}
    with pytest.raises(ValueError, match="must name its benchmark"):
        emit({"p99_s": 1.0})


@pytest.mark.parametrize("module,args", [
    ("bench.bench_pws", ["--n", "300", "--reps", "1"]),
    ("bench.bench_limited_domain", ["--keys", "5000", "--k-bar", "50", "--k", "5", "--reps", "3",
                                    "--baseline-reps", "2"]),
    ("bench.bench_svt", ["--dataset", "synthetic", "--runs", "3", "--ks", "2:4:2"]),
    ("bench.bench_samplers", ["--sizes", "300", "--reps", "1"]),
])
def test_small_benchmarks_end_with_their_json_line_when_run(module, args) -> None:
    """The benchmarks of pure mechanisms, at tiny scale (those needing the dev stack:
    tests/integration/test_bench_runs.py)."""
    result = run(module, args, cwd=ROOT, timeout=240)
    assert result["bench"] == module.split("bench_")[1]
