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
