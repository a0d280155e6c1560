"""The topic contract: the configs the service's three topics must have, created and checked by the service.

Apache Kafka's defaults are wrong for this service in ways that lose data silently: 7-day time retention
deletes a replayed backfill before it is counted (events carry their event time as record timestamp), a
broker-made topic has one partition (extra ingest workers idle), replication factor 1 loses a partition with
its broker, and the releases topic's 1 MB message limit refuses larger releases. So the service owns its
topics' settings (``[kafka]`` in config/stream-dp.toml):

=================  =============================================================================
every topic        ``message.timestamp.type = CreateTime`` (windows follow the producer's event time),
                   ``cleanup.policy = delete`` (compaction keeps one record per key: one event per user),
                   replication factor ``kafka.replication_factor`` (auto: min(3, brokers)) and
                   ``min.insync.replicas`` ``kafka.min_insync_replicas`` (auto: min(2, replication factor))
events             ``kafka.events_partitions`` partitions at least; ``retention.ms`` unlimited (-1) or at
                   least ``kafka.events_retention_ms``; ``retention.bytes = -1``
dead letters       one partition at least; ``retention.ms = kafka.dead_letter_retention_ms``
releases           one partition at least; ``retention.ms = kafka.releases_retention_ms``;
                   ``max.message.bytes`` ≥ ``kafka.release_message_max_bytes`` + the message overhead
=================  =============================================================================

:func:`create` makes the missing topics with exactly these configs (``stream-dp topics create``);
:func:`check` lists each way an existing topic breaks them (``stream-dp topics check``, and each worker's
start check: :func:`preflight`). A config the broker does not report (Tansu reports only what was set at
creation) cannot be checked: it is listed as unverified, never passed as fine.

The admin calls use confluent-kafka's AdminClient (it reports every topic config, defaults included, and the
topic ids :mod:`stream_dp.ingest.topic_identity` keeps); like every client of the service it never creates a
topic by accident.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from stream_dp.config import AUTO_REPLICAS, KafkaConfig
from stream_dp.errors import StreamDPError
from stream_dp.wire import MESSAGE_OVERHEAD_BYTES

log = logging.getLogger(__name__)

ROLES = ("events", "dead-letter", "releases")
ADMIN_TIMEOUT_SECONDS = 15.0
UNLIMITED = -1
CREATE_HINT = "run `stream-dp topics create`"


class TopicContractError(RuntimeError, StreamDPError):
    """A topic breaks the contract (or the broker cannot be asked); the message is one line naming the
    topic, the config and the fix."""


@dataclass(frozen=True)
class TopicSpec:
    """What one topic must be: the role it plays, its name, partitions (at least), replication and configs."""

    role: str
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Breach:
    """One way a topic breaks its :class:`TopicSpec`; :meth:`line` is what an operator reads."""

    topic: str
    setting: str
    found: str
    wanted: str
    fix: str

    def line(self) -> str:
        return f"topic {self.topic!r}: {self.setting} is {self.found}, the contract needs {self.wanted}; {self.fix}"


@dataclass
class Report:
    """The outcome of :func:`check`: breaches (each stops a worker) and configs the broker did not report."""

    breaches: list[Breach] = field(default_factory=list)
    unverified: dict[str, list[str]] = field(default_factory=dict)  # topic -> configs not reported
    topic_ids: dict[str, str] = field(default_factory=dict)  # topic -> the broker's topic id
    # topic -> message.timestamp.after.max.ms, where the broker reports it (Apache Kafka 4 refuses a record
    # stamped further ahead of its clock; Tansu reports nothing and accepts any timestamp)
    timestamp_after_max_ms: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.breaches


def resolve_replication(cfg: KafkaConfig, brokers: int) -> tuple[int, int]:
    """``(replication factor, min.insync.replicas)`` for a cluster of ``brokers``: the settings, with
    ``"auto"`` as min(3, brokers) and min(2, replication factor).

    >>> from stream_dp.config import KafkaConfig
    >>> resolve_replication(KafkaConfig(), 1), resolve_replication(KafkaConfig(), 5)
    ((1, 1), (3, 2))
    """
    rf = min(3, max(1, brokers)) if cfg.replication_factor == AUTO_REPLICAS else int(cfg.replication_factor)
    isr = min(2, rf) if cfg.min_insync_replicas == AUTO_REPLICAS else int(cfg.min_insync_replicas)
    return rf, isr


def contract(cfg: KafkaConfig, brokers: int, roles: tuple[str, ...] = ROLES) -> list[TopicSpec]:
    """The :class:`TopicSpec` of each role in ``roles`` for ``cfg`` on a cluster of ``brokers`` brokers."""
    rf, isr = resolve_replication(cfg, brokers)
    common = {"message.timestamp.type": "CreateTime", "cleanup.policy": "delete", "min.insync.replicas": str(isr)}
    specs = {
        "events": TopicSpec("events", cfg.events_topic, cfg.events_partitions, rf,
                            {**common, "retention.ms": str(cfg.events_retention_ms), "retention.bytes": "-1"}),
        "dead-letter": TopicSpec("dead-letter", cfg.dead_letter_topic, 1, rf,
                                 {**common, "retention.ms": str(cfg.dead_letter_retention_ms)}),
        "releases": TopicSpec("releases", cfg.releases_topic, 1, rf,
                              {**common, "retention.ms": str(cfg.releases_retention_ms),
                               "max.message.bytes": str(cfg.release_message_max_bytes + MESSAGE_OVERHEAD_BYTES)}),
    }
    return [specs[r] for r in roles]


def admin_client(cfg: KafkaConfig, **settings: Any) -> Any:
    """A confluent-kafka AdminClient on ``cfg``'s brokers and security settings (plus librdkafka ``settings``)."""
    from confluent_kafka.admin import AdminClient

    from stream_dp.connections import confluent_client_settings

    # librdkafka's own log lines (a broker going away) are noise here: every failure reaches the caller
    return AdminClient({**confluent_client_settings(cfg), "log_level": 2, **settings})


