"""Configuration: one TOML file, environment overrides, validation that names the setting at fault.

Load with :func:`load_config`. The default file is ``config/stream-dp.toml``; every setting there is
documented. Any setting can be overridden by an environment variable ``STREAM_DP_<SECTION>__<KEY>``
(nested tables add more ``__`` parts), e.g. ``STREAM_DP_KAFKA__BOOTSTRAP_SERVERS=broker:9092`` or
``STREAM_DP_RELEASES__TOPK__K=20``. Values from the environment are parsed as TOML values when they parse
(numbers, booleans, arrays), else taken as strings.

Secrets (``kafka.sasl_password``, ``redis.password``, and ``redis.url`` when it carries a password) can
also be read from a file: ``STREAM_DP_REDIS__PASSWORD_FILE=/run/secrets/redis_password`` sets
``redis.password`` to the file's text (one trailing newline stripped) -- the container-secrets
convention. Secret values are never echoed in errors; :mod:`stream_dp.redact` masks them in output.

How it is built: each section is a frozen pydantic dataclass whose fields carry their rules (types are
strict: a TOML string is never an integer; ranges and enumerations sit on the field; rules between fields
of a section are its ``model_validator``). pydantic-settings layers the sources -- the file's mapping, then
the ``STREAM_DP_*`` environment (:class:`_EnvironmentOverrides`, which keeps the TOML value syntax, the
``*_FILE`` secrets and the tool variables' exemption) -- and pydantic validates the result. Every
validation error is turned into a :class:`ConfigError` naming the setting, the allowed values, the value
(unless secret) and the environment variable that set it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, TypeVar, cast, dataclass_transform, get_type_hints

from pydantic import (AfterValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationError, create_model, model_validator)
from pydantic.dataclasses import dataclass
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from stream_dp.renamed_settings import BothSet, in_effect, renamed, shadowed_by
from stream_dp.errors import StreamDPError
from stream_dp.wire import DEFAULT_MESSAGE_MAX_BYTES

ENV_PREFIX = "STREAM_DP_"
# settings that may be read from a file named by STREAM_DP_<SECTION>__<KEY>_FILE; their values are secret
FILE_SETTINGS = ("kafka.sasl_password", "redis.password", "redis.url")
SECRET_SETTINGS = ("kafka.sasl_password", "redis.password")

#: ``STREAM_DP_*`` variables of the tools, not settings (the dev stack's binaries and state file, the
#: workers' log level, the test suite's external services): never read as config overrides.
TOOL_VARIABLES = frozenset({"STREAM_DP_LOG_LEVEL", "STREAM_DP_TANSU", "STREAM_DP_REDIS_SERVER",
                            "STREAM_DP_DEVSTACK_STATE", "STREAM_DP_KAFKA_LIBS"})


class ConfigError(ValueError, StreamDPError):
    """A setting is missing, unknown, of the wrong type, or out of its allowed range."""


class _Rule(ValueError):
    """A broken rule of one setting, raised inside validation: ``allowed`` completes "<setting> must be …"."""

    def __init__(self, allowed: str, *, setting: str = "", value: Any = None) -> None:
        super().__init__(f"must be {allowed}")
        self.allowed, self.setting, self.value = allowed, setting, value


# --------------------------------------------------------------------------------------------------
# Field rules
# --------------------------------------------------------------------------------------------------


def _rule(check: Callable[[Any], bool], allowed: str) -> AfterValidator:
    def validate(value: Any) -> Any:
        if not check(value):
            raise _Rule(allowed)
        return value

    return AfterValidator(validate)


def _one_of(*choices: str, allowed: str | None = None) -> AfterValidator:
    return _rule(lambda v: v in choices, allowed or f"one of {', '.join(choices)}")


Str = StrictStr
NonEmpty = Annotated[StrictStr, _rule(bool, "a non-empty string")]
Address = Annotated[StrictStr, _rule(bool, "a non-empty address")]
AtLeastOne = Annotated[StrictInt, _rule(lambda v: v >= 1, ">= 1")]
NonNegative = Annotated[StrictInt, _rule(lambda v: v >= 0, ">= 0")]
Port = Annotated[StrictInt, _rule(lambda v: 0 <= v <= 65535, "in [0, 65535]")]
Positive = Annotated[StrictFloat, _rule(lambda v: math.isfinite(v) and v > 0, "> 0")]
Number = StrictFloat
Count = StrictInt
Flag = StrictBool
NOISES = ("laplace", "exponential", "geometric")
AUTO_REPLICAS = "auto"
MIN_SESSION_TIMEOUT_MS = 6000  # Apache Kafka's default group.min.session.timeout.ms
# a topic's retention.ms: -1 keeps records until deleted by hand; else at least a minute
RetentionMs = Annotated[StrictInt, _rule(lambda v: v == -1 or v >= 60_000, "-1 (unlimited) or >= 60000")]


def _check(section: Any, rules: Iterable[tuple[bool, str, str]]) -> None:
    """Raise the first broken ``(ok, field name, allowed)`` rule of ``section`` (its model validator's job)."""
    for ok, name, allowed in rules:
        if not ok:
            raise _Rule(allowed, setting=name, value=getattr(section, name))


def _positive(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _probability(value: float) -> bool:
    return 0 < value < 1


_T = TypeVar("_T")


# A section: frozen, unknown keys refused, fields validated on construction (``dataclasses.replace`` too).
@dataclass_transform(frozen_default=True, field_specifiers=(Field,))
def section(cls: type[_T]) -> type[_T]:
    """A section of the settings: a frozen pydantic dataclass that refuses unknown fields (the decorator is
    declared a dataclass transform so type checkers know the class's fields and constructor)."""
    return cast("type[_T]", dataclass(frozen=True, config=ConfigDict(extra="forbid"))(cls))


@section
class KafkaConfig:
    bootstrap_servers: Str = ""  # empty: start the embedded dev-stack broker
    events_topic: NonEmpty = "events"
    releases_topic: NonEmpty = "releases"
    dead_letter_topic: NonEmpty = "events-dlq"
    ingest_group_id: NonEmpty = "stream-dp-ingest"
    client_id: Str = "stream-dp"
    security_protocol: Annotated[Str, _one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")] = "PLAINTEXT"
    sasl_mechanism: Annotated[Str, _one_of("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
                                           allowed="empty or one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")] = ""
    sasl_username: Str = ""
    sasl_password: Str = dataclasses.field(default="", repr=False)  # secret: never printed (stream_dp.redact)
    ssl_cafile: Str = ""
    ssl_certfile: Str = ""
    ssl_keyfile: Str = ""
    # Apache Kafka refuses a group member whose session timeout is below the broker's
    # group.min.session.timeout.ms (default 6000): the worker could never join its group
    session_timeout_ms: Annotated[StrictInt, _rule(
        lambda v: v >= MIN_SESSION_TIMEOUT_MS,
        f">= {MIN_SESSION_TIMEOUT_MS} (Apache Kafka's default group.min.session.timeout.ms: a broker refuses "
        "shorter sessions, so the worker could never join its consumer group)")] = 6000
    heartbeat_interval_ms: AtLeastOne = 1000
    max_poll_records: AtLeastOne = 5000
    # a release record whose JSON is larger goes out as several part messages of at most this size
    release_message_max_bytes: Annotated[StrictInt, _rule(lambda v: 16384 <= v <= 100 << 20,
                                                          ">= 16384 and <= 104857600")] = DEFAULT_MESSAGE_MAX_BYTES
    # The topic contract (stream_dp/topics.py): what `stream-dp topics create` makes and every worker checks
    events_partitions: AtLeastOne = 4
    replication_factor: Annotated[StrictStr | StrictInt, _rule(
        lambda v: v == AUTO_REPLICAS if isinstance(v, str) else v >= 1,
        f'"{AUTO_REPLICAS}" (min(3, brokers)) or an integer >= 1')] = AUTO_REPLICAS
    min_insync_replicas: Annotated[StrictStr | StrictInt, _rule(
        lambda v: v == AUTO_REPLICAS if isinstance(v, str) else v >= 1,
        f'"{AUTO_REPLICAS}" (min(2, replication factor)) or an integer >= 1')] = AUTO_REPLICAS
    events_retention_ms: RetentionMs = -1
    releases_retention_ms: RetentionMs = -1
    dead_letter_retention_ms: RetentionMs = 604800000

    @model_validator(mode="after")
    def _rules(self) -> KafkaConfig:
        _check(self, [
            (len({self.events_topic, self.releases_topic, self.dead_letter_topic}) == 3, "releases_topic",
             "different from kafka.events_topic and kafka.dead_letter_topic"),
            (self.heartbeat_interval_ms < self.session_timeout_ms, "heartbeat_interval_ms",
             f">= 1 and < kafka.session_timeout_ms ({self.session_timeout_ms})"),
            (not (isinstance(self.min_insync_replicas, int) and isinstance(self.replication_factor, int))
             or self.min_insync_replicas <= self.replication_factor, "min_insync_replicas",
             f"<= kafka.replication_factor ({self.replication_factor}): more in-sync replicas than replicas "
             "refuses every write with NOT_ENOUGH_REPLICAS"),
        ])
        return self

    def client_options(self) -> dict[str, Any]:
        """Connection options for kafka-python clients (bootstrap, security)."""
        opts: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            opts["sasl_mechanism"] = self.sasl_mechanism
            opts["sasl_plain_username"] = self.sasl_username
            opts["sasl_plain_password"] = self.sasl_password
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, name):
                opts[name] = getattr(self, name)
        return opts


@section
class RedisConfig:
    # empty: start the embedded dev-stack redis-server; rediss:// for TLS
    url: Annotated[Str, _rule(lambda v: v == "" or v.startswith(("redis://", "rediss://", "unix://")),
                              "empty or a redis://, rediss:// or unix:// URL")] = ""
    key_prefix: Annotated[Str, _rule(lambda v: bool(v) and "{" not in v, "a non-empty string without braces")] = "sdp"
    username: Str = ""
    password: Str = dataclasses.field(default="", repr=False)  # secret: never printed (stream_dp.redact)
    ssl_ca_certs: Str = ""
    socket_timeout_seconds: Positive = 5.0
    allow_eviction: Flag = False  # run even if Redis's maxmemory-policy may evict keys (see connections.py)
    cluster: Flag = False  # redis.url names any node of a Redis Cluster: every process uses the cluster client
    # Replicas that must acknowledge a write the service acts on (a ledger charge before its release is
    # published) -- WAIT, see stream_dp/replication.py. "auto": 1 when the deployment has replicas, else 0.
    min_replicas_acked: Annotated[StrictStr | StrictInt, _rule(
        lambda v: v == AUTO_REPLICAS if isinstance(v, str) else v >= 0,
        f'"{AUTO_REPLICAS}" or an integer >= 0')] = AUTO_REPLICAS
    replication_timeout_ms: AtLeastOne = 1000  # how long one WAIT may block before it counts as an outage

    def __repr__(self) -> str:  # the URL may carry a password
        from stream_dp.redact import redact_url

        return (f"RedisConfig(url={redact_url(self.url)!r}, key_prefix={self.key_prefix!r}, "
                f"username={self.username!r}, ssl_ca_certs={self.ssl_ca_certs!r}, "
                f"socket_timeout_seconds={self.socket_timeout_seconds!r}, allow_eviction={self.allow_eviction!r}, "
                f"cluster={self.cluster!r}, min_replicas_acked={self.min_replicas_acked!r}, "
                f"replication_timeout_ms={self.replication_timeout_ms!r})")


@section
class EventsConfig:
    user_field: NonEmpty = "user"
    key_field: NonEmpty = "key"
    time_field: NonEmpty = "ts"  # epoch seconds; missing → the Kafka record timestamp
    max_key_bytes: AtLeastOne = 256
    max_user_bytes: AtLeastOne = 256
    max_record_bytes: AtLeastOne = 1048588  # larger records are dead-lettered (Apache Kafka's message.max.bytes)

    @model_validator(mode="after")
    def _rules(self) -> EventsConfig:
        _check(self, [(len({self.user_field, self.key_field, self.time_field}) == 3, "key_field",
                 "different from events.user_field and events.time_field")])
        return self


@section
class KeysConfig:
    # Unicode normalisation of keys (user ids are always NFC): "NFC" keeps compatibility look-alikes apart
    # (fullwidth "ｃａｆé", ligatures, superscripts); "NFKC" folds them into one key (docs/ingest.md, "Keys")
    normalization: Annotated[Str, _one_of("NFC", "NFKC")] = "NFC"


FIRST_START = "first-start"


def parse_window_start(text: str) -> int | None:
    """``windows.start`` as epoch seconds; None for ``"first-start"``. Raises ValueError when malformed.

    >>> parse_window_start("7200"), parse_window_start("1970-01-01T02:00:00Z"), parse_window_start("first-start")
    (7200, 7200, None)
    """
    if text == FIRST_START:
        return None
    if text.strip().isdigit():
        return int(text)
    from datetime import datetime, timezone

    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    seconds = when.timestamp()
    if seconds != int(seconds) or seconds < 0:
        raise ValueError(f"{text!r} is not a whole second at or after 1970-01-01")
    return int(seconds)


def _window_start_or_invalid(text: str) -> int | None:
    try:
        return parse_window_start(text)
    except ValueError:
        return -1


@section
class WindowsConfig:
    size_seconds: AtLeastOne = 3600
    allowed_lateness_seconds: NonNegative = 60
    idle_partition_timeout_seconds: Positive = 30.0
    retention_seconds: NonNegative = 86400  # keep a window's counts this long after its release is published
    # The public release schedule starts at this window: "first-start" (the window of the wall clock when
    # the deployment first starts, recorded once in Redis), or a window start as epoch seconds ("7200") or
    # ISO 8601 UTC ("2026-11-03T00:00:00Z"), a multiple of size_seconds.
    start: Str = FIRST_START
    # A body's event time may place an event only within [record time - max_event_delay_seconds,
    # record time + max_clock_skew_seconds] of its Kafka record timestamp (the trusted clock).
    max_event_delay_seconds: NonNegative = 30
    max_clock_skew_seconds: NonNegative = 5
    # Each window's state is split into this many shards by a stable hash of the user id (one hash tag
    # each, so a Redis Cluster spreads a window over its masters). Size it masters x a few (docs/scaling.md);
    # 1 (one node) keeps one tag per window. Recorded with the schedule: a restart with another value is refused.
    shards: AtLeastOne = 1
    # No Redis value of a window grows past this: a shard's bounding log is stored in segments of this size
    # (Redis caps one string at 512 MB; the default keeps every segment far below that).
    log_segment_bytes: Annotated[Count, _rule(lambda v: 1024 <= v <= 256 << 20,
                                              ">= 1024 and <= 268435456 (half of Redis's 512 MB string cap)")] = 64 << 20
    # Capacity of one (window, shard): the most bounding-log bytes it may hold (counted user-key pairs,
    # ~20-60 B each). Events past it are dead-lettered (reason window_shard_full), counted, and alerted on;
    # the privacy guarantee holds only below capacity (docs/privacy.md "Capacity"). Raise shards instead.
    max_shard_log_bytes: AtLeastOne = 4 << 30

    @model_validator(mode="after")
    def _rules(self) -> WindowsConfig:
        start = _window_start_or_invalid(self.start)
        _check(self, [
            (start is None or (start >= 0 and start % self.size_seconds == 0), "start",
             f"'{FIRST_START}', or a window start (epoch seconds or ISO 8601 UTC) that is a multiple of "
             f"windows.size_seconds ({self.size_seconds})"),
            (self.max_event_delay_seconds <= self.allowed_lateness_seconds, "max_event_delay_seconds",
             f">= 0 and <= windows.allowed_lateness_seconds ({self.allowed_lateness_seconds}): a delayed event "
             "must never be late only because other users' records moved the watermark"),
        ])
        return self


@section
class ContributionConfig:
    unit: Annotated[Str, _one_of("user", "event", allowed="'user' or 'event'")] = "user"  # "user" or "event"
    max_keys_per_user: AtLeastOne = 5  # Δ: distinct keys one user may touch per window (L0 bound)


@section
class IngestConfig:
    poll_timeout_ms: AtLeastOne = 500  # longest a poll blocks (bounds how fast a stop request is noticed)
    watermark_interval_seconds: Positive = 1.0  # recompute the global watermark at least this often when idle
    backoff_initial_seconds: Positive = 0.1  # first retry delay after Redis or the broker failed
    backoff_max_seconds: Number = 5.0  # cap of the exponential retry delay
    dead_letter_timeout_seconds: Positive = 30.0  # wait this long for the dead-letter topic before retrying a batch
    # producer max_request_size; larger dead letters: bounded form
    dead_letter_max_request_bytes: Annotated[Count, _rule(lambda v: v >= 16384,
                                                          ">= 16384 (room for a bounded dead letter)")] = 1048576
    bounding_cache_max_users: AtLeastOne = 2_000_000  # users cached for contribution bounding, all windows (~230 B each)
    catch_up_chunk_bytes: AtLeastOne = 4 << 20  # most bounding-log bytes per read when a cache catches up with Redis
    # the ingest consumer's Kafka client (stream_dp/ingest/consumers.py): "confluent" (librdkafka, fetching and
    # record decoding in C: about a quarter of kafka-python's CPU per event, bench/README.md) or "kafka-python"
    kafka_client: Annotated[Str, _one_of("kafka-python", "confluent")] = "confluent"
    # most KiB of records the confluent consumer fetches ahead of the loop (librdkafka's
    # queued.max.messages.kbytes, default there 64 MiB): bounds the loop's memory when it lags
    prefetch_max_kbytes: Annotated[StrictInt, _rule(lambda v: 1 <= v <= 2097151,
                                                    "in 1 .. 2097151 (librdkafka's range)")] = 2048

    @model_validator(mode="after")
    def _rules(self) -> IngestConfig:
        _check(self, [(self.backoff_max_seconds >= self.backoff_initial_seconds, "backoff_max_seconds",
                 f">= ingest.backoff_initial_seconds ({self.backoff_initial_seconds})")])
        return self


@section
class ReleaseConfig:
    """The release worker's loop (``stream-dp release``; ``--poll-seconds`` / ``--claim-ttl-seconds`` override)."""

    poll_interval_seconds: Positive = 0.5  # longest an idle pass waits for a window close notice (and a stop request waits)
    claim_ttl_seconds: Positive = 30.0  # a dead worker's claim on a window expires after this long
    backoff_initial_seconds: Positive = 0.2  # first retry delay after Redis or the broker failed
    backoff_max_seconds: Number = 10.0  # cap of the exponential retry delay
    # the publisher's Kafka client (stream_dp/release/producers.py): "confluent" (librdkafka sends from its own
    # C threads: one acknowledged produce ~0.25 ms against ~1-2 ms in the worker) or "kafka-python"
    kafka_client: Annotated[Str, _one_of("kafka-python", "confluent")] = "confluent"

    @model_validator(mode="after")
    def _rules(self) -> ReleaseConfig:
        _check(self, [(self.backoff_max_seconds >= self.backoff_initial_seconds, "backoff_max_seconds",
                 f">= release.backoff_initial_seconds ({self.backoff_initial_seconds})")])
        return self


Probability = Annotated[StrictFloat, _rule(_probability, "in (0, 1)")]


@section
class BudgetConfig:
    period_seconds: AtLeastOne = 86400  # length of a budget period (scope); 86400 = one UTC day
    epsilon: Positive = 10.0  # ε cap per user per period
    delta: Probability = 1e-5  # δ cap per user per period (includes delta_prime)
    delta_prime: Probability = 1e-7  # δ′ of the zCDP → (ε, δ) conversion
    lifetime_epsilon: Annotated[Number, _rule(lambda v: v >= 0, ">= 0 (0 disables it)")] = 0.0  # 0 = no lifetime scope
    lifetime_delta: Number = 0.0  # δ cap of the lifetime scope (incl. delta_prime); 0 = budget.delta
    allow_partial_period: Flag = False  # start even when fewer worst-case windows fit a period than it holds

    @model_validator(mode="after")
    def _rules(self) -> BudgetConfig:
        _check(self, [
            (self.delta_prime < self.delta, "delta_prime", f"< budget.delta ({self.delta})"),
            (self.lifetime_delta == 0 or self.delta_prime < self.lifetime_delta < 1, "lifetime_delta",
             f"0 (= budget.delta) or in (budget.delta_prime = {self.delta_prime}, 1)"),
        ])
        return self


# Release types: types and enumerations are checked always; ranges only when the type is enabled (a
# disabled type costs nothing, so its numbers do not matter). Each batch type's budget is its window budget
# (window_epsilon, window_delta): one release of the type in one window is (ε, δ)-DP on its own; the mechanism's
# parameters are calibrated from it (stream_dp/release/window_budget.py). Renamed keys: stream_dp/renamed_settings.py.
# Not to be confused with budget.delta_prime: the ledger's conversion δ′ for a whole period.


def _renamed(section_name: str, data: Any) -> Any:
    """A release section's ``mode="before"`` step: deprecated keys warned about and renamed (an old key and its
    replacement together: an error naming both)."""
    try:
        return renamed(section_name, data)
    except BothSet as exc:
        raise _Rule(str(exc), setting=exc.old, value=data[exc.old]) from None


def _legacy_number(value: float | None) -> bool:
    return value is None or _positive(value)


def _legacy_probability(value: float | None) -> bool:
    return value is None or _probability(value)


#: Release types whose published keys a released domain may learn from (``domain_sources``).
DOMAIN_SOURCE_TYPES = ("topk", "histogram", "argmax")
DOMAIN_ORDERS = ("recent", "frequent")


@section
class LearnedDomainSettings:
    """A release type's *released domain* (docs/privacy.md §10, :mod:`stream_dp.release.released_domain`): the keys
    that releases of ``domain_sources`` published in the last ``domain_memory_windows`` windows join the type's
    public domain -- a function of published records only. Fields shared by every type that takes a domain."""

    domain_from_released: Flag = False  # keys published by domain_sources in earlier windows join the domain
    domain_sources: tuple[StrictStr, ...] = ()  # release types learned from; [] = this type (alerts: topk)
    domain_memory_windows: Count = 4  # keys published in this many windows before the current one (then they age out)
    domain_max_keys: Count = 1000  # at most this many learned keys (the first by domain_order)
    domain_order: Annotated[Str, _one_of(*DOMAIN_ORDERS)] = "recent"  # recent: latest window first; frequent: most windows first

    @model_validator(mode="after")
    def _learned_domain_rules(self) -> LearnedDomainSettings:
        if self.domain_from_released:
            _check(self, [(self.domain_memory_windows >= 1, "domain_memory_windows", ">= 1"),
                          (self.domain_max_keys >= 1, "domain_max_keys", ">= 1"),
                          (all(t in DOMAIN_SOURCE_TYPES for t in self.domain_sources), "domain_sources",
                           f"release types among {', '.join(DOMAIN_SOURCE_TYPES)}")])
        return self


@section
class TopkConfig(LearnedDomainSettings):
    enabled: Flag = False
    k: Count = 10
    k_bar: Count = 100
    window_epsilon: Number = 0.8  # window budget: ε of one release (its worst case, k outcomes)
    # window budget: δ of one release (half of it the ⊥ rule's or, with a domain and threshold discovery, the threshold's)
    window_delta: Number = 2e-7
    domain: tuple[StrictStr, ...] = ()  # public keys tracked by full-domain Gumbel top-k (no δ, no ⊥)
    domain_file: Str = ""  # a file of public keys, one per line, added to domain
    # with a domain: how keys outside it are found -- threshold (a discrete-Gaussian histogram of the keys outside
    # the domain, keys above its threshold) or limited_domain (limited-domain top-k, the k̄-based ⊥ rule)
    discovery: Annotated[Str, _one_of("threshold", "limited_domain")] = "threshold"
    discovery_share: Number = 0.8  # with a domain: share of the zCDP ρ spent discovering keys outside it (docs/evaluation 2b)
    epsilon: Number | None = None  # deprecated (renamed_settings.py): ε per outcome
    delta: Number | None = None  # deprecated: δ of the ⊥ rule (with a domain and threshold discovery: of the threshold)

    @property
    def has_domain(self) -> bool:
        return bool(self.domain or self.domain_file or self.domain_from_released)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return _renamed("releases.topk", data)

    @model_validator(mode="after")
    def _rules(self) -> TopkConfig:
        if self.enabled:
            only_released = self.domain_from_released and not self.domain and not self.domain_file
            _check(self, [(self.k >= 1, "k", ">= 1"), (self.k_bar >= self.k, "k_bar", f">= releases.topk.k ({self.k})"),
                          (_positive(self.window_epsilon), "window_epsilon", "> 0"),
                          (_probability(self.window_delta), "window_delta", "in (0, 1)"),
                          (_legacy_number(self.epsilon), "epsilon", "> 0"),
                          (_legacy_probability(self.delta), "delta", "in (0, 1)"),
                          (0 <= self.discovery_share < 1, "discovery_share", "in [0, 1)"),
                          (self.discovery_share > 0 or not only_released, "discovery_share",
                           "> 0 when the domain is only keys released earlier")])
        return self


@section
class AlertsConfig(LearnedDomainSettings):
    enabled: Flag = False
    watchlist: tuple[StrictStr, ...] = ()
    include_released_topk: Flag = True
    threshold: Number = 100.0
    k: Count = 10  # answers per SVT instance (c)
    epsilon: Number = 0.5  # per SVT instance
    # geometric (integer outputs, the default), laplace, exponential
    noise: Annotated[Str, _one_of(*NOISES)] = "geometric"
    theta: Number = 0.0  # 0: the seed's optimum
    confidence: Number = 0.95  # of the lower confidence bound
    max_instances_per_period: Count = 2  # SVT instances opened per budget period at most; 0 = no limit

    @model_validator(mode="after")
    def _rules(self) -> AlertsConfig:
        if self.enabled:
            _check(self, [
                (self.k >= 1, "k", ">= 1"),
                (_positive(self.epsilon), "epsilon", "> 0"),
                (math.isfinite(self.threshold), "threshold", "a finite number"),
                (self.noise != "geometric" or float(self.threshold).is_integer(), "threshold",
                 "an integer with noise = 'geometric' (integer outputs)"),
                (0 <= self.theta < 1, "theta", "in [0, 1) (0: the seed's optimum)"),
                (_probability(self.confidence), "confidence", "in (0, 1)"),
                (self.max_instances_per_period >= 0, "max_instances_per_period", ">= 0 (0: no limit)"),
                (bool(self.watchlist) or self.include_released_topk, "watchlist",
                 "non-empty when include_released_topk is false"),
            ])
        return self


@section
class SampleConfig:
    enabled: Flag = False
    scheme: Annotated[Str, _one_of("pps", "ppswor", "none")] = "pps"  # pps (priority), ppswor, none
    tau: Number = 0.01
    window_epsilon: Number = 0.5  # window budget (calibrated per key to ε / max_keys_per_user)
    window_delta: Number = 1e-7  # window budget (per key δ / max_keys_per_user)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return _renamed("releases.sample", data)

    @model_validator(mode="after")
    def _rules(self) -> SampleConfig:
        if self.enabled:
            _check(self, [(_positive(self.tau), "tau", "> 0"), (_positive(self.window_epsilon), "window_epsilon", "> 0"),
                    (_probability(self.window_delta), "window_delta", "in (0, 1)")])
        return self


@section
class ArgmaxConfig:
    enabled: Flag = False
    window_epsilon: Number = 0.5  # window budget of the (ε, δ)-DP release
    window_delta: Number = 1e-6

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return _renamed("releases.argmax", data)

    @model_validator(mode="after")
    def _rules(self) -> ArgmaxConfig:
        if self.enabled:
            _check(self, [(_positive(self.window_epsilon), "window_epsilon", "> 0"),
                          (_probability(self.window_delta), "window_delta", "in (0, 1)")])
        return self


@section
class WatchTopkConfig:
    enabled: Flag = False
    k: Count = 5
    window_epsilon: Number = 0.5  # window budget, pure ε-DP
    # geometric (discrete Laplace, integer gaps; the default), laplace, exponential
    noise: Annotated[Str, _one_of(*NOISES, allowed="one of geometric, laplace, exponential")] = "geometric"

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return _renamed("releases.watch_topk", data)

    @model_validator(mode="after")
    def _rules(self) -> WatchTopkConfig:
        if self.enabled:
            _check(self, [(self.k >= 1, "k", ">= 1"), (_positive(self.window_epsilon), "window_epsilon", "> 0")])
        return self


@section
class HistogramConfig(LearnedDomainSettings):
    # on by default: a domain learned from what earlier windows published costs nothing and wins on small windows
    # (docs/privacy.md §10; docs/evaluation, experiment 2b)
    domain_from_released: Flag = True
    enabled: Flag = True
    # gaussian: discrete Gaussian, zCDP (L2 sensitivity √Δ); laplace: discrete Laplace, pure ε (L1 sensitivity Δ)
    # -- better for small Δ (docs/evaluation; stream-dp budget plan --expected-users recommends one)
    noise: Annotated[Str, _one_of("gaussian", "laplace")] = "gaussian"
    # gaussian only -- zcdp: σ by the ρ-zCDP conversion at half the window δ, τ on the other half (charged as ρ-zCDP);
    # exact: σ and τ together by the thresholded histogram's exact privacy profile at the window budget
    # (docs/privacy.md §8c; both guarantees charged: lower τ and σ for one window, more ε and δ over a period)
    calibration: Annotated[Str, _one_of("zcdp", "exact")] = "zcdp"
    # uniform: a user adds 1 to each of her ≤ Δ keys; per_user: a user on m keys adds ⌊16·√(Δ/m)⌋/16 to each (her
    # L2 norm stays ≤ √Δ), so users on fewer than Δ keys weigh more at the same cost (docs/privacy.md §8d;
    # gaussian noise, zcdp calibration and contribution.unit = "user" only); released counts are weighted counts
    weighting: Annotated[Str, _one_of("uniform", "per_user")] = "uniform"
    window_epsilon: Number = 1.0  # window budget: ε of one release (sets the noise)
    window_delta: Number = 2e-7  # window budget: δ of one release (gaussian zcdp: half the threshold's, half σ's)
    max_keys: Count = 1000  # at most this many keys per release (the largest noisy counts above threshold)
    confidence: Number = 0.95  # of the two-sided interval released with each noisy count
    domain: tuple[StrictStr, ...] = ()  # public keys: always released with a noisy count, no threshold needed
    domain_file: Str = ""  # a file of public keys, one per line, added to domain
    epsilon: Number | None = None  # deprecated (renamed_settings.py): ε at δ′ = budget.delta_prime
    delta: Number | None = None  # deprecated: δ of the threshold

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return _renamed("releases.histogram", data)

    @model_validator(mode="after")
    def _rules(self) -> HistogramConfig:
        if self.enabled:
            _check(self, [(_positive(self.window_epsilon), "window_epsilon", "> 0"),
                          (_probability(self.window_delta), "window_delta", "in (0, 1)"),
                          (_legacy_number(self.epsilon), "epsilon", "> 0"),
                          (_legacy_probability(self.delta), "delta", "in (0, 1)"),
                          (self.max_keys >= 1, "max_keys", ">= 1"),
                          (_probability(self.confidence), "confidence", "in (0, 1)"),
                          (self.calibration == "zcdp" or self.noise == "gaussian", "calibration",
                           '"zcdp" with noise = "laplace" (the exact profile is the Gaussian\'s)'),
                          (self.weighting == "uniform" or (self.noise, self.calibration) == ("gaussian", "zcdp"),
                           "weighting", '"uniform" unless noise = "gaussian" and calibration = "zcdp" (§8d)')])
        return self


@section
class ReleasesConfig:
    topk: TopkConfig = dataclasses.field(default_factory=TopkConfig)
    alerts: AlertsConfig = dataclasses.field(default_factory=AlertsConfig)
    sample: SampleConfig = dataclasses.field(default_factory=SampleConfig)
    argmax: ArgmaxConfig = dataclasses.field(default_factory=ArgmaxConfig)
    watch_topk: WatchTopkConfig = dataclasses.field(default_factory=WatchTopkConfig)
    histogram: HistogramConfig = dataclasses.field(default_factory=HistogramConfig)

    def enabled(self) -> list[str]:
        """The release types this config computes, in :data:`RELEASE_TYPES` order (top-k first: alerts
        watch what it released)."""
        return [name for name in RELEASE_TYPES if getattr(self, name).enabled]

    def domain_sources(self, name: str) -> tuple[str, ...]:
        """The release types whose published keys ``releases.<name>``'s released domain learns from
        (``domain_sources``; empty: the type itself, for alerts: topk)."""
        own = getattr(self, name).domain_sources
        return tuple(dict.fromkeys(own)) if own else (("topk",) if name == "alerts" else (name,))

    @model_validator(mode="after")
    def _sources_enabled(self) -> ReleasesConfig:
        for name in ("topk", "alerts", "histogram"):
            section = getattr(self, name)
            if section.enabled and section.domain_from_released:
                off = [t for t in self.domain_sources(name) if not getattr(self, t).enabled]
                if off:
                    raise _Rule(f"enabled release types (releases.{', releases.'.join(off)} not enabled: "
                                "it would never publish a key to learn from)",
                                setting=f"{name}.domain_sources", value=list(self.domain_sources(name)))
        return self


#: Every release type, in release order: one ``[releases.<type>]`` section each (the one list of them).
RELEASE_TYPES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ReleasesConfig))


