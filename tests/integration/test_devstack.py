"""The dev stack starts real services, stops them, and leaves no orphans even when its owner dies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from pathlib import Path

import pytest
import redis

from stream_dp.dev.devstack import DevStack, PortTaken, Service, find_redis_server, free_port
from waiting import wait_for

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
    """The pids still alive after waiting up to ``timeout`` for all to exit (empty: all exited)."""
    try:
        wait_for(lambda: not any(_alive(p) for p in pids), timeout=timeout, what="the processes to exit")
    except AssertionError:
        pass
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
        "from stream_dp.dev.devstack import DevStack\n"
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


def test_a_restart_returns_only_once_redis_has_loaded_its_aof(tmp_path):
    """``LOADING`` after a restart with persistence: the restart returns when Redis serves, so the first command
    after it does not meet BusyLoadingError (what CI met once in the test above)."""
    with DevStack(kafka=False, workdir=tmp_path, redis_persistence=True) as stack:
        client = redis.Redis.from_url(stack.redis_url)
        client.execute_command("DEBUG", "POPULATE", 600_000, "k", 64)  # enough to take a while to load
        client.bgrewriteaof()
        wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0
                 and client.info("persistence")["aof_rewrite_scheduled"] == 0, timeout=60, what="the AOF rewrite")
        client.close()
        stack.redis.kill()
        stack.redis.start()
        client = redis.Redis.from_url(stack.redis_url)
        assert client.dbsize() == 600_000  # no BusyLoadingError: start() waited for PONG
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


def test_cli_dead_redis_is_reported_at_once_restarted_on_its_port_and_picked_up(tmp_path):
    """After `devstack up`: a SIGKILLed redis is dead in `status` at once; `up` restarts it on its port (the
    broker stays the same process: nothing orphaned); commands with no addresses configured use the stack
    and say so; `down` reports every component stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAM_DP_")}
    env["STREAM_DP_DEVSTACK_STATE"] = str(tmp_path / "state.json")
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    run = lambda *a: subprocess.run([sys.executable, "-m", "stream_dp.cli", *a],  # noqa: E731
                                    env=env, cwd=root, capture_output=True, text=True, timeout=60)
    up = run("devstack", "up")
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    pids = dict(info["pids"])
    try:
        os.kill(pids["redis"], signal.SIGKILL)
        status = run("devstack", "status")  # no waiting: the kill must show at once
        assert status.returncode == 1
        st = json.loads(status.stdout)
        assert st["running"] is False and st["alive"] == {"broker": True, "redis": False}

        again = run("devstack", "up")
        assert again.returncode == 0, again.stderr
        after = json.loads(again.stdout)
        assert after["restarted"] == ["redis"] and after["running"] is True
        assert after["pids"]["broker"] == pids["broker"], "the live broker is kept, not orphaned"
        assert after["redis_url"] == info["redis_url"] and redis.Redis.from_url(info["redis_url"]).ping()
        pids = dict(after["pids"])

        config = tmp_path / "c.toml"
        config.write_text('[redis]\nurl = ""\nkey_prefix = "pick"\n[kafka]\nbootstrap_servers = ""\n')
        listed = run("budget", "list", "--config", str(config), "--json")
        assert listed.returncode == 0, listed.stderr
        assert "using the running dev stack" in listed.stderr and info["redis_url"] in listed.stderr
        # the dashboard too (it used to ignore the dev stack): it says which broker it reads
        dash = subprocess.Popen([sys.executable, "-m", "stream_dp.cli", "dashboard", "--config", str(config)],
                                env={**env, "STREAM_DP_DASHBOARD__PORT": "0"}, cwd=root, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            first = dash.stdout.readline()
            assert first.startswith("dashboard  http://") and f"at {info['bootstrap_servers']};" in first, first
        finally:
            dash.send_signal(signal.SIGINT)
            dash.wait(timeout=30)
            dash.stdout.close()
    finally:
        down = run("devstack", "down")
    assert down.returncode == 0, down.stderr
    out = json.loads(down.stdout)
    assert out["running"] is False and "alive" not in out and set(out["stopped"].values()) == {True}
    assert _wait_dead(list(pids.values())) == []


def test_cli_up_refuses_clearly_when_a_dead_components_port_is_taken(tmp_path):
    import socket

    env = {**os.environ, "STREAM_DP_DEVSTACK_STATE": str(tmp_path / "state.json")}
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    run = lambda *a: subprocess.run([sys.executable, "-m", "stream_dp.cli", "devstack", *a],  # noqa: E731
                                    env=env, cwd=root, capture_output=True, text=True, timeout=60)
    info = json.loads(run("up").stdout)
    squatter = None
    try:
        port = int(info["redis_url"].rsplit(":", 1)[1].split("/")[0])
        os.kill(info["pids"]["redis"], signal.SIGKILL)
        assert _wait_dead([info["pids"]["redis"]]) == []
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        def bound() -> bool:  # the killed server's socket may take a moment to be released
            try:
                squatter.bind(("127.0.0.1", port))  # type: ignore[union-attr]
            except OSError:
                return False
            return True

        wait_for(bound, timeout=15, interval=0.1, what=f"port {port} to be free after the kill")
        squatter.listen()
        refused = run("up")
        assert refused.returncode == 1 and f"port {port} is taken" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        if squatter is not None:
            squatter.close()
        run("down")
    assert _wait_dead(list(info["pids"].values())) == []


def _redis_argv(port: int, workdir: Path) -> list[str]:
    return [str(find_redis_server()), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
            "--save", "", "--appendonly", "no"]


@pytest.mark.parametrize("listening", [True, False], ids=["listening", "bound"])
def test_a_port_taken_after_it_was_chosen_moves_the_first_start_to_another(tmp_path, listening):
    """free_port's port can be taken by another process (another test worker's server) before the service
    binds it. Listening, the port answers for that process: the start asks whose listener it is. Only bound,
    the service exits at once ("already in use" in its log). Either way the start moves to a free port, so
    the service never hands out an address that reaches someone else's server."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        if listening:
            squatter.listen()
        taken = squatter.getsockname()[1]

        def on_free_port() -> tuple[int, list[str]]:
            port = free_port()
            return port, _redis_argv(port, tmp_path)

        svc = Service("redis", _redis_argv(taken, tmp_path), taken, tmp_path / "redis.log", rebind=on_free_port)
        try:
            svc.start()
            assert svc.port != taken and svc.argv == _redis_argv(svc.port, tmp_path)
            with redis.Redis(port=svc.port, socket_timeout=5) as r:
                assert r.ping()
            assert svc.rebind is None  # started: a restart keeps this port
        finally:
            svc.stop()


def test_a_fixed_port_taken_by_another_process_is_an_error_naming_it(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        svc = Service("redis", _redis_argv(taken, tmp_path), taken, tmp_path / "redis.log")
        try:
            with pytest.raises(PortTaken, match=f"redis.*{taken}"):
                svc.start()
            assert not svc.running
        finally:
            svc.stop()
