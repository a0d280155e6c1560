"""The layering between top-level packages, read from the source's import statements (tools/import_graph.py).

``workers/`` holds thin entry points over the library: the library never imports them (no loop between
``stream_dp.cli`` and ``workers``), and no production module imports the dev stack, test helpers or
benchmarks."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_tool():
    """tools/import_graph.py (the script that prints the graph) is the one implementation of the graph."""
    spec = importlib.util.spec_from_file_location("import_graph_tool", ROOT / "tools" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_TOOL = _load_tool()
import_graph = _TOOL.import_graph
_cycles = _TOOL.cycles


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
              "stream_dp.connections", "stream_dp.config", "stream_dp.dashboard", "stream_dp.client", "stream_dp.store")


def test_the_redis_contract_is_shared_through_the_store_only():
    """Ingest writes what the release worker and the ledger read; all three take the contract (keys, the
    bounding log's encoding, window states, scripts) from ``stream_dp.store``, which imports none of them (only
    the exception root, which imports nothing), and the release side never reaches into ingest's internals for it."""
    edges = import_graph()
    assert edges["stream_dp.store"] <= {"stream_dp.errors"}
    assert edges["stream_dp.errors"] == set()
    assert "stream_dp.ingest" not in edges["stream_dp.release"]
    for side in ("stream_dp.ingest", "stream_dp.release", "stream_dp.accounting"):
        assert "stream_dp.store" in edges[side], side


def test_production_never_imports_the_dev_stack():
    """The dev tooling (``stream_dp.dev``: Tansu or Apache Kafka, a local redis-server, the demo) is for
    development; ``stream_dp.processes`` holds the process helpers production shares with it.
    (``stream_dp.runtime`` reads a running dev stack's state file only when the config names no broker / Redis,
    lazily.)"""
    edges = import_graph()
    for unit in PRODUCTION:
        assert not {dst for dst in edges.get(unit, set()) if dst.startswith("stream_dp.dev.")}, unit


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


def test_the_script_prints_every_package_and_no_loop(capsys):
    assert _TOOL.main([]) == 0
    out = capsys.readouterr().out
    assert "no loops" in out and "stream_dp.mechanisms" in out and "workers" in out
