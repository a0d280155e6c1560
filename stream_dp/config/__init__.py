"""Configuration: one TOML file, environment overrides, validation that names the setting at fault.

Load with :func:`load_config`. The default file is ``config/stream-dp.toml``; every setting there is
documented. Any setting can be overridden by an environment variable ``STREAM_DP_<SECTION>__<KEY>``
(nested tables add more ``__`` parts), e.g. ``STREAM_DP_KAFKA__BOOTSTRAP_SERVERS=broker:9092`` or
``STREAM_DP_RELEASES__TOPK__K=20``. Values from the environment are parsed as TOML values when they parse
(numbers, booleans, arrays), else taken as strings.

Secrets (``kafka.sasl_password``, ``redis.password``, and ``redis.url`` when it carries a password) can
also be read from a file: ``STREAM_DP_REDIS__PASSWORD_FILE=/run/secrets/redis_password`` sets
``redis.password`` to the file's text (one trailing newline stripped) -- the container-secrets
convention. The two passwords are pydantic ``SecretStr`` (``.get_secret_value()`` where a client needs
them), ``redis.url`` a string whose ``repr`` masks its password; secret values are never echoed in errors,
and :mod:`stream_dp.redact` masks them in output.

How it is built -- one module per job:

- the sections, each a frozen pydantic dataclass beside the settings of the same subsystem:
  :mod:`~stream_dp.config.kafka`, :mod:`~stream_dp.config.redis`, :mod:`~stream_dp.config.stream` (events,
  keys, contribution, windows), :mod:`~stream_dp.config.service` (the workers' loops, metrics, dashboard),
  :mod:`~stream_dp.config.budget`, :mod:`~stream_dp.config.releases` and :mod:`~stream_dp.config.histogram`
  (the release types); their fields carry pydantic's own constraints (strict types, ``Field(ge=…)``,
  ``Literal`` enumerations), rules between fields sit in each section's ``model_validator``
  (:mod:`~stream_dp.config.fields` is their vocabulary);
- :mod:`~stream_dp.config.model`: :class:`Config`, the sections together;
- :mod:`~stream_dp.config.sources`: the file's mapping, then the ``STREAM_DP_*`` environment, layered by
  pydantic-settings (TOML value syntax, ``*_FILE`` secrets, the tool variables' exemption);
- :mod:`~stream_dp.config.messages`: every validation error as a :class:`ConfigError` naming the setting,
  the allowed values, the value (unless secret) and the environment variable that set it;
- :mod:`~stream_dp.config.load`: :func:`load_config`, :func:`config_from_mapping`, :func:`with_settings`.

:class:`ConfigError` is defined in :mod:`stream_dp.errors` (importable from here too), so code that only
raises it does not load pydantic.
"""

from __future__ import annotations

from stream_dp.config.budget import BudgetConfig
from stream_dp.config.fields import AUTO_REPLICAS
from stream_dp.config.histogram import RELEASE_TYPES, HistogramConfig, ReleasesConfig
from stream_dp.config.kafka import MIN_SESSION_TIMEOUT_MS, KafkaConfig
from stream_dp.config.load import DEFAULT_CONFIG_PATH, config_from_mapping, load_config, with_settings
from stream_dp.config.model import SECTIONS, Config
from stream_dp.config.redis import RedisConfig, RedisUrl
from stream_dp.config.releases import (DOMAIN_ORDERS, DOMAIN_SOURCE_TYPES, NOISES, AlertsConfig, ArgmaxConfig,
                                       LearnedDomainSettings, SampleConfig, TopkConfig, WatchTopkConfig)
from stream_dp.config.service import DashboardConfig, IngestConfig, MetricsConfig, ReleaseConfig
from stream_dp.config.sources import (ENV_PREFIX, FILE_SETTINGS, SECRET_SETTINGS, TOOL_VARIABLES, Settings,
                                      environment_overrides)
from stream_dp.config.stream import FIRST_START, ContributionConfig, EventsConfig, KeysConfig, WindowsConfig, parse_window_start
from stream_dp.errors import ConfigError

__all__ = [
    "AUTO_REPLICAS", "DEFAULT_CONFIG_PATH", "DOMAIN_ORDERS", "DOMAIN_SOURCE_TYPES", "ENV_PREFIX", "FILE_SETTINGS",
    "FIRST_START", "MIN_SESSION_TIMEOUT_MS", "NOISES", "RELEASE_TYPES", "SECRET_SETTINGS", "SECTIONS",
    "TOOL_VARIABLES", "AlertsConfig", "ArgmaxConfig", "BudgetConfig", "Config", "ConfigError", "ContributionConfig",
    "DashboardConfig", "EventsConfig", "HistogramConfig", "IngestConfig", "KafkaConfig", "KeysConfig",
    "LearnedDomainSettings", "MetricsConfig", "RedisConfig", "RedisUrl", "ReleaseConfig", "ReleasesConfig",
    "SampleConfig", "Settings", "TopkConfig", "WatchTopkConfig", "WindowsConfig", "config_from_mapping",
    "environment_overrides", "load_config", "parse_window_start", "with_settings",
]
