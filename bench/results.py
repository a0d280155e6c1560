"""Machine-readable benchmark results: every benchmark's last stdout line is one JSON object.

``emit({"bench": "release", "keys": 1000000, "p99_all_s": 0.21, ...})`` prints the object on one line
(sorted keys, floats rounded to 6 significant digits), so results can be collected and compared across
commits (``python -m bench.bench_release | tail -n 1``). The human tables stay above it and in
bench/README.md. :func:`run` runs a benchmark and returns that object. tests/unit/test_bench_results.py
checks every bench module ends with it (tests/integration/test_bench_runs.py: those that need the dev stack).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.6g}")
    return value


def emit(result: Mapping[str, Any]) -> str:
    """Print ``result`` as the last stdout line (one JSON object; it must name its ``bench``)."""
    if not isinstance(result.get("bench"), str):
        raise ValueError("a benchmark result must name its benchmark: {'bench': '<name>', ...}")
    line = json.dumps(_plain(result), sort_keys=True, allow_nan=False)
    sys.stdout.flush()
    print(line, flush=True)
    return line


def run(module: str, args: list[str], *, cwd: str | os.PathLike[str], timeout: float) -> dict[str, Any]:
    """Run benchmark ``module`` (``python -m``) with ``args`` and return its result: the JSON object of its
    last stdout line (what :func:`emit` printed). A failing run raises ``CalledProcessError``."""
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                         timeout=timeout, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def start_cpu_load(processes: int) -> list[subprocess.Popen]:
    """``processes`` busy-looping Python processes (a CPU burner for "under load" runs); stop them with
    :func:`stop_cpu_load`."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
            for _ in range(max(0, processes))]


def stop_cpu_load(burners: list[subprocess.Popen]) -> None:
    for p in burners:
        p.terminate()
    for p in burners:
        p.wait()


def cpu_count() -> int:
    return os.cpu_count() or 1
