"""A regular (non-editable) install finds the default config (and the release schema) and the Lua scripts: wheel
package data; the wheel is marked typed (py.typed) and holds the library and the entry points only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NETWORK_TROUBLE = ("NewConnectionError", "Could not find a version", "No matching distribution", "Temporary failure")


@pytest.mark.slow
def test_wheel_carries_the_default_config_and_an_install_loads_it(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "tests"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(src)], capture_output=True, text=True, timeout=300)
    if build.returncode != 0 and any(s in build.stdout + build.stderr for s in NETWORK_TROUBLE):
        pytest.skip("pip could not fetch the build backend (offline)")
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert "stream_dp/py.typed" in zf.namelist()  # PEP 561: type checkers read the package's annotations
        # the library and the entry points (no tests): the dev tooling inside the library, the test helpers and
        # audits (scipy) outside (tests/unit/test_wheel.py checks the imports)
        assert {n.split("/")[0] for n in zf.namelist() if ".dist-info/" not in n} == {"stream_dp", "workers"}
        assert {"workers/ingest.py", "workers/release.py",
                "stream_dp/dev/devstack.py", "stream_dp/errors.py"} <= set(zf.namelist())
        assert not [n for n in zf.namelist() if n.split("/")[:2] == ["stream_dp", "testing"] or "devcluster" in n]
        packaged = zf.read("stream_dp/defaults/stream-dp.toml")
        schema = zf.read("stream_dp/defaults/release.schema.json")
        # the dashboard's page is served from the package (no CDN): it must be in the wheel
        for name in ("index.html", "dashboard.js", "dashboard.css"):
            assert zf.read(f"stream_dp/dashboard/static/{name}") == (ROOT / "stream_dp" / "dashboard" / "static" / name).read_bytes()
        # every Lua script the loader reads (stream_dp/store/scripts.py) is package data
        for lua in sorted((ROOT / "stream_dp" / "store" / "lua").glob("*.lua")):
            assert zf.read(f"stream_dp/store/lua/{lua.name}") == lua.read_bytes(), lua.name
    assert packaged == (ROOT / "config" / "stream-dp.toml").read_bytes()
    assert schema == (ROOT / "config" / "release.schema.json").read_bytes()

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = ("import stream_dp.config as c; assert c.DEFAULT_CONFIG_PATH.is_file(), c.DEFAULT_CONFIG_PATH; "
             "assert str(c.DEFAULT_CONFIG_PATH).startswith(%r); "
             "from stream_dp.store import scripts; assert all(scripts.script_text(n) for n in scripts.SCRIPTS); "
             "print(c.load_config().releases.topk.k)" % str(site))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env["PYTHONPATH"] = str(site)
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "10"
