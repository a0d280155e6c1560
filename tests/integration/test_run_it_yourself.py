"""The README's "Run it yourself" walkthrough, executed as written: real processes, real broker and Redis.

The block runs in one bash shell (``set -eu``, each command echoed), in a scratch directory standing for the
clone, with the dev-stack state file, ``$TMPDIR`` and the two metrics ports made private to the test (free
ports instead of 9108 / 9109); nothing else is changed. Its output is the walkthrough's output (printed with
``-s``). It must leave nothing in the clone: the workers' logs go to a temporary directory.
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


def test_readme_walkthrough_devstack_ingest_release_replay_tail_budget(tmp_path, broker_kind):
    """On each broker: ``BROKER`` chooses the dev stack's (the README's own way to choose)."""
    script = walkthrough()
    for step in ("stream-dp devstack up --broker ${BROKER:-tansu}", "stream-dp topics create", "stream-dp ingest",
                 "stream-dp release", "stream-dp replay", "stream-dp tail", "stream-dp budget",
                 "stream-dp devstack down"):
        assert step in script, step
    ingest_port, release_port = free_port(), free_port()
    assert "STREAM_DP_METRICS__PORT=9109" in script
    script = script.replace("STREAM_DP_METRICS__PORT=9109", f"STREAM_DP_METRICS__PORT={release_port}")
    clone, scratch = tmp_path / "clone", tmp_path / "tmp"
    clone.mkdir()
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "STREAM_DP_DEVSTACK_STATE": str(tmp_path / "devstack.json"), "TMPDIR": str(scratch),
                "STREAM_DP_METRICS__PORT": str(ingest_port), "PYTHONPATH": str(ROOT), "BROKER": broker_kind})
    if os.environ.get("STREAM_DP_KAFKA_LIBS"):  # where .ci/run cached Apache Kafka (a tool variable)
        env["STREAM_DP_KAFKA_LIBS"] = os.environ["STREAM_DP_KAFKA_LIBS"]
    proc = subprocess.Popen(["bash", "-euc", "set -o pipefail; set -x\n" + script], cwd=clone, env=env,
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
            subprocess.run([sys.executable, "-m", "stream_dp.cli", "devstack", "down"], env=env, cwd=clone,
                           capture_output=True, timeout=60)
    logs = {p.name: p.read_text() for p in scratch.glob("*/*.log")}
    ingest_log, release_log = logs.get("ingest.log", ""), logs.get("release.log", "")
    print("\n--- walkthrough output ---\n" + out)
    assert proc.returncode == 0, out[-5000:] + "\n--- ingest.log ---\n" + ingest_log[-3000:] + \
        "\n--- release.log ---\n" + release_log[-3000:]
    assert "using the running dev stack" in ingest_log and "using the running dev stack" in release_log
    assert "Traceback" not in ingest_log + release_log
    assert "ingest stopped (stop requested)" in ingest_log
    assert out.count("· released ·") + out.count("· budget_exhausted ·") == 3, "three releases tailed"
    assert out.count("· histogram ·") == 3, "the default release type, once per closed day"
    assert out.count("keys with a noisy count") == 3 and "cost ε 1.00" in out
    assert re.search(r": OK", out), "budget verify reports OK"
    assert re.search(r"3 records checked against the ledger, 3 charges checked against the topic .*; 0 problems", out)
    assert '"running": false' in out.split("stream-dp devstack down")[-1]
    assert "blocking the event loop" not in out + ingest_log + release_log
    assert not list(clone.iterdir()), f"the walkthrough left files in the clone: {sorted(clone.iterdir())}"