def broker_count(admin: Any) -> int:
    """Brokers in the cluster (from its metadata)."""
    return len(admin.describe_cluster(request_timeout=ADMIN_TIMEOUT_SECONDS).result().nodes)


def create(cfg: KafkaConfig, roles: tuple[str, ...] = ROLES, *, admin: Any = None,
           names: dict[str, str] | None = None, extra_configs: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Create each topic of ``roles`` that does not exist, with the contract's partitions, replication and
    configs; returns the names created. Existing topics are left as they are (:func:`check` says whether
    they keep the contract). ``names`` renames roles (``{"events": "other"}``, e.g. replay ``--topic``);
    ``extra_configs`` adds topic configs the contract does not set, per role."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin or admin_client(cfg)
    specs = [_renamed(s, names) for s in contract(cfg, broker_count(admin), roles)]
    existing = set(admin.list_topics(timeout=ADMIN_TIMEOUT_SECONDS).topics)
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    extra = extra_configs or {}
    futures = admin.create_topics([NewTopic(s.name, s.partitions, s.replication_factor,
                                            config={**extra.get(s.role, {}), **s.configs})
                                   for s in missing], request_timeout=ADMIN_TIMEOUT_SECONDS)
    created = []
    for name, fut in futures.items():
        try:
            fut.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # made meanwhile by another process: checked later
                raise TopicContractError(f"topic {name!r}: could not be created: {exc.args[0].str()}") from None
    for name in created:
        log.info("created topic %s", name)
    _visible(admin, created)
    return created


def _visible(admin: Any, names: list[str], *, deadline_s: float = ADMIN_TIMEOUT_SECONDS,
             streak: int = 3, interval_s: float = 0.2) -> None:
    """Return once the metadata of ``streak`` consecutive requests lists every topic of ``names``: a broker of a
    cluster learns a new topic from the controller a moment after the creation is acknowledged, and a check that
    asks such a broker first (``topics create`` checks right away; a worker starts right after) would find the
    topic "missing". Gives up quietly at ``deadline_s`` (the check then says what it sees)."""
    if not names:
        return
    end, seen = time.monotonic() + deadline_s, 0
    while seen < streak and time.monotonic() < end:
        listed = admin.list_topics(timeout=ADMIN_TIMEOUT_SECONDS).topics
        seen = seen + 1 if all(name in listed for name in names) else 0
        if seen < streak:
            time.sleep(interval_s)


def _renamed(spec: TopicSpec, names: dict[str, str] | None) -> TopicSpec:
    if names and spec.role in names:
        return TopicSpec(spec.role, names[spec.role], spec.partitions, spec.replication_factor, spec.configs)
    return spec


def check(cfg: KafkaConfig, roles: tuple[str, ...] = ROLES, *, admin: Any = None,
          names: dict[str, str] | None = None) -> Report:
    """Compare each topic of ``roles`` with the contract: every breach, and the configs the broker did not
    report (so could not be checked)."""
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import ConfigResource

    admin = admin or admin_client(cfg)
    specs = [_renamed(s, names) for s in contract(cfg, broker_count(admin), roles)]
    report = Report()
    existing = set(admin.list_topics(timeout=ADMIN_TIMEOUT_SECONDS).topics)
    present = [s for s in specs if s.name in existing]
    for spec in specs:
        if spec.name not in existing:
            report.breaches.append(Breach(spec.name, "the topic", "missing", f"the {spec.role} topic", CREATE_HINT))
    if not present:
        return report
    described = admin.describe_topics(TopicCollection([s.name for s in present]),
                                      request_timeout=ADMIN_TIMEOUT_SECONDS)
    configs = admin.describe_configs([ConfigResource("topic", s.name) for s in present],
                                     request_timeout=ADMIN_TIMEOUT_SECONDS)
    by_name = {res.name: fut for res, fut in configs.items()}
    for spec in present:
        try:
            desc = described[spec.name].result()
            entries = by_name[spec.name].result()
        except KafkaException as exc:
            raise TopicContractError(f"topic {spec.name!r}: could not be described: {exc.args[0].str()}") from None
        report.topic_ids[spec.name] = str(desc.topic_id)
        _check_layout(spec, desc, report)
        _check_configs(spec, {k: v.value for k, v in entries.items()}, report)
        ahead = entries.get("message.timestamp.after.max.ms")
        if ahead is not None and ahead.value is not None:
            report.timestamp_after_max_ms[spec.name] = int(ahead.value)
    return report


def _check_layout(spec: TopicSpec, desc: Any, report: Report) -> None:
    partitions = len(desc.partitions)
    if partitions < spec.partitions:
        report.breaches.append(Breach(
            spec.name, "the partition count", str(partitions), f"at least {spec.partitions} (kafka.events_partitions)",
            f"add partitions (kafka-topics.sh --alter --topic {spec.name} --partitions {spec.partitions}) before any "
            "event is produced, or lower kafka.events_partitions"))
    replicas = min((len(p.replicas) for p in desc.partitions), default=0)
    if replicas < spec.replication_factor:
        report.breaches.append(Breach(
            spec.name, "the replication factor", str(replicas),
            f"at least {spec.replication_factor} (kafka.replication_factor)",
            "add replicas with kafka-reassign-partitions.sh, or set kafka.replication_factor to what the cluster "
            "can hold"))


def _check_configs(spec: TopicSpec, found: dict[str, str | None], report: Report) -> None:
    unverified = []
    for name, wanted in spec.configs.items():
        value = found.get(name)
        if value is None:
            unverified.append(name)
            continue
        problem = _config_problem(spec, name, value, wanted)
        if problem:
            report.breaches.append(Breach(
                spec.name, name, value, problem,
                f"kafka-configs.sh --alter --entity-type topics --entity-name {spec.name} --add-config {name}={wanted}"))
    if unverified:
        report.unverified[spec.name] = unverified


def _config_problem(spec: TopicSpec, name: str, value: str, wanted: str) -> str:
    """What the contract needs where ``value`` breaks it, else ``""``."""
    if name == "retention.ms":
        need = int(wanted)
        if need == UNLIMITED:
            return "" if int(value) == UNLIMITED else f"-1 (unlimited: kafka.{_setting(spec)}_retention_ms)"
        return "" if int(value) == UNLIMITED or int(value) >= need else f">= {need} (kafka.{_setting(spec)}_retention_ms)"
    if name == "retention.bytes":
        return "" if int(value) == UNLIMITED else "-1 (no size limit: older events would be deleted uncounted)"
    if name == "max.message.bytes":
        return "" if int(value) >= int(wanted) else f">= {wanted} (kafka.release_message_max_bytes + {MESSAGE_OVERHEAD_BYTES})"
    if name == "min.insync.replicas":
        isr = int(value)
        if isr > spec.replication_factor:
            return f"<= the replication factor {spec.replication_factor} (else every write fails)"
        return "" if isr >= int(wanted) else f">= {wanted} (kafka.min_insync_replicas)"
    if name == "cleanup.policy":
        return "" if value == wanted else "delete (compaction keeps one record per user key)"
    return "" if value == wanted else wanted


def _setting(spec: TopicSpec) -> str:
    return {"events": "events", "dead-letter": "dead_letter", "releases": "releases"}[spec.role]


def preflight(cfg: KafkaConfig, roles: tuple[str, ...]) -> Report:
    """A worker's start check: raises :class:`TopicContractError` with the first breach's line; logs one
    warning per topic whose configs the broker did not report. Returns the report (topic ids included)."""
    from confluent_kafka import KafkaException

    try:
        report = check(cfg, roles)
    except KafkaException as exc:
        raise TopicContractError(f"the topics could not be checked: the brokers at {cfg.bootstrap_servers} "
                                 f"(kafka.bootstrap_servers) did not answer ({exc.args[0].str()})") from None
    for topic, names in report.unverified.items():
        log.warning("topic %r: the broker does not report %s; those configs were not checked", topic,
                    ", ".join(names))
    if report.breaches:
        raise TopicContractError(report.breaches[0].line())
    return report