@section
class MetricsConfig:
    port: Port = 9108  # 0 disables the /metrics endpoint
    host: Address = "127.0.0.1"  # loopback by default: an operator-only surface; Prometheus elsewhere needs 0.0.0.0


@section
class DashboardConfig:
    port: Port = 8050  # `stream-dp dashboard` serves the page and its JSON API here; 0: any free port
    host: Address = "127.0.0.1"  # loopback by default: expose it on purpose (it shows only published releases)


@section
class Config:
    kafka: KafkaConfig = dataclasses.field(default_factory=KafkaConfig)
    redis: RedisConfig = dataclasses.field(default_factory=RedisConfig)
    events: EventsConfig = dataclasses.field(default_factory=EventsConfig)
    keys: KeysConfig = dataclasses.field(default_factory=KeysConfig)
    windows: WindowsConfig = dataclasses.field(default_factory=WindowsConfig)
    contribution: ContributionConfig = dataclasses.field(default_factory=ContributionConfig)
    ingest: IngestConfig = dataclasses.field(default_factory=IngestConfig)
    release: ReleaseConfig = dataclasses.field(default_factory=ReleaseConfig)
    budget: BudgetConfig = dataclasses.field(default_factory=BudgetConfig)
    releases: ReleasesConfig = dataclasses.field(default_factory=ReleasesConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    dashboard: DashboardConfig = dataclasses.field(default_factory=DashboardConfig)

    def replace(self, **sections: Any) -> "Config":
        """A copy with whole sections replaced (tests and the demo use this)."""
        return dataclasses.replace(self, **sections)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTIONS = tuple(f.name for f in dataclasses.fields(Config))


# --------------------------------------------------------------------------------------------------
# Sources: the file's mapping, then STREAM_DP_* overrides (pydantic-settings merges them)
# --------------------------------------------------------------------------------------------------


def _setting_type(parts: list[str]) -> Any:
    """The declared type of the setting at ``parts`` (e.g. ``["kafka", "client_id"]``), or None if unknown."""
    typ: Any = Config
    for part in parts:
        if not dataclasses.is_dataclass(typ):
            return None
        hints = get_type_hints(typ)
        if part not in hints:
            return None
        typ = hints[part]
    return typ


def _parse_env_value(raw: str, typ: Any = None) -> Any:
    """An environment value: TOML syntax where it parses; string settings keep the raw text.

    A string setting takes the text as is (so ``STREAM_DP_REDIS__PASSWORD=12345`` stays ``"12345"``), or
    the string a quoted TOML string denotes.

    >>> _parse_env_value("20"), _parse_env_value("12345", str), _parse_env_value('"a b"', str)
    (20, '12345', 'a b')
    """
    try:
        parsed = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    if typ is str and not isinstance(parsed, str):
        return raw
    return parsed


def _read_secret_file(variable: str, path: str) -> str:
    """The text of the secret file ``path`` named by ``variable`` (one trailing newline stripped)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"environment variable {variable} names {path!r}, which cannot be read "
                          f"({exc.strerror or type(exc).__name__})") from None
    return text[:-1] if text.endswith("\n") else text


def environment_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``STREAM_DP_*`` overrides in ``environ`` as a nested mapping, and dotted setting → variable name.

    Tool variables (:data:`TOOL_VARIABLES`, ``STREAM_DP_TEST_*``) are skipped; ``…_FILE`` variables of
    :data:`FILE_SETTINGS` read the named file."""
    data: dict[str, Any] = {}
    applied: dict[str, str] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or name in TOOL_VARIABLES or name.startswith("STREAM_DP_TEST_"):
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        if len(parts) < 2 or not all(parts):
            raise ConfigError(f"environment variable {name} must look like {ENV_PREFIX}SECTION__KEY")
        from_file = parts[-1].endswith("_file") and ".".join(parts)[: -len("_file")] in FILE_SETTINGS
        if from_file:
            parts[-1] = parts[-1][: -len("_file")]
        node = data
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} overrides a value, not a table")
        node[parts[-1]] = _read_secret_file(name, raw) if from_file else _parse_env_value(raw, _setting_type(parts))
        applied[".".join(parts)] = name
    return data, applied


