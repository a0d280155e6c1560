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
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

ENV_PREFIX = "STREAM_DP_"
# settings that may be read from a file named by STREAM_DP_<SECTION>__<KEY>_FILE; their values are secret
FILE_SETTINGS = ("kafka.sasl_password", "redis.password", "redis.url")
SECRET_SETTINGS = ("kafka.sasl_password", "redis.password")

#: ``STREAM_DP_*`` variables of the tools, not settings (the dev stack's binaries and state file, the
#: workers' log level, the test suite's external services): never read as config overrides.
TOOL_VARIABLES = frozenset({"STREAM_DP_LOG_LEVEL", "STREAM_DP_TANSU", "STREAM_DP_REDIS_SERVER",
                            "STREAM_DP_DEVSTACK_STATE"})


class ConfigError(ValueError):
    """A setting is missing, unknown, of the wrong type, or out of its allowed range."""


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str = ""  # empty: start the embedded dev-stack broker
    events_topic: str = "events"
    releases_topic: str = "releases"
    dead_letter_topic: str = "events-dlq"
    ingest_group_id: str = "stream-dp-ingest"
    client_id: str = "stream-dp"
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanism: str = ""  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)  # secret: never printed (stream_dp.redact)
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    max_poll_records: int = 5000

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


@dataclass(frozen=True)
class RedisConfig:
    url: str = ""  # empty: start the embedded dev-stack redis-server; rediss:// for TLS
    key_prefix: str = "sdp"
    username: str = ""
    password: str = field(default="", repr=False)  # secret: never printed (stream_dp.redact)
    ssl_ca_certs: str = ""
    socket_timeout_seconds: float = 5.0
    allow_eviction: bool = False  # run even if Redis's maxmemory-policy may evict keys (see connections.py)

    def __repr__(self) -> str:  # the URL may carry a password
        from stream_dp.redact import redact_url

        return (f"RedisConfig(url={redact_url(self.url)!r}, key_prefix={self.key_prefix!r}, "
                f"username={self.username!r}, ssl_ca_certs={self.ssl_ca_certs!r}, "
                f"socket_timeout_seconds={self.socket_timeout_seconds!r}, allow_eviction={self.allow_eviction!r})")


@dataclass(frozen=True)
class EventsConfig:
    user_field: str = "user"
    key_field: str = "key"
    time_field: str = "ts"  # epoch seconds; missing → the Kafka record timestamp
    max_key_bytes: int = 256
    max_user_bytes: int = 256
    max_record_bytes: int = 1048588  # larger records are dead-lettered (Apache Kafka's message.max.bytes)


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


@dataclass(frozen=True)
class WindowsConfig:
    size_seconds: int = 3600
    allowed_lateness_seconds: int = 60
    idle_partition_timeout_seconds: float = 30.0
    retention_seconds: int = 86400  # keep a window's counts this long after its release is published
    # The public release schedule starts at this window: "first-start" (the window of the wall clock when
    # the deployment first starts, recorded once in Redis), or a window start as epoch seconds ("7200") or
    # ISO 8601 UTC ("2026-11-03T00:00:00Z"), a multiple of size_seconds.
    start: str = FIRST_START
    # A body's event time may place an event only within [record time - max_event_delay_seconds,
    # record time + max_clock_skew_seconds] of its Kafka record timestamp (the trusted clock).
    max_event_delay_seconds: int = 30
    max_clock_skew_seconds: int = 5


@dataclass(frozen=True)
class ContributionConfig:
    unit: str = "user"  # "user" (default) or "event"
    max_keys_per_user: int = 5  # Δ: distinct keys one user may touch per window (L0 bound)


@dataclass(frozen=True)
class IngestConfig:
    poll_timeout_ms: int = 500  # longest a poll blocks (bounds how fast a stop request is noticed)
    watermark_interval_seconds: float = 1.0  # recompute the global watermark at least this often when idle
    backoff_initial_seconds: float = 0.1  # first retry delay after Redis or the broker failed
    backoff_max_seconds: float = 5.0  # cap of the exponential retry delay
    dead_letter_timeout_seconds: float = 30.0  # wait this long for the dead-letter topic before retrying a batch
    dead_letter_max_request_bytes: int = 1048576  # producer max_request_size; larger dead letters: bounded form


