"""Shared fixtures: real Kafka-protocol brokers and a real redis-server for the whole session.

The dev stack (:mod:`stream_dp.dev.devstack`) starts them on free loopback ports. Every test that uses a broker
(``bootstrap_servers``) runs on each broker of ``STREAM_DP_TEST_BROKERS`` (default: the embedded Tansu and
Apache Kafka; see :func:`broker_kind`). To run the suite against external services instead, set
``STREAM_DP_TEST_BOOTSTRAP_SERVERS`` and/or ``STREAM_DP_TEST_REDIS_URL`` (nothing is started for a service
given that way). Each test gets fresh topic names and its own, flushed, Redis database.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stream_dp import kafka_sockets
from stream_dp.dev.devstack import BROKERS, REDIS_DATABASES, DevStack
from tests.support import shared_kafka

EXTERNAL_BROKER = "STREAM_DP_TEST_BOOTSTRAP_SERVERS"
EXTERNAL_REDIS = "STREAM_DP_TEST_REDIS_URL"
_KAFKA_RUN = pytest.StashKey[Path]()  # the controlling process's directory of the run's shared Kafka broker
_KAFKA_RUN_INPUT = "stream_dp_shared_kafka"  # its path in each xdist worker's workerinput

# the tests' own kafka-python clients too (the service's modules install it for theirs): a socket one of them
# left open on kafka-python 3.0's leaking paths failed whichever test ran when the garbage collector found it
kafka_sockets.install()


_SHARED_FIXTURE = re.compile(r"""@pytest\.fixture\(\s*scope=["'](module|class|package)["']""")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under pytest-xdist's default ``--dist load``: each test is its own unit of work, except that the tests
    of a file defining a module- (class-, package-) scoped fixture (a running demo, a generated report) go to
    one worker together, so that fixture is built once rather than once per worker. (pytest-xdist's own
    ``loadgroup`` renames node ids, which pytest 9 ignores.) Session fixtures -- the broker and redis-server
    -- are per worker by design. Other ``--dist`` modes are left to pytest-xdist."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    # work units in the collection's order, which is longest first (pytest_collection_modifyitems below), not
    # reordered by their number of tests
    config.option.loadscopereorder = False

    class SharedFixtureFileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _shares_a_fixture(root, path) else nodeid

    return SharedFixtureFileScheduling(config, log)  # type: ignore[arg-type]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest tests first, by the durations recorded in tests/durations.json (tests/support/durations.py): under
    pytest-xdist a long test handed out last keeps one worker busy after the others finished. Runs after
    pytest's own ordering and keeps its groups: the tests of one broker stay together (a worker starts its Tansu
    once; the run's Apache Kafka is shared), and a file with a module- (class-, package-) scoped fixture moves as one block."""
    from tests.support.durations import load, longest_first

    recorded = load()
    if not recorded:
        return
    root = config.rootpath

    def scope(item: pytest.Item) -> str:
        path = item.nodeid.split("::", 1)[0]
        return path if _shares_a_fixture(root, path) else item.nodeid

    def block(item: pytest.Item) -> object:
        callspec = getattr(item, "callspec", None)
        return callspec.params.get("broker_kind") if callspec is not None else None

    items[:] = longest_first(items, seconds=lambda item: recorded.get(item.nodeid, 0.0), block=block, scope=scope)


@functools.cache
def _shares_a_fixture(root: Path, path: str) -> bool:
    """Whether the test file at ``path`` defines a module- (class-, package-) scoped fixture."""
    try:
        return bool(_SHARED_FIXTURE.search((root / path).read_text(encoding="utf-8")))
    except OSError:
        return False


@pytest.fixture(scope="session", autouse=True)
def _private_devstack_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Commands pick up a running ``stream-dp devstack`` when no addresses are configured: the suite must
    not see one a developer (or another test run on this machine) left running, so it gets its own state file."""
    old = os.environ.get("STREAM_DP_DEVSTACK_STATE")
    os.environ["STREAM_DP_DEVSTACK_STATE"] = str(tmp_path_factory.mktemp("devstack-state") / "devstack.json")
    yield
    if old is None:
        os.environ.pop("STREAM_DP_DEVSTACK_STATE", None)
    else:
        os.environ["STREAM_DP_DEVSTACK_STATE"] = old


#: Which brokers the broker-using tests run on (comma-separated). Unset: both, and the Apache Kafka variant
#: skips with the reason when Kafka cannot be run here (no Java/Maven, download failed). Set (as .ci/run does):
#: exactly those, and a broker that cannot start fails the run instead of skipping.
BROKERS_VARIABLE = "STREAM_DP_TEST_BROKERS"


def _test_brokers() -> list[str]:
    wanted = os.environ.get(BROKERS_VARIABLE, "tansu,kafka")
    return [b.strip() for b in wanted.split(",") if b.strip()]


@pytest.fixture(scope="session", params=_test_brokers())
def broker_kind(request: pytest.FixtureRequest) -> str:
    """The broker this test talks to: ``tansu`` (the embedded dev broker) or ``kafka`` (Apache Kafka, KRaft,
    one node, Kafka's defaults but a 1 s retention check interval; :mod:`stream_dp.dev.kafka_broker`). Every test
    that uses a broker runs once per broker; Redis-only tests do not depend on it and run once."""
    kind = str(request.param)
    if kind not in BROKERS:
        raise pytest.UsageError(f"{BROKERS_VARIABLE}: unknown broker {kind!r} (choose from {', '.join(BROKERS)})")
    if kind == "kafka" and BROKERS_VARIABLE not in os.environ and not os.environ.get(EXTERNAL_BROKER):
        from stream_dp.dev.kafka_broker import KafkaUnavailable, ensure_libs, java

        try:
            java()
            ensure_libs()
        except KafkaUnavailable as exc:
            pytest.skip(f"Apache Kafka variant: {exc}")
    return kind


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process (not an xdist worker) makes the directory of the run's shared Kafka broker."""
    if not hasattr(config, "workerinput"):
        config.stash[_KAFKA_RUN] = shared_kafka.open_run()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Each xdist worker learns where the run's shared Kafka broker is recorded."""
    node.workerinput[_KAFKA_RUN_INPUT] = str(node.config.stash[_KAFKA_RUN])


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controlling process stops the run's shared Kafka broker once every worker has finished."""
    if not hasattr(config, "workerinput") and _KAFKA_RUN in config.stash:
        shared_kafka.close_run(config.stash[_KAFKA_RUN])


def _kafka_run(config: pytest.Config) -> Path:
    workerinput = getattr(config, "workerinput", None)
    return Path(workerinput[_KAFKA_RUN_INPUT]) if workerinput is not None else config.stash[_KAFKA_RUN]


@pytest.fixture(scope="session")
def broker_stack(broker_kind: str,
                 request: pytest.FixtureRequest) -> Iterator[DevStack | shared_kafka.SharedBroker | None]:
    """The broker of ``broker_kind`` (None when ``STREAM_DP_TEST_BOOTSTRAP_SERVERS`` names one), started when
    the first test needs it: Apache Kafka once per test run, shared by the xdist workers
    (:mod:`tests.support.shared_kafka`); Tansu once per worker."""
    if os.environ.get(EXTERNAL_BROKER):
        yield None
        return
    if broker_kind == "kafka":
        yield shared_kafka.broker(_kafka_run(request.config))
        return
    stack = DevStack(kafka=True, redis=False, broker=broker_kind)
    stack.start()
    try:
        yield stack
    finally:
        stack.cleanup()


@pytest.fixture(scope="session")
def redis_stack() -> Iterator[DevStack | None]:
    """The session's redis-server (None when ``STREAM_DP_TEST_REDIS_URL`` names one)."""
    if os.environ.get(EXTERNAL_REDIS):
        yield None
        return
    stack = DevStack(kafka=False, redis=True)
    stack.start()
    try:
        yield stack
    finally:
        stack.cleanup()


@pytest.fixture(scope="session")
def bootstrap_servers(broker_stack: DevStack | shared_kafka.SharedBroker | None) -> str:
    """host:port of the broker of this test's ``broker_kind``."""
    return os.environ.get(EXTERNAL_BROKER) or broker_stack.bootstrap_servers  # type: ignore[union-attr]


@pytest.fixture(scope="session")
def redis_server_url(redis_stack: DevStack | None) -> str:
    """URL of the session's redis-server (database 0)."""
    return os.environ.get(EXTERNAL_REDIS) or redis_stack.redis_url  # type: ignore[union-attr]


_db_cycle = itertools.cycle(range(1, REDIS_DATABASES))


@pytest.fixture
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A Redis URL with a database of this test's own, flushed before and after."""
    import redis

    base = redis_server_url.rsplit("/", 1)[0]
    url = f"{base}/{next(_db_cycle)}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator["redis.Redis"]:  # noqa: F821
    """A redis-py client on this test's database."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def topic_name() -> Callable[[str], str]:
    """Factory of topic names unique to this test: ``topic_name("events")``."""
    suffix = uuid.uuid4().hex[:10]
    return lambda base="t": f"{base}-{suffix}"


@pytest.fixture
def own_stack(tmp_path) -> Iterator[DevStack]:
    """A dev stack of this test's own (for outage tests that stop and restart a service)."""
    stack = DevStack(workdir=tmp_path / "stack", redis_persistence=True)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
