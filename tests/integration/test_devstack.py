"""The dev stack starts real services, stops them, and leaves no orphans even when its owner dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import redis

from stream_dp.devstack import DevStack

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); look at its state
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_context_manager_starts_ready_services_and_stops_them(tmp_path):
    with DevStack(workdir=tmp_path) as stack:
        pids = [p for p in stack.describe()["pids"].values() if p]
        assert len(pids) == 2
        assert redis.Redis.from_url(stack.redis_url).ping()
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
        assert isinstance(admin.list_topics(), list)
        admin.close()
        assert (tmp_path / "broker.log").exists() and (tmp_path / "redis.log").exists()
        assert set(stack.ready_seconds) == {"broker", "redis"}
    assert _wait_dead(pids) == []


def test_services_die_with_an_owner_killed_by_sigkill(tmp_path):
    code = (
        "import json, sys, time\n"
        "from stream_dp.devstack import DevStack\n"
        "s = DevStack().start()\n"
        "print(json.dumps(s.describe()['pids']), flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        pids = list(json.loads(owner.stdout.readline()).values())
        assert all(_alive(p) for p in pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        assert _wait_dead(pids) == [], "broker/redis outlived their owner"
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.stdout.close()


def test_restart_keeps_port_and_redis_data_with_persistence(tmp_path):
    with DevStack(kafka=False, workdir=tmp_path, redis_persistence=True) as stack:
        client = redis.Redis.from_url(stack.redis_url)
        client.set("survives", "yes")
        client.close()
        stack.redis.kill()
        stack.redis.start()
        client = redis.Redis.from_url(stack.redis_url)
        assert client.get("survives") == b"yes"
        client.close()


def test_cli_up_status_down(tmp_path):
    env = {**os.environ, "STREAM_DP_DEVSTACK_STATE": str(tmp_path / "state.json")}
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    run = lambda *a: subprocess.run([sys.executable, "-m", "stream_dp.cli", "devstack", *a],  # noqa: E731
                                    env=env, cwd=root, capture_output=True, text=True, timeout=60)
    up = run("up")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    pids = list(info["pids"].values())
    try:
        status = run("status")
        assert status.returncode == 0 and json.loads(status.stdout)["running"] is True
        assert redis.Redis.from_url(info["redis_url"]).ping()
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    assert _wait_dead(pids) == []
    assert run("status").returncode == 1
