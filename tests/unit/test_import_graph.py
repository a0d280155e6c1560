"""The layering between top-level packages, read from the source's import statements.

``workers/`` holds thin entry points over the library: the library never imports them (no loop between
``stream_dp.cli`` and ``workers``), and no production module imports the dev stack, test helpers or
benchmarks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _unit(module: str) -> str:
    parts = module.split(".")
    return f"stream_dp.{parts[1]}" if parts[0] == "stream_dp" and len(parts) > 1 else parts[0]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Edges ``unit -> units it imports`` for the project's own code (every import, lazy ones included)."""
    edges: dict[str, set[str]] = {}
    for path in sorted([*root.joinpath("stream_dp").rglob("*.py"), *root.joinpath("workers").rglob("*.py")]):
        src = _unit(".".join(path.relative_to(root).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] if node.module != "stream_dp" else [f"stream_dp.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in {"stream_dp", "workers", "tests", "bench", "eval"}:
                    dst = _unit(name)
                    if dst not in {src, "stream_dp"}:
                        edges.setdefault(src, set()).add(dst)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            n = todo.pop()
            if n == b:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(edges.get(n, ()))
        return False

    return sorted((a, b) for a, targets in edges.items() for b in targets if reaches(b, a))


def test_the_graph_sees_real_imports():
    edges = import_graph()
    assert "stream_dp.config" in edges["stream_dp.release"] and "stream_dp.runtime" in edges["workers"]


def test_no_loop_between_top_level_packages():
    assert _cycles(import_graph()) == []


def test_the_check_catches_a_loop():  # broken variant: cli importing workers again (as it once did)
    edges = import_graph()
    edges["stream_dp.cli"].add("workers")
    assert ("stream_dp.cli", "workers") in _cycles(edges)


def test_the_library_never_imports_entry_points_tests_or_benchmarks():
    for src, targets in import_graph().items():
        if src.startswith("stream_dp"):
            assert not targets & {"workers", "tests", "bench", "eval"}, (src, targets)


PRODUCTION = ("stream_dp.ingest", "stream_dp.release", "stream_dp.accounting", "stream_dp.mechanisms",
              "stream_dp.connections", "stream_dp.config", "stream_dp.dashboard", "stream_dp.client")


def test_production_never_imports_the_dev_stack():
    """The dev stack (Tansu, a local redis-server) is for development; ``stream_dp.processes`` holds the
    process helpers production shares with it. (``stream_dp.runtime`` reads a running dev stack's state
    file only when the config names no broker / Redis, lazily.)"""
    edges = import_graph()
    for unit in PRODUCTION:
        assert "stream_dp.devstack" not in edges.get(unit, set()), unit


def test_release_code_reads_no_environment_and_has_no_crash_switch():
    """Crash injection is a seam (``crashpoints``, a no-op in production), not a variable read inside the
    worker that could SIGKILL it."""
    from stream_dp.release.crashpoints import NO_CRASHES
    from stream_dp.release.outbox import Outbox

    for path in (ROOT / "stream_dp" / "release").glob("*.py"):
        text = path.read_text()
        assert "os.environ" not in text and "getenv" not in text and "SIGKILL" not in text, path.name
    assert Outbox(None, None, None).crashpoints is NO_CRASHES  # type: ignore[arg-type]
    assert NO_CRASHES.reached("after_commit") is None
