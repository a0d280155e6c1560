"""Print the import graph between the project's top-level packages (``stream_dp.<package>``, ``workers``).

Read from the source's import statements (every import, lazy ones inside functions included), not by
importing anything. ``tests/unit/test_import_graph.py`` checks its rules (no loops, the library never imports
entry points, tests or benchmarks, production never imports the dev stack) on the same graph.

    python tools/import_graph.py            # one line per package: what it imports
    python tools/import_graph.py --dot      # Graphviz
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = {"stream_dp", "workers", "tests", "bench", "eval"}


#: Packages whose modules are separate units: ``stream_dp.dev`` groups independent tools (the demo runs the
#: production processes through :mod:`stream_dp.runtime`, which reads a running dev stack's address file).
SPLIT = {"stream_dp.dev"}


def unit(module: str) -> str:
    """The top-level package of ``module``: ``stream_dp.release.worker`` -> ``stream_dp.release``
    (``stream_dp.dev.demo`` -> itself: :data:`SPLIT`)."""
    parts = [p for p in module.split(".") if p != "__init__"]
    if parts[0] != "stream_dp" or len(parts) == 1:
        return parts[0]
    package = f"stream_dp.{parts[1]}"
    return f"{package}.{parts[2]}" if package in SPLIT and len(parts) > 2 else package


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Edges ``package -> packages it imports`` for the library and the entry points."""
    edges: dict[str, set[str]] = {}
    for path in sorted([*root.joinpath("stream_dp").rglob("*.py"), *root.joinpath("workers").rglob("*.py")]):
        src = unit(".".join(path.relative_to(root).with_suffix("").parts))
        edges.setdefault(src, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = ([node.module] if node.module not in {"stream_dp", *SPLIT}
                         else [f"{node.module}.{a.name}" for a in node.names])
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in OWN:
                    dst = unit(name)
                    if dst not in {src, "stream_dp"}:
                        edges[src].add(dst)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every edge a -> b from which a is reachable again (empty: the graph is a DAG)."""
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


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """Packages by depth: layer 0 imports none of the others; each later one only earlier layers."""
    depth: dict[str, int] = {}

    def level(n: str, path: frozenset[str] = frozenset()) -> int:
        if n not in depth:
            deps = [d for d in edges.get(n, ()) if d not in path]
            depth[n] = 1 + max((level(d, path | {n}) for d in deps), default=-1)
        return depth[n]

    for n in edges:
        level(n)
    out: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for n, d in sorted(depth.items()):
        out[d].append(n)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dot", action="store_true", help="print Graphviz instead of text")
    args = parser.parse_args(argv)
    edges = import_graph()
    if args.dot:
        print("digraph imports {")
        for src, targets in sorted(edges.items()):
            for dst in sorted(targets):
                print(f'  "{src}" -> "{dst}";')
        print("}")
        return 0
    width = max(map(len, edges))
    for i, layer in enumerate(layers(edges)):
        print(f"layer {i}")
        for src in layer:
            print(f"  {src:<{width}} -> {', '.join(sorted(edges[src])) or '(nothing of the project)'}")
    found = cycles(edges)
    print(f"{len(edges)} packages, {sum(map(len, edges.values()))} edges, "
          + ("no loops" if not found else f"LOOPS: {found}"))
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
