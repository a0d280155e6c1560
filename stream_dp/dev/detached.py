"""The detached dev stack of ``stream-dp devstack up|down|status``: a stack that outlives the command.

``up`` starts a :class:`~stream_dp.dev.devstack.DevStack` whose children run in sessions of their own and
records it -- pids, ports, argv, logs -- in a state file, one per checkout (:func:`state_path`), so a second
checkout's commands never attach to the first one's broker and Redis; ``status`` reads that file and checks
each process is alive and listening; ``down`` stops them and removes the record; a dead component is started
again on its recorded port. Commands with no broker or Redis configured use the recorded stack's addresses
(:func:`running_addresses`, read by :func:`stream_dp.runtime.with_devstack`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from stream_dp.dev.devstack import DevStack
from stream_dp.dev.service import READY_TIMEOUT_SECONDS, DevStackError, Service

log = logging.getLogger(__name__)


def checkout() -> Path:
    """The source tree (an editable install's checkout) or installation this stream-dp runs from."""
    return Path(__file__).resolve().parents[2]


def state_path(override: str | os.PathLike[str] | None = None) -> Path:
    """Where the detached stack is recorded: ``override`` (``stream-dp devstack --state``), else
    ``$STREAM_DP_DEVSTACK_STATE``, else one file per checkout (:func:`checkout`) under the user's state
    directory -- so a second checkout's commands never attach to the first one's broker and Redis."""
    if override:
        return Path(override)
    env = os.environ.get("STREAM_DP_DEVSTACK_STATE")
    if env:
        return Path(env)
    root = checkout()
    tag = hashlib.blake2b(str(root).encode(), digest_size=4).hexdigest()
    base = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "stream-dp"
    return base / f"devstack-{root.name}-{tag}.json"


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie — killed, not reaped yet — counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):  # no /proc (not Linux): the signal probe is all we have
        return True


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


def _components(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per component of a recorded stack: pid, port and argv (older state files lack the last two)."""
    out = {}
    for name, pid in info.get("pids", {}).items():
        out[name] = {"pid": pid, **info.get("components", {}).get(name, {})}
    return out


def _write_state(info: dict[str, Any], state: Path | None = None) -> None:
    path = state_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(info, indent=2))


def up(broker: str = "tansu", state: Path | None = None) -> dict[str, Any]:
    """Start a detached stack (or return the running one) and record it.

    If a recorded stack has a dead component, that component is started again on its recorded port
    (the broker keeps memory storage: its topics are gone; Redis starts empty unless it kept an AOF); if
    the port was taken meanwhile, :class:`DevStackError` says so, and nothing is orphaned: the live
    components stay recorded for ``down``."""
    current = status(state)
    if current.get("pids") and current.get("broker", "tansu") != broker:
        raise DevStackError(f"a dev stack with the {current.get('broker', 'tansu')} broker is recorded in "
                            f"{state_path(state)}: run `stream-dp devstack down` first to switch to {broker}")
    if current.get("running"):
        return current
    if current.get("pids") and any(current["alive"].values()):
        return _restart_dead(current, state)
    if current.get("pids"):  # every component dead: forget the old record
        down(state)
    stack = DevStack(detached=True, workdir=Path(tempfile.mkdtemp(prefix="stream-dp-devstack-")), broker=broker)
    stack.start()
    info = stack.describe()
    info["checkout"] = str(checkout())
    info["components"] = {s.name: {"port": s.port, "argv": s.argv, "log": str(s.log_path),
                                   "ready_timeout": s.ready_timeout} for s in stack.services}
    _write_state(info, state)
    return {**info, "running": True}


def _restart_dead(current: dict[str, Any], state: Path | None = None) -> dict[str, Any]:
    info = {k: v for k, v in current.items() if k not in ("alive", "running", "listening")}
    restarted = []
    for name, comp in _components(info).items():
        if current["alive"].get(name):
            continue
        if "argv" not in comp:
            raise DevStackError(f"the dev stack's {name} is dead and the state file {state_path(state)} does not say how "
                                "to restart it: run `stream-dp devstack down`, then `stream-dp devstack up`")
        if _listening(comp["port"]):
            raise DevStackError(f"the dev stack's {name} is dead but its port {comp['port']} is taken by another "
                                "process: free it, or run `stream-dp devstack down` and `up` for a new stack")
        svc = Service(name, list(comp["argv"]), int(comp["port"]), Path(comp["log"]), detached=True,
                      ready_timeout=float(comp.get("ready_timeout", READY_TIMEOUT_SECONDS)))
        svc.start()
        info["pids"][name] = svc.pid
        restarted.append(name)
    _write_state(info, state)
    log.info("dev stack: restarted %s on the recorded port(s)", ", ".join(restarted))
    return {**status(state), "restarted": restarted}


def status(state: Path | None = None) -> dict[str, Any]:
    """What the state file says, and whether its processes are alive and listening on their ports."""
    path = state_path(state)
    if not path.exists():
        return {"running": False}
    info = json.loads(path.read_text())
    comps = _components(info)
    alive = {name: bool(c["pid"]) and _alive(c["pid"]) and (not c.get("port") or _listening(c["port"]))
             for name, c in comps.items()}
    return {**info, "alive": alive, "running": bool(alive) and all(alive.values())}


def down(state: Path | None = None) -> dict[str, Any]:
    """Stop the detached stack recorded in the state file and remove the record."""
    info = status(state)
    pids = [pid for pid in info.get("pids", {}).values() if pid]
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    if info.get("workdir"):
        shutil.rmtree(info["workdir"], ignore_errors=True)
    state_path(state).unlink(missing_ok=True)
    stopped = {name: not _alive(pid) for name, pid in info.get("pids", {}).items() if pid}
    return {**{k: v for k, v in info.items() if k != "alive"}, "stopped": stopped, "running": False}


def running_addresses() -> dict[str, str] | None:
    """The broker and Redis addresses of a running ``stream-dp devstack``, or None."""
    try:
        info = status()
    except (OSError, ValueError):  # unreadable state file: as if there were none
        return None
    if not info.get("running"):
        return None
    return {"bootstrap_servers": info.get("bootstrap_servers") or "", "redis_url": info.get("redis_url") or ""}