_OVERRIDES: ContextVar[Mapping[str, Any]] = ContextVar("stream_dp_config_overrides", default=MappingProxyType({}))


class _EnvironmentOverrides(PydanticBaseSettingsSource):
    """pydantic-settings source for ``STREAM_DP_<SECTION>__<KEY>``: the overrides that
    :func:`environment_overrides` read for the load in progress (our syntax: TOML values, ``*_FILE``
    secrets, tool variables skipped; pydantic-settings' own env parsing would coerce ``"yes"`` to true)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return _OVERRIDES.get().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_OVERRIDES.get())


class _Settings(BaseSettings):
    """:class:`Config`'s sections as settings whose sources are, highest priority first: the environment
    overrides, then the mapping given to the constructor (the TOML file's)."""

    model_config = SettingsConfigDict(extra="forbid")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (_EnvironmentOverrides(settings_cls), init_settings)


Settings = create_model(  # the fields are Config's sections, declared once (on Config)
    "Settings", __base__=_Settings,
    **{f.name: (get_type_hints(Config)[f.name], Field(default_factory=cast(Callable[[], Any], f.default_factory)))  # type: ignore[call-overload]
       for f in dataclasses.fields(Config)})


# --------------------------------------------------------------------------------------------------
# Errors that name the setting and the variable
# --------------------------------------------------------------------------------------------------

_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "dataclass_type": "a table", "dict_type": "a table",
    "tuple_type": "an array of strings",
}