@dataclass(frozen=True)
class ReleaseConfig:
    """The release worker's loop (``stream-dp release``; ``--poll-seconds`` / ``--claim-ttl-seconds`` override)."""

    poll_interval_seconds: float = 0.5  # wait between passes when no window is due
    claim_ttl_seconds: float = 30.0  # a dead worker's claim on a window expires after this long
    backoff_initial_seconds: float = 0.2  # first retry delay after Redis or the broker failed
    backoff_max_seconds: float = 10.0  # cap of the exponential retry delay


@dataclass(frozen=True)
class BudgetConfig:
    period_seconds: int = 86400  # length of a budget period (scope); 86400 = one UTC day
    epsilon: float = 10.0  # ε cap per user per period
    delta: float = 1e-5  # δ cap per user per period (includes delta_prime)
    delta_prime: float = 1e-7  # δ′ of the zCDP → (ε, δ) conversion
    lifetime_epsilon: float = 0.0  # optional cap across all periods; 0 = no lifetime scope
    lifetime_delta: float = 0.0  # δ cap of the lifetime scope (incl. delta_prime); 0 = budget.delta
    allow_partial_period: bool = False  # start even when fewer worst-case windows fit a period than it holds


@dataclass(frozen=True)
class TopkConfig:
    enabled: bool = True
    k: int = 10
    k_bar: int = 100
    epsilon: float = 0.1  # per outcome
    delta: float = 1e-7  # δ of the ⊥ rule, per release


@dataclass(frozen=True)
class AlertsConfig:
    enabled: bool = True
    watchlist: tuple[str, ...] = ()
    include_released_topk: bool = True
    threshold: float = 100.0
    k: int = 10  # answers per SVT instance (c)
    epsilon: float = 0.5  # per SVT instance
    noise: str = "geometric"  # geometric (integer outputs, the default), laplace, exponential
    theta: float = 0.0  # 0: the seed's optimum
    confidence: float = 0.95  # of the lower confidence bound
    max_instances_per_period: int = 2  # SVT instances opened per budget period at most; 0 = no limit


@dataclass(frozen=True)
class SampleConfig:
    enabled: bool = True
    scheme: str = "pps"  # pps (priority), ppswor, none
    tau: float = 0.01
    epsilon: float = 0.5
    delta: float = 1e-7


@dataclass(frozen=True)
class ArgmaxConfig:
    enabled: bool = False
    epsilon: float = 0.5
    delta: float = 1e-6


@dataclass(frozen=True)
class WatchTopkConfig:
    enabled: bool = False
    k: int = 5
    epsilon: float = 0.5
    noise: str = "geometric"  # geometric (discrete Laplace, integer gaps; the default), laplace, exponential


@dataclass(frozen=True)
class ReleasesConfig:
    topk: TopkConfig = field(default_factory=TopkConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    argmax: ArgmaxConfig = field(default_factory=ArgmaxConfig)
    watch_topk: WatchTopkConfig = field(default_factory=WatchTopkConfig)


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 9108  # 0 disables the /metrics endpoint
    host: str = "0.0.0.0"


@dataclass(frozen=True)
class DashboardConfig:
    port: int = 8050  # `stream-dp dashboard` serves the page and its JSON API here; 0: any free port
    host: str = "127.0.0.1"  # loopback by default: expose it on purpose (it shows only published releases)


@dataclass(frozen=True)
class Config:
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    events: EventsConfig = field(default_factory=EventsConfig)
    windows: WindowsConfig = field(default_factory=WindowsConfig)
    contribution: ContributionConfig = field(default_factory=ContributionConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    release: ReleaseConfig = field(default_factory=ReleaseConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    releases: ReleasesConfig = field(default_factory=ReleasesConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)

    def replace(self, **sections: Any) -> "Config":
        """A copy with whole sections replaced (tests and the demo use this)."""
        return dataclasses.replace(self, **sections)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------------
# Building from mappings
# --------------------------------------------------------------------------------------------------


def _coerce(path: str, value: Any, typ: Any) -> Any:
    if path in SECRET_SETTINGS and not isinstance(value, str):
        raise ConfigError(f"{path} must be a string (value not shown: it is secret)")
    origin = getattr(typ, "__origin__", None)
    if dataclasses.is_dataclass(typ):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path} must be a table, got {type(value).__name__}")
        return _build(path, typ, value)
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false, got {value!r}")
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be an integer, got {value!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path} must be a number, got {value!r}")
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path} must be a string, got {value!r}")
    if origin is tuple:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{path} must be an array of strings, got {value!r}")
    raise ConfigError(f"{path}: unsupported setting type {typ!r}")  # pragma: no cover


def _build(path: str, cls: type, data: Mapping[str, Any]) -> Any:
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        where = f"[{path}]" if path else "the top level"
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)} in {where}; known: {', '.join(sorted(names))}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(f"{path}.{name}" if path else name, value, hints[name])
    return cls(**kwargs)


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


