"""Apache Kafka as a local broker: fetched with Maven into a cache, run as KRaft nodes on loopback ports.

For the dev stack (``stream-dp devstack up --broker kafka``), the test fixtures (the integration tier runs
on Tansu *and* on Apache Kafka) and the chaos tier's three-broker cluster. Production runs Apache Kafka
however its operators run it (docker-compose.yml shows one way); nothing outside development imports this.

**What is fetched.** ``org.apache.kafka:kafka_2.13`` (the broker), ``kafka-tools`` and a log4j 2 binding at
the pinned :data:`KAFKA_VERSION` / :data:`LOG4J_VERSION`, with their runtime dependencies, by
``mvn dependency:copy-dependencies`` from a generated POM, into
``$STREAM_DP_KAFKA_LIBS`` or ``~/.cache/stream-dp/kafka-<version>/libs``. The directory is written next
to its final place and renamed when complete, so an interrupted download never passes for a cache.

**How a node runs.** Each node is a combined KRaft broker + controller (``process.roles=broker,controller``)
with a static voter set, formatted once by ``kafka.tools.StorageTool`` and started as ``kafka.Kafka`` with
``-Xmx512m``. Every setting is Kafka's default except: the loopback listeners, the replication factor of
Kafka's internal topics (at most the number of nodes) and ``log.retention.check.interval.ms`` (default
5 minutes; shortened so a test sees within seconds what a default broker does within minutes — it changes
*when* retention runs, not *what* it deletes). Ready means: the broker answers metadata and lists every
node of the cluster (polled with a deadline), not merely that its port accepts connections.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stream_dp.errors import StreamDPError
from stream_dp.processes import free_port

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.2"  #: Apache Kafka release run by the dev stack and the tests (pinned)
LOG4J_VERSION = "2.24.3"  #: the log4j 2 binding Kafka 4.1 ships with
LIBS_VARIABLE = "STREAM_DP_KAFKA_LIBS"
READY_TIMEOUT_SECONDS = 90.0  # a JVM start on a loaded 2-core machine: seconds normally, a minute at worst
RETENTION_CHECK_INTERVAL_MS = 1000  # Kafka's default is 300000 (5 minutes)
INITIAL_TASK_DELAY_SECONDS = 30  # Kafka's log.initial.task.delay.ms default: the first retention check after start
HEAP = "-Xmx512m"
_COMPLETE = ".complete"  # marker written last: the cache directory holds every jar

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.stream-dp</groupId><artifactId>kafka-broker-libs</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""


class KafkaUnavailable(RuntimeError, StreamDPError):
    """Apache Kafka cannot be run here (no Java or Maven, or the download failed); says which."""


def libs_dir() -> Path:
    """Where the jars are cached: ``$STREAM_DP_KAFKA_LIBS`` or ``~/.cache/stream-dp/kafka-<version>/libs``."""
    env = os.environ.get(LIBS_VARIABLE)
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "stream-dp" / f"kafka-{KAFKA_VERSION}" / "libs"


def java() -> str:
    """The ``java`` to run Kafka with (``$JAVA_HOME/bin/java``, else PATH); Kafka 4.1 needs Java 17+."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if not found:
        raise KafkaUnavailable("Apache Kafka needs Java 17 or later: no java on PATH and no $JAVA_HOME")
    return found