def _describe(error: Mapping[str, Any], applied: Mapping[str, str]) -> str:
    """One pydantic error as ``<setting> must be <allowed>, got <value> (set by environment variable X)``."""
    loc = [str(part) for part in error["loc"]]
    kind = error["type"]
    if kind in {"unexpected_keyword_argument", "extra_forbidden"}:
        section_path = loc[:-1]
        where = f"[{'.'.join(section_path)}]" if section_path else "the top level"
        known = _known_names(section_path)
        message = f"unknown setting(s) {loc[-1]} in {where}; known: {', '.join(known)}"
        return _with_variable(message, ".".join(loc), applied)
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, _Rule):
        allowed = cause.allowed
        if cause.setting:
            loc = [*loc, cause.setting]
            value: Any = cause.value
        else:
            value = error.get("input")
    else:
        if loc and loc[-1].isdigit():  # an item of an array of strings
            loc = loc[:-1]
            kind = "tuple_type"
        allowed = _TYPE_WORDS.get(kind, error["msg"].removeprefix("Input should be ").removeprefix("Value error, "))
        value = error.get("input")
    setting = ".".join(loc)
    if setting in SECRET_SETTINGS and allowed == "a string":
        message = f"{setting} must be a string (value not shown: it is secret)"
    elif setting in FILE_SETTINGS:  # secret, or a URL that may carry one
        message = f"{setting} must be {allowed} (value not shown: it may hold a secret)"
    else:
        message = f"{setting} must be {allowed}, got {_plain(value)!r}"
    return _with_variable(message, setting, applied)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _known_names(section_path: list[str]) -> list[str]:
    typ = _setting_type(section_path) if section_path else Config
    return sorted(f.name for f in dataclasses.fields(typ)) if dataclasses.is_dataclass(typ) else []