def _apply_env(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """Apply ``STREAM_DP_*`` overrides to ``data``; returns dotted setting → environment variable name."""
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
    return applied


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


def _require(ok: bool, setting: str, allowed: str, value: Any) -> None:
    if not ok:
        if setting in FILE_SETTINGS:  # secret, or a URL that may carry one
            raise ConfigError(f"{setting} must be {allowed} (value not shown: it may hold a secret)")
        raise ConfigError(f"{setting} must be {allowed}, got {value!r}")


def _positive(setting: str, value: float) -> None:
    _require(isinstance(value, (int, float)) and math.isfinite(value) and value > 0, setting, "> 0", value)


def _probability(setting: str, value: float) -> None:
    _require(0 < value < 1, setting, "in (0, 1)", value)


def validate(config: Config) -> Config:
    """Check every range; raise :class:`ConfigError` naming the first setting at fault."""
    k, w, c, b, r = config.kafka, config.windows, config.contribution, config.budget, config.releases
    _require(k.security_protocol in {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"},
             "kafka.security_protocol", "one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL", k.security_protocol)
    _require(k.sasl_mechanism in {"", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"},
             "kafka.sasl_mechanism", "empty or one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", k.sasl_mechanism)
    for name in ("events_topic", "releases_topic", "dead_letter_topic", "ingest_group_id"):
        _require(bool(getattr(k, name)), f"kafka.{name}", "a non-empty string", getattr(k, name))
    _require(len({k.events_topic, k.releases_topic, k.dead_letter_topic}) == 3, "kafka.releases_topic",
             "different from kafka.events_topic and kafka.dead_letter_topic", k.releases_topic)
    _require(k.max_poll_records >= 1, "kafka.max_poll_records", ">= 1", k.max_poll_records)
    _require(k.session_timeout_ms >= 1, "kafka.session_timeout_ms", ">= 1", k.session_timeout_ms)
    _require(1 <= k.heartbeat_interval_ms < k.session_timeout_ms, "kafka.heartbeat_interval_ms",
             f">= 1 and < kafka.session_timeout_ms ({k.session_timeout_ms})", k.heartbeat_interval_ms)
    _require(config.redis.url == "" or config.redis.url.startswith(("redis://", "rediss://", "unix://")),
             "redis.url", "empty or a redis://, rediss:// or unix:// URL", config.redis.url)
    _positive("redis.socket_timeout_seconds", config.redis.socket_timeout_seconds)
    ev = config.events
    for name in ("user_field", "key_field", "time_field"):
        _require(bool(getattr(ev, name)), f"events.{name}", "a non-empty string", getattr(ev, name))
    _require(len({ev.user_field, ev.key_field, ev.time_field}) == 3, "events.key_field",
             "different from events.user_field and events.time_field", ev.key_field)
    _require(ev.max_user_bytes >= 1, "events.max_user_bytes", ">= 1", ev.max_user_bytes)
    _require(bool(config.redis.key_prefix) and "{" not in config.redis.key_prefix,
             "redis.key_prefix", "a non-empty string without braces", config.redis.key_prefix)
    _require(ev.max_key_bytes >= 1, "events.max_key_bytes", ">= 1", ev.max_key_bytes)
    _require(ev.max_record_bytes >= 1, "events.max_record_bytes", ">= 1", ev.max_record_bytes)
    _require(w.size_seconds >= 1, "windows.size_seconds", ">= 1", w.size_seconds)
    _require(w.allowed_lateness_seconds >= 0, "windows.allowed_lateness_seconds", ">= 0", w.allowed_lateness_seconds)
    _require(w.idle_partition_timeout_seconds > 0, "windows.idle_partition_timeout_seconds", "> 0",
             w.idle_partition_timeout_seconds)
    _require(w.retention_seconds >= 0, "windows.retention_seconds", ">= 0", w.retention_seconds)
    try:
        start = parse_window_start(w.start)
    except ValueError:
        start = -1
    _require(start is None or (start >= 0 and start % w.size_seconds == 0), "windows.start",
             f"'{FIRST_START}', or a window start (epoch seconds or ISO 8601 UTC) that is a multiple of "
             f"windows.size_seconds ({w.size_seconds})", w.start)
    _require(w.max_clock_skew_seconds >= 0, "windows.max_clock_skew_seconds", ">= 0", w.max_clock_skew_seconds)
    _require(0 <= w.max_event_delay_seconds <= w.allowed_lateness_seconds, "windows.max_event_delay_seconds",
             f">= 0 and <= windows.allowed_lateness_seconds ({w.allowed_lateness_seconds}): a delayed event "
             "must never be late only because other users' records moved the watermark",
             w.max_event_delay_seconds)
    i = config.ingest
    _require(i.poll_timeout_ms >= 1, "ingest.poll_timeout_ms", ">= 1", i.poll_timeout_ms)
    _positive("ingest.watermark_interval_seconds", i.watermark_interval_seconds)
    _positive("ingest.backoff_initial_seconds", i.backoff_initial_seconds)
    _require(i.backoff_max_seconds >= i.backoff_initial_seconds, "ingest.backoff_max_seconds",
             f">= ingest.backoff_initial_seconds ({i.backoff_initial_seconds})", i.backoff_max_seconds)
    _positive("ingest.dead_letter_timeout_seconds", i.dead_letter_timeout_seconds)
    _require(i.dead_letter_max_request_bytes >= 16384, "ingest.dead_letter_max_request_bytes", ">= 16384 (room for "
             "a bounded dead letter)", i.dead_letter_max_request_bytes)
    rl = config.release
    _positive("release.poll_interval_seconds", rl.poll_interval_seconds)
    _positive("release.claim_ttl_seconds", rl.claim_ttl_seconds)
    _positive("release.backoff_initial_seconds", rl.backoff_initial_seconds)
    _require(rl.backoff_max_seconds >= rl.backoff_initial_seconds, "release.backoff_max_seconds",
             f">= release.backoff_initial_seconds ({rl.backoff_initial_seconds})", rl.backoff_max_seconds)
    _require(c.unit in {"user", "event"}, "contribution.unit", "'user' or 'event'", c.unit)
    _require(c.max_keys_per_user >= 1, "contribution.max_keys_per_user", ">= 1", c.max_keys_per_user)
    _require(b.period_seconds >= 1, "budget.period_seconds", ">= 1", b.period_seconds)
    _positive("budget.epsilon", b.epsilon)
    _probability("budget.delta", b.delta)
    _probability("budget.delta_prime", b.delta_prime)
    _require(b.delta_prime < b.delta, "budget.delta_prime", f"< budget.delta ({b.delta})", b.delta_prime)
    _require(b.lifetime_epsilon >= 0, "budget.lifetime_epsilon", ">= 0 (0 disables it)", b.lifetime_epsilon)
    _require(b.lifetime_delta == 0 or b.delta_prime < b.lifetime_delta < 1, "budget.lifetime_delta",
             f"0 (= budget.delta) or in (budget.delta_prime = {b.delta_prime}, 1)", b.lifetime_delta)
    if r.topk.enabled:
        _require(r.topk.k >= 1, "releases.topk.k", ">= 1", r.topk.k)
        _require(r.topk.k_bar >= r.topk.k, "releases.topk.k_bar", f">= releases.topk.k ({r.topk.k})", r.topk.k_bar)
        _positive("releases.topk.epsilon", r.topk.epsilon)
        _probability("releases.topk.delta", r.topk.delta)
    if r.alerts.enabled:
        _require(r.alerts.k >= 1, "releases.alerts.k", ">= 1", r.alerts.k)
        _positive("releases.alerts.epsilon", r.alerts.epsilon)
        _require(math.isfinite(r.alerts.threshold), "releases.alerts.threshold", "a finite number",
                 r.alerts.threshold)
        _require(r.alerts.noise in {"laplace", "exponential", "geometric"}, "releases.alerts.noise",
                 "one of laplace, exponential, geometric", r.alerts.noise)
        _require(r.alerts.noise != "geometric" or float(r.alerts.threshold).is_integer(),
                 "releases.alerts.threshold", "an integer with noise = 'geometric' (integer outputs)",
                 r.alerts.threshold)
        _require(0 <= r.alerts.theta < 1, "releases.alerts.theta", "in [0, 1) (0: the seed's optimum)",
                 r.alerts.theta)
        _probability("releases.alerts.confidence", r.alerts.confidence)
        _require(r.alerts.max_instances_per_period >= 0, "releases.alerts.max_instances_per_period",
                 ">= 0 (0: no limit)", r.alerts.max_instances_per_period)
        _require(bool(r.alerts.watchlist) or r.alerts.include_released_topk, "releases.alerts.watchlist",
                 "non-empty when include_released_topk is false", list(r.alerts.watchlist))
    if r.sample.enabled:
        _require(r.sample.scheme in {"pps", "ppswor", "none"}, "releases.sample.scheme",
                 "one of pps, ppswor, none", r.sample.scheme)
        _positive("releases.sample.tau", r.sample.tau)
        _positive("releases.sample.epsilon", r.sample.epsilon)
        _probability("releases.sample.delta", r.sample.delta)
    if r.argmax.enabled:
        _positive("releases.argmax.epsilon", r.argmax.epsilon)
        _probability("releases.argmax.delta", r.argmax.delta)
    if r.watch_topk.enabled:
        _require(r.watch_topk.k >= 1, "releases.watch_topk.k", ">= 1", r.watch_topk.k)
        _positive("releases.watch_topk.epsilon", r.watch_topk.epsilon)
        _require(r.watch_topk.noise in {"laplace", "exponential", "geometric"}, "releases.watch_topk.noise",
                 "one of geometric, laplace, exponential", r.watch_topk.noise)
    _require(0 <= config.metrics.port <= 65535, "metrics.port", "in [0, 65535]", config.metrics.port)
    _require(bool(config.metrics.host), "metrics.host", "a non-empty address", config.metrics.host)
    _require(0 <= config.dashboard.port <= 65535, "dashboard.port", "in [0, 65535]", config.dashboard.port)
    _require(bool(config.dashboard.host), "dashboard.host", "a non-empty address", config.dashboard.host)
    return config


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
    merged = _deep_copy(data)
    applied = _apply_env(merged, os.environ if environ is None else environ)
    try:
        return validate(_build("", Config, merged))
    except ConfigError as exc:
        message = str(exc)
        culprits = [env for setting, env in applied.items()
                    if message.startswith(setting + " ") or _names_unknown(message, setting)]
        if culprits:
            raise ConfigError(f"{message} (set by environment variable {', '.join(culprits)})") from None
        raise


def _names_unknown(message: str, setting: str) -> bool:
    """Whether an 'unknown setting' message is about ``setting`` (e.g. ``kafka.bootstrap``)."""
    section, _, name = setting.rpartition(".")
    where = f"in [{section}]" if section else "in the top level"
    return message.startswith("unknown setting") and where in message and f" {name}" in message.split(where)[0]


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