def ensure_libs(*, quiet: bool = False) -> Path:
    """The cached jars of Apache Kafka :data:`KAFKA_VERSION`, fetched with Maven first if they are missing.

    Raises :class:`KafkaUnavailable` naming what is missing (mvn) or where the download's log is."""
    target = libs_dir()
    if (target / _COMPLETE).exists():
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaUnavailable(f"Apache Kafka {KAFKA_VERSION} is not cached at {target} and Maven (mvn) is not "
                               f"installed to fetch it: install Maven, or set {LIBS_VARIABLE} to a directory "
                               "of its jars")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fetch-", dir=target.parent))
    try:
        (work / "pom.xml").write_text(_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION))
        out = work / "libs"
        log_path = target.parent / "fetch.log"
        if not quiet:
            log.info("fetching Apache Kafka %s with Maven into %s (log: %s)", KAFKA_VERSION, target, log_path)
        t0 = time.monotonic()
        with open(log_path, "wb") as logf:
            done = subprocess.run([mvn, "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
                                   f"-DoutputDirectory={out}", "-DincludeScope=runtime"],
                                  stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise KafkaUnavailable(f"fetching Apache Kafka {KAFKA_VERSION} with Maven failed (exit code "
                                   f"{done.returncode}); see {log_path}")
        jars = sorted(p.name for p in out.glob("*.jar"))
        if f"kafka_2.13-{KAFKA_VERSION}.jar" not in jars:
            raise KafkaUnavailable(f"Maven finished but {out} has no kafka_2.13-{KAFKA_VERSION}.jar; see {log_path}")
        (out / _COMPLETE).write_text("\n".join(jars) + "\n")
        if target.exists():  # an incomplete earlier attempt
            shutil.rmtree(target)
        out.rename(target)
        if not quiet:
            log.info("Apache Kafka %s: %d jars fetched in %.1f s", KAFKA_VERSION, len(jars), time.monotonic() - t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node (broker + controller) of a local cluster: its id, ports and data directory."""

    node_id: int
    port: int  # the client listener (PLAINTEXT)
    controller_port: int
    workdir: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def properties(self, voters: str, nodes: int, overrides: dict[str, str]) -> dict[str, str]:
        """``server.properties``: Kafka's defaults but for the listed local-cluster settings."""
        internal_rf = str(min(3, nodes))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            # Kafka's internal topics default to replication factor 3, impossible on fewer nodes
            "offsets.topic.replication.factor": internal_rf,
            "transaction.state.log.replication.factor": internal_rf,
            "transaction.state.log.min.isr": str(min(2, nodes)),
            "share.coordinator.state.topic.replication.factor": internal_rf,
            "share.coordinator.state.topic.min.isr": str(min(2, nodes)),
            "log.retention.check.interval.ms": str(RETENTION_CHECK_INTERVAL_MS),
        }
        props.update(overrides)
        return props

    def argv(self, libs: Path) -> list[str]:
        return [java(), HEAP, "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}",
                "-cp", f"{libs}/*", "kafka.Kafka", str(self.properties_path)]


def plan_cluster(workdir: Path, nodes: int = 1) -> list[KafkaNode]:
    """``nodes`` KRaft nodes with free loopback ports under ``workdir/node-<id>``."""
    return [KafkaNode(i, free_port(), free_port(), workdir / f"node-{i}") for i in range(1, nodes + 1)]


def voters(nodes: list[KafkaNode]) -> str:
    """``controller.quorum.voters``: every node votes (a static quorum)."""
    return ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)


def format_storage(nodes: list[KafkaNode], libs: Path, overrides: dict[str, str] | None = None) -> str:
    """Write each node's properties and format its log directory for one new cluster; returns the cluster id.

    A node already formatted (a restart of a recorded stack) is left as it is."""
    cluster_id = _random_cluster_id()
    quorum = voters(nodes)
    for node in nodes:
        node.workdir.mkdir(parents=True, exist_ok=True)
        (node.workdir / "log4j2.yaml").write_text(_LOG4J2)
        props = node.properties(quorum, len(nodes), overrides or {})
        node.properties_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        if (node.workdir / "data" / "meta.properties").exists():
            continue
        done = subprocess.run([java(), "-Xmx256m", "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format",
                               "-t", cluster_id, "-c", str(node.properties_path)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KafkaUnavailable(f"formatting Kafka node {node.node_id}'s storage failed: "
                                   f"{(done.stderr or done.stdout).strip()[-500:]}")
    return cluster_id


def _random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (what StorageTool prints), never
    starting with '-' -- as Kafka's own ``Uuid.randomUuid`` (about one id in 64 does): the storage tool's
    command line would read such an id as an option (``argument --cluster-id/-t: expected one argument``)."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def wait_ready(bootstrap: str, expected_brokers: int, *, deadline: float,
               alive: Callable[[], bool] = lambda: True, describe: str = "Kafka") -> None:
    """Poll until the cluster at ``bootstrap`` answers metadata listing ``expected_brokers`` brokers and a
    controller; raises :class:`KafkaUnavailable` at ``deadline`` or when ``alive()`` turns false."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    last = "no answer yet"
    while time.monotonic() < deadline:
        if not alive():
            raise KafkaUnavailable(f"{describe} exited while starting")
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=3000)
        except (KafkaError, OSError, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.2)
            continue
        try:
            cluster = admin.describe_cluster()
            if len(cluster.get("brokers", [])) >= expected_brokers and cluster.get("controller_id", -1) >= 0:
                return
            last = f"{len(cluster.get('brokers', []))} of {expected_brokers} brokers registered"
        except (KafkaError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        finally:
            admin.close()
        time.sleep(0.2)
    raise KafkaUnavailable(f"{describe} at {bootstrap} was not ready in time ({last})")


def prepare_cluster(workdir: Path, nodes: int = 1, overrides: dict[str, str] | None = None
                    ) -> tuple[Path, list[KafkaNode]]:
    """Everything before the first start of a local cluster: the jars (fetched if needed), ``nodes`` nodes
    planned on free ports under ``workdir/kafka``, their storage formatted. Returns ``(jar dir, nodes)``."""
    libs = ensure_libs()
    planned = plan_cluster(workdir / "kafka", nodes)
    format_storage(planned, libs, overrides)
    return libs, planned


def main(argv: list[str] | None = None) -> int:
    """``python -m stream_dp.dev.kafka_broker fetch``: fetch the pinned Apache Kafka into the cache (CI runs it
    before the tests, so a download failure is one clear line, not a skipped or failed test later)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m stream_dp.dev.kafka_broker", description=main.__doc__)
    parser.add_argument("action", choices=("fetch",))
    parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        java()
        print(ensure_libs())
    except KafkaUnavailable as exc:
        print(f"kafka error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
