"""The README's "Run it yourself" walkthrough, executed as written: real processes, real broker and Redis.

The block runs in one bash shell (``set -eu``, each command echoed), in a scratch directory, with the
dev-stack state file and the two metrics ports made private to the test (free ports instead of 9108 /
9109); nothing else is changed. Its output is the walkthrough's output (printed with ``-s``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stream_dp.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def walkthrough() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("\n## Run it yourself\n")
    section = readme[start:readme.index("\n## ", start + 1)]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_readme_walkthrough_devstack_ingest_release_replay_tail_budget(tmp_path):
    script = walkthrough()
    for step in ("stream-dp devstack up", "stream-dp ingest", "stream-dp release", "stream-dp replay",
                 "stream-dp tail", "stream-dp budget", "stream-dp devstack down"):
        assert step in script, step
    ingest_port, release_port = free_port(), free_port()
    assert "STREAM_DP_METRICS__PORT=9109" in script
    script = script.replace("STREAM_DP_METRICS__PORT=9109", f"STREAM_DP_METRICS__PORT={release_port}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "STREAM_DP_DEVSTACK_STATE": str(tmp_path / "devstack.json"),
                "STREAM_DP_METRICS__PORT": str(ingest_port), "PYTHONPATH": str(ROOT)})
    proc = subprocess.Popen(["bash", "-euc", "set -o pipefail; set -x\n" + script], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("the walkthrough did not finish in 400 s:\n" + out[-5000:]) from None
    finally:
        state = tmp_path / "devstack.json"
        if state.exists():  # a failed step must not leave the stack running
            subprocess.run([sys.executable, "-m", "stream_dp.cli", "devstack", "down"], env=env, cwd=tmp_path,
                           capture_output=True, timeout=60)
    ingest_log = (tmp_path / "ingest.log").read_text() if (tmp_path / "ingest.log").exists() else ""
    release_log = (tmp_path / "release.log").read_text() if (tmp_path / "release.log").exists() else ""
    print("\n--- walkthrough output ---\n" + out)
    assert proc.returncode == 0, out[-5000:] + "\n--- ingest.log ---\n" + ingest_log[-3000:] + \
        "\n--- release.log ---\n" + release_log[-3000:]
    assert "using the running dev stack" in ingest_log and "using the running dev stack" in release_log
    assert "Traceback" not in ingest_log + release_log
    assert "ingest stopped (stop requested)" in ingest_log
    assert out.count("· released ·") + out.count("· budget_exhausted ·") == 9, "nine releases tailed"
    for rtype in ("topk", "alerts", "sample"):
        assert out.count(f"· {rtype} ·") == 3, rtype
    assert re.search(r": OK", out), "budget verify reports OK"
    assert '"running": false' in out.split("stream-dp devstack down")[-1]
    assert "blocking the event loop" not in out + ingest_log + release_log