def _with_variable(message: str, setting: str, applied: Mapping[str, str]) -> str:
    """``message`` plus the environment variable(s) that set ``setting`` (or a setting inside it)."""
    variables = [v for name, v in applied.items() if name == setting or name.startswith(setting + ".")]
    return f"{message} (set by environment variable {', '.join(variables)})" if variables else message


def _config_error(exc: ValidationError, applied: Mapping[str, str]) -> ConfigError:
    """All of a load's errors, one per setting (an array's bad items count once), first-found first."""
    messages: dict[str, str] = {}
    for error in exc.errors():
        message = _describe(error, applied)
        messages.setdefault(message.split(" ", 1)[0], message)
    return ConfigError("; ".join(messages.values()))


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------

# The default file ships inside the package (stream_dp/defaults/stream-dp.toml is a symlink to
# config/stream-dp.toml in the source tree; wheels carry a copy), so a non-editable install finds it too.
DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent / "defaults" / "stream-dp.toml"


def config_from_mapping(data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None) -> Config:
    """Build and validate a :class:`Config` from a nested mapping plus environment overrides.

    >>> cfg = config_from_mapping({"releases": {"topk": {"k": 5}}}, environ={"STREAM_DP_RELEASES__TOPK__K_BAR": "50"})
    >>> (cfg.releases.topk.k, cfg.releases.topk.k_bar)
    (5, 50)
    """
    overrides, applied = environment_overrides(os.environ if environ is None else environ)
    data = shadowed_by(dict(data), set(applied))  # an environment variable overrides either name of a renamed key
    for name, value in data.items():
        if name in SECTIONS and not isinstance(value, Mapping) and not dataclasses.is_dataclass(value):
            raise ConfigError(f"{name} must be a table, got {type(value).__name__}")
    token = _OVERRIDES.set(overrides)
    try:
        settings = Settings(**_deep_copy(data))
    except ValidationError as exc:
        raise _config_error(exc, applied) from None
    finally:
        _OVERRIDES.reset(token)
    return Config(**{name: getattr(settings, name) for name in SECTIONS})


def with_settings(config: Config, section: str, **changes: Any) -> Config:
    """``config`` with settings of one section changed, validated like a file's values (a failure is a
    :class:`ConfigError` naming the setting, e.g. a command-line flag's)."""
    data = in_effect(config.to_dict())
    data[section].update(changes)
    return config_from_mapping(data, environ={})


def load_config(path: str | os.PathLike[str] | None = None, *,
                environ: Mapping[str, str] | None = None) -> Config:
    """Load a TOML config file (default: the packaged ``config/stream-dp.toml``), apply env overrides, validate."""
    data: dict[str, Any] = {}
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    if path is not None:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file {os.fspath(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {os.fspath(path)!r} is not valid TOML: {exc}") from None
    return config_from_mapping(data, environ=environ)


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}
